"""The cost of calling an already-compiled jit function from Python on small arrays, partix
against JAX, alternating in one run.

  PYTHONPATH=build/python python bench/py_dispatch.py [--rounds 15] [--calls 300]

f(x, y) = x * y + 1 on float32[8] (default placement) and float32[64, 64] ((4, 2)-sharded on 8
devices; one device with 1), each call followed by block_until_ready (partix runs synchronously,
so this is the whole round trip on both sides). Each side runs in its own process (partix with
this interpreter, JAX with the venv below); the parent asks them in turn for one batch of calls
per round, so drifts of the machine's speed hit both. Printed: min and median per-call
microseconds over the rounds, and partix/JAX of the medians.

JAX lives outside the repository in ~/.cache/partix-jax-venv; make it with
  python3 -m venv ~/.cache/partix-jax-venv && ~/.cache/partix-jax-venv/bin/pip install jax numpy
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

JAX_PY = os.path.expanduser(os.environ.get("PARTIX_JAX_PYTHON",
                                           "~/.cache/partix-jax-venv/bin/python"))


def worker(kind, devices):
  import numpy as np
  if kind == "jax":
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P
  else:
    os.environ["PARTIX_NUM_CPU_DEVICES"] = str(devices)
    import partix as jax
    from partix.sharding import NamedSharding, PartitionSpec as P
  f = jax.jit(lambda x, y: x * y + 1)
  small = np.arange(8, dtype=np.float32)
  big = np.arange(64 * 64, dtype=np.float32).reshape(64, 64) / 4096
  if devices == 8:
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    s = NamedSharding(mesh, P("x", "y"))
    name = "f32[64,64] (4,2)-sharded"
  else:
    mesh = jax.make_mesh((1,), ("x",))
    s = NamedSharding(mesh, P())
    name = "f32[64,64]"
  cases = {"f32[8]": (jax.device_put(small), jax.device_put(small)),
           name: (jax.device_put(big, s), jax.device_put(big, s))}
  for x, y in cases.values():
    for _ in range(50):
      f(x, y).block_until_ready()  # compile and warm
  print(json.dumps(list(cases)), flush=True)
  for line in sys.stdin:
    calls = int(line)
    out = {}
    for case, (x, y) in cases.items():
      t0 = time.perf_counter()
      for _ in range(calls):
        f(x, y).block_until_ready()
      out[case] = (time.perf_counter() - t0) / calls * 1e6
    print(json.dumps(out), flush=True)


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--rounds", type=int, default=15)
  ap.add_argument("--calls", type=int, default=300)
  ap.add_argument("--devices", type=int, nargs="*", default=[1, 8])
  ap.add_argument("--worker", choices=["partix", "jax"])
  ap.add_argument("--worker-devices", type=int)
  a = ap.parse_args()
  if a.worker:
    return worker(a.worker, a.worker_devices)
  if not os.path.exists(JAX_PY) or subprocess.run(
      [JAX_PY, "-c", "import jax"], capture_output=True).returncode != 0:
    print(f"JAX is not installed at {JAX_PY}; make it with\n  python3 -m venv "
          "~/.cache/partix-jax-venv && ~/.cache/partix-jax-venv/bin/pip install jax numpy\n"
          "(or point PARTIX_JAX_PYTHON at a Python that has jax)")
    return 0
  print(f"{'devices':>7}  {'case':<26} {'partix min/med us':>18} {'jax min/med us':>16}  "
        "partix/jax (medians)")
  for n in a.devices:
    procs = {k: subprocess.Popen([py, os.path.abspath(__file__), "--worker", k,
                                  "--worker-devices", str(n)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True, env=dict(os.environ))
             for k, py in (("partix", sys.executable), ("jax", JAX_PY))}
    names = {k: json.loads(p.stdout.readline()) for k, p in procs.items()}
    times = {k: {c: [] for c in names[k]} for k in procs}
    for _ in range(a.rounds):
      for k, p in procs.items():  # in turn: partix, then JAX, each round
        p.stdin.write(f"{a.calls}\n")
        p.stdin.flush()
        for c, t in json.loads(p.stdout.readline()).items():
          times[k][c].append(t)
    for p in procs.values():
      p.stdin.close()
      p.wait()
    for c in names["partix"]:
      pt, jt = times["partix"][c], times["jax"][c]
      pm, jm = statistics.median(pt), statistics.median(jt)
      print(f"{n:>7}  {c:<26} {min(pt):>8.1f} /{pm:>8.1f} {min(jt):>7.1f} /{jm:>7.1f}  "
            f"{pm / jm:.2f}x", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
