"""partix.as_jax: an unmodified JAX program run with `python -m partix.as_jax` (and with -m
pytest-style module running), JAX's module names resolving to partix's, names partix lacks
failing with errors that say so; and optax, unmodified, training under it (when installed:
scripts/setup.sh puts optax in the project's venv) against a numpy AdamW."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

_PROGRAM = textwrap.dedent("""
  import sys
  import numpy as np
  import jax
  import jax.numpy as jnp
  from jax import lax
  from jax.sharding import NamedSharding, PartitionSpec as P
  from jax.flatten_util import ravel_pytree
  from jax.scipy.stats import norm
  import jax.typing, jax.dtypes
  assert __name__ == "__main__" and sys.argv[1:] == ["--flag", "3"], (__name__, sys.argv)
  mesh = jax.make_mesh((4, 2), ("x", "y"))
  x = jax.device_put(np.arange(16, dtype=np.float32).reshape(8, 2), NamedSharding(mesh, P("x")))
  f = jax.jit(jax.vmap(jax.grad(lambda v: jnp.sum(jnp.sin(v) ** 2))))
  g = f(x)
  flat, unravel = ravel_pytree({"a": jnp.ones(2), "b": jnp.zeros((2, 2))})
  print("grad", np.asarray(g).ravel().tolist())
  print("sharding", g.sharding.spec)
  print("ravel", flat.shape, unravel(flat)["b"].shape)
  print("norm", float(norm.cdf(0.0)))
  print("module", jax.__name__, jax.__version__, jnp.__name__, lax.__name__)
  assert jax.numpy is jnp and jax.jit is __import__("partix").jit
