"""Processes that fail or fork. Under mpirun -np 2, a process that fails (an uncaught exception,
sys.exit(3), a PartixError of its own, a program that ends early, os._exit) stops the job within
seconds, and the other process names it ("process 1 stopped: ...") instead of waiting the
collective timeout for it; a process merely slower than the other is waited for. A child
forked after the runtime started raises a clear error at its first program and exits
normally."""
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

_MPIRUN = shutil.which("mpirun")

# Both processes run one collective together, then process 1 does FAIL while process 0 waits
# for it in a second one.
_PROG = textwrap.dedent("""
  import os, sys, time
  import numpy as np
  import partix as jax
  jax.distributed.initialize()
  from partix.sharding import NamedSharding, PartitionSpec as P
  mesh = jax.make_mesh((jax.device_count(),), ("x",))
  s = NamedSharding(mesh, P("x"))
  total = jax.jit(lambda v: v.sum())
  x = jax.device_put(np.arange(16, dtype=np.float32), s)
  assert float(total(x)) == 120.0

  def main():
    if jax.process_index() == 1:
  {fail}
    if jax.process_index() == 0:
  {slow}
    y = jax.make_array_from_process_local_data(s, np.ones(8, np.float32))
    # One write per line: mpirun merges the processes' output, and a print of several
    # arguments is several writes that another process's line may fall between.
    sys.stdout.write(f"process {{jax.process_index()}}: total {{float(total(x + y))}}\\n")
    sys.stdout.flush()

  main()
""")


def _run_job(tmp_path, fail="pass", slow="pass", recovery=True):
  """Runs _PROG under mpirun -np 2 (2 devices each); returns (returncode, output, seconds)."""
  indent = lambda code: textwrap.indent(textwrap.dedent(code), "    ")
  prog = tmp_path / "prog.py"
  prog.write_text(_PROG.format(fail=indent(fail), slow=indent(slow)))
  # A hang would end at the collective timeout (30 s), past the bound the tests assert.
  env = dict(os.environ, PARTIX_NUM_CPU_DEVICES="2", PARTIX_COLLECTIVE_TIMEOUT_S="30",
             OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             OMPI_MCA_rmaps_base_oversubscribe="1")
  # --enable-recovery: mpirun leaves the surviving process running, so partix must end it.
  cmd = [_MPIRUN, "-np", "2"] + (["--enable-recovery"] if recovery else []) + [
      "-x", "PYTHONPATH", "-x", "PARTIX_NUM_CPU_DEVICES", "-x", "PARTIX_COLLECTIVE_TIMEOUT_S",
      sys.executable, str(prog)]
  start = time.monotonic()
  p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=90)
  return p.returncode, p.stdout + p.stderr, time.monotonic() - start


needs_mpirun = pytest.mark.skipif(_MPIRUN is None, reason="mpirun is not installed")
_BOUND_S = 20  # mpirun start-up and both processes' imports included


@needs_mpirun
@pytest.mark.parametrize("fail, cause", [
    ("raise ValueError('bad batch on purpose')",
     "process 1 stopped: uncaught ValueError: bad batch on purpose"),
    ("sys.exit(3)", "process 1 stopped: it exited with status 3"),
    # A PartixError of its own: this process's part does not fit the sharding.
    ("jax.make_array_from_process_local_data(s, np.ones((3, 5), np.float32))",
     "process 1 stopped: uncaught PartixError: [make_array_from_process_local_data]"),
    # Its program ends (the interpreter shuts down) while process 0 waits for it.
    ("return", "process 1 stopped: its program ended"),
], ids=["uncaught_exception", "sys_exit", "partix_error", "ends_early"])
def test_a_failing_process_stops_the_other_at_once_naming_it(tmp_path, fail, cause):
  _, out, seconds = _run_job(tmp_path, fail=fail)  # (mpirun --enable-recovery says 0)
  assert seconds < _BOUND_S, (seconds, out)
  assert cause in out, out
  # No process computed the step after the failure (a traceback may quote total(x) itself:
  # process 0 can be stopped while still returning from that first collective).
  assert "total 136.0" not in out, out


@needs_mpirun
def test_os_exit_ends_the_job_at_once(tmp_path):
  # os._exit runs no handler: mpirun itself ends the job when a process exits without
  # MPI_Finalize (with --enable-recovery the others would wait the collective timeout).
  rc, out, seconds = _run_job(tmp_path, fail="os._exit(3)", recovery=False)
  assert rc != 0, out
  assert seconds < _BOUND_S, (seconds, out)
  assert "total 136.0" not in out, out


@needs_mpirun
def test_a_slow_process_is_waited_for_and_both_exit_normally(tmp_path):
  # Process 1 waits 2 s in the collective for process 0 (busy, not ended): no error, and both
  # end with status 0.
  rc, out, seconds = _run_job(tmp_path, slow="time.sleep(2)")
  assert rc == 0, out
  assert out.count("total 136.0") == 2, out
  assert "stopped" not in out, out


_FORK_PROG = textwrap.dedent("""
  import os, sys
  import numpy as np
  import partix as jax
  from partix.sharding import NamedSharding, PartitionSpec as P
  mesh = jax.make_mesh((8,), ("x",))
  x = jax.device_put(np.arange(64, dtype=np.float32), NamedSharding(mesh, P("x")))
  total = jax.jit(lambda v: v.sum())
  assert float(total(x)) == 2016.0  # the runtime's threads have started
  pid = os.fork()
  if pid == 0:
    errors = []
    for what, run in [("jit", lambda: total(x)), ("eager", lambda: jax.numpy.ones(8) + 1)]:
      try:
        run()
        errors.append(f"{what}: no error")
      except jax.PartixError as e:
        if f"started in process {os.getppid()} before fork()" not in str(e):
          errors.append(f"{what}: {e}")
    if np.asarray(x)[63] != 63 or np.arange(4).sum() != 6:  # reading and numpy still work
      errors.append("host reads")
    print("child:", errors or "ok", flush=True)
    sys.exit(1 if errors else 0)  # a normal exit: handlers and destructors run, no hang
  _, status = os.waitpid(pid, 0)
  print("parent: child exit", os.waitstatus_to_exitcode(status), float(total(x * 2)), flush=True)
""")


def test_a_child_forked_after_start_raises_at_its_first_program_and_exits(tmp_path):
  prog = tmp_path / "fork.py"
  prog.write_text(_FORK_PROG)
  env = dict(os.environ, PARTIX_NUM_CPU_DEVICES="8")
  p = subprocess.run([sys.executable, str(prog)], env=env, capture_output=True, text=True,
                     timeout=60)
  out = p.stdout + p.stderr
  assert p.returncode == 0, out
  assert "child: ok" in out, out
  assert "parent: child exit 0 4032.0" in out, out