""")


def _run(tmp_path, *args):
  env = dict(os.environ, PARTIX_NUM_CPU_DEVICES="8")
  return subprocess.run([sys.executable, "-m", "partix.as_jax", *args], env=env,
                        capture_output=True, text=True, timeout=120, cwd=tmp_path)


def test_an_unmodified_jax_program_runs(tmp_path):
  (tmp_path / "prog.py").write_text(_PROGRAM)
  p = _run(tmp_path, "prog.py", "--flag", "3")
  assert p.returncode == 0, p.stdout + p.stderr
  out = dict(line.split(" ", 1) for line in p.stdout.strip().splitlines())
  x = np.arange(16, dtype=np.float32)
  np.testing.assert_allclose(eval(out["grad"]), 2 * np.sin(x) * np.cos(x), rtol=1e-5,
                             atol=1e-6)
  assert out["sharding"] == "P('x',)"
  assert out["ravel"] == "(6,) (2, 2)"
  assert float(out["norm"]) == 0.5
  assert out["module"] == "jax 0.10.2 partix.numpy partix.lax"


def test_missing_modules_and_names_say_partix_does_not_provide_them(tmp_path):
  (tmp_path / "missing.py").write_text(textwrap.dedent("""
    import jax, jax.numpy as jnp
    try:
      import jax.interpreters.xla
    except ImportError as e:
      print("module:", e)
    for obj, name in ((jax, "pure_callback_that_does_not_exist"), (jnp, "frobnicate"),
                      (jax.lax, "frobnicate")):
      try:
        getattr(obj, name)
      except AttributeError as e:
        print("name:", e)
  """))
  p = _run(tmp_path, "missing.py")
  assert p.returncode == 0, p.stdout + p.stderr
  assert "module: partix does not provide the JAX module 'jax.interpreters'" in p.stdout
  assert "partix does not provide jax.pure_callback_that_does_not_exist" in p.stdout
  assert "partix does not provide jax.numpy.frobnicate" in p.stdout
  assert "partix does not provide jax.lax.frobnicate" in p.stdout
  usage = _run(tmp_path)
  assert usage.returncode == 2 and "usage: python -m partix.as_jax" in usage.stderr


def test_module_form_runs_a_module(tmp_path):
  (tmp_path / "mod_here.py").write_text("import jax\nprint('ran', jax.jit.__module__)\n")
  env = dict(os.environ, PARTIX_NUM_CPU_DEVICES="8",
             PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
  p = subprocess.run([sys.executable, "-m", "partix.as_jax", "-m", "mod_here"], env=env,
                     capture_output=True, text=True, timeout=120)
  assert p.returncode == 0 and "ran partix._src.api" in p.stdout, p.stdout + p.stderr


def _numpy_adamw(params, grads_fn, steps, lr=1e-2, b1=0.9, b2=0.999, eps=1e-8, wd=1e-4):
  m = {k: np.zeros_like(v) for k, v in params.items()}
  v = {k: np.zeros_like(x) for k, x in params.items()}
  p = {k: x.copy() for k, x in params.items()}
  for t in range(1, steps + 1):
    g = grads_fn(p)
    for k in p:
      m[k] = b1 * m[k] + (1 - b1) * g[k]
      v[k] = b2 * v[k] + (1 - b2) * g[k] ** 2
      mh, vh = m[k] / (1 - b1 ** t), v[k] / (1 - b2 ** t)
      p[k] = p[k] - lr * (mh / (np.sqrt(vh) + eps) + wd * p[k])
  return p


def test_optax_trains_unmodified(tmp_path):
  import importlib.util
  if importlib.util.find_spec("optax") is None:  # (importing it here would import jax)
    pytest.skip("optax is not installed (scripts/setup.sh installs it)")
  (tmp_path / "train.py").write_text(textwrap.dedent("""
    import json, sys
    import numpy as np
    import jax, jax.numpy as jnp, optax
    r = np.random.default_rng(0)
    xs, ys = r.standard_normal((16, 3)).astype(np.float32), r.standard_normal(16).astype(np.float32)
    params = {"w": jnp.zeros(3), "b": jnp.zeros(())}
    tx = optax.adamw(1e-2, weight_decay=1e-4)
    state = tx.init(params)
    loss = lambda p: jnp.mean((xs @ p["w"] + p["b"] - ys) ** 2)

    @jax.jit
    def step(p, s):
      g = jax.grad(loss)(p)
      u, s = tx.update(g, s, p)
      return optax.apply_updates(p, u), s
    for _ in range(5):
      params, state = step(params, state)
    json.dump({k: np.asarray(v).tolist() for k, v in params.items()}, open(sys.argv[1], "w"))
  """))
  p = _run(tmp_path, "train.py", str(tmp_path / "out.json"))
  assert p.returncode == 0, p.stdout + p.stderr
  import json
  got = json.loads((tmp_path / "out.json").read_text())
  r = np.random.default_rng(0)
  xs, ys = r.standard_normal((16, 3)).astype(np.float64), r.standard_normal(16).astype(np.float64)

  def grads(p):
    e = xs @ p["w"] + p["b"] - ys
    return {"w": 2 * xs.T @ e / 16, "b": np.asarray(2 * e.mean())}
  want = _numpy_adamw({"w": np.zeros(3), "b": np.zeros(())}, grads, 5)
  np.testing.assert_allclose(got["w"], want["w"], rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(got["b"], want["b"], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("module", ["partix", "partix.numpy", "partix.lax", "partix.random",
                                    "partix.nn", "partix.sharding", "partix.tree_util",
                                    "partix.scipy.special"])
def test_every_public_module_names_what_it_lacks(module):
  import importlib
  m = importlib.import_module(module)
  jax_name = module.replace("partix", "jax", 1)
  with pytest.raises(AttributeError, match=f"partix does not provide {jax_name}.no_such_name"):
    m.no_such_name


def test_orbax_checkpoint_names_resolve_to_partix(tmp_path):
  # An Orbax-style save and restore onto another mesh, written against `orbax.checkpoint`.
  (tmp_path / "ocp.py").write_text(textwrap.dedent(f"""
    import numpy as np
    import jax
    import orbax.checkpoint as ocp
    from jax.sharding import NamedSharding, PartitionSpec as P
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    state = {{"w": jax.device_put(np.arange(16.0, dtype=np.float32).reshape(8, 2),
                                  NamedSharding(mesh, P("x", "y")))}}
    with ocp.CheckpointManager({str(tmp_path / "ckpt")!r},
                               options=ocp.CheckpointManagerOptions(max_to_keep=2)) as mgr:
      mgr.save(1, args=ocp.args.StandardSave(state))
      mgr.wait_until_finished()
      other = jax.make_mesh((8,), ("i",))
      target = {{"w": jax.ShapeDtypeStruct((8, 2), np.float32,
                                           sharding=NamedSharding(other, P("i")))}}
      out = mgr.restore(mgr.latest_step(), args=ocp.args.StandardRestore(target))
    print("restored", out["w"].sharding.spec, float(out["w"].sum()))
    try:
      import orbax.checkpoint.experimental_thing
    except ImportError as e:
      print("module:", e)
    print("package", ocp.__name__)
  """))
  p = _run(tmp_path, "ocp.py")
  assert p.returncode == 0, p.stdout + p.stderr
  assert "restored P('i',) 120.0" in p.stdout, p.stdout
  assert "partix does not provide the Orbax module 'orbax.checkpoint.experimental_thing'" in \
      p.stdout
  assert "package partix.orbax.checkpoint" in p.stdout


def test_flax_nnx_names_resolve_to_partix(tmp_path):
  (tmp_path / "fl.py").write_text(textwrap.dedent("""
    import jax
    from flax import nnx
    import flax.nnx.spmd
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    print("kernel", model.kernel.value.shape, nnx.__name__, flax.nnx.spmd.__name__)
    try:
      import flax.linen
    except ImportError as e:
      print("module:", e)
  """))
  p = _run(tmp_path, "fl.py")
  assert p.returncode == 0, p.stdout + p.stderr
  assert "kernel (3, 2) partix.nnx partix.nnx.spmd" in p.stdout, p.stdout
  assert "partix does not provide the Flax module 'flax.linen'" in p.stdout
