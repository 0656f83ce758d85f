"""Runs JAX programs unmodified on partix.

  python -m partix.as_jax SCRIPT [ARGS...]   runs SCRIPT as __main__ with partix as `jax`
  python -m partix.as_jax -m MODULE [ARGS]  the same for a module (-m pytest ...)
  import partix.as_jax                      as a program's first import does the same

Every `jax.*` module partix provides is installed in sys.modules under JAX's name, so `import
jax`, `import jax.numpy as jnp` and `from jax.sharding import PartitionSpec` load partix, and
libraries written for JAX (optax) run on it; `orbax.checkpoint` is partix.orbax.checkpoint and
`flax.nnx` is partix.nnx. A module partix lacks raises ImportError, and a name it lacks
AttributeError, each saying partix does not provide it."""
import importlib
import importlib.abc
import importlib.machinery
import runpy
import sys
import types

# JAX's module name -> partix's (imported on install; all are pure aliases).
MODULES = {
    "jax": "partix",
    "jax.numpy": "partix.numpy",
    "jax.lax": "partix.lax",
    "jax.sharding": "partix.sharding",
    "jax.tree_util": "partix.tree_util",
    "jax.tree": "partix.tree",
    "jax.random": "partix.random",
    "jax.nn": "partix.nn",
    "jax.nn.initializers": "partix.nn.initializers",
    "jax.typing": "partix.typing",
    "jax.dtypes": "partix.dtypes",
    "jax.flatten_util": "partix.flatten_util",
    "jax.ad_checkpoint": "partix.ad_checkpoint",
    "jax.custom_derivatives": "partix.custom_derivatives",
    "jax.profiler": "partix.profiler",
    "jax.debug": "partix.debug",
    "jax.distributed": "partix.distributed",
    "jax.experimental": "partix.experimental",
    "jax.experimental.shard_map": "partix.experimental.shard_map",
    "jax.experimental.mesh_utils": "partix.experimental.mesh_utils",
    "jax.experimental.pjit": "partix.experimental.pjit",
    "jax.experimental.multihost_utils": "partix.experimental.multihost_utils",
    "jax.scipy": "partix.scipy",
    "jax.scipy.special": "partix.scipy.special",
    "jax.scipy.stats": "partix.scipy.stats",
    "jax.scipy.stats.norm": "partix.scipy.stats.norm",
    "jax.checkpoint_policies": "partix.checkpoint_policies",
    "jax.test_util": "partix.test_util",
    "jax.core": "partix.core",
    "jax.extend": "partix.extend",
    "jax.extend.core": "partix.extend.core",
    "jax.stages": "partix.stages",
    "jax.ops": "partix.ops",
    "jax.image": "partix.image",
    "jax.errors": "partix.errors",
    "jax.custom_batching": "partix.custom_batching",
    "jax.version": "partix.version",
    "jax.ref": "partix.ref",
    # Orbax's checkpoint API over partix's checkpoints (docs/orbax.md).
    "orbax": "partix.orbax",
    "orbax.checkpoint": "partix.orbax.checkpoint",
    "orbax.checkpoint.args": "partix.orbax.checkpoint.args",
    "orbax.checkpoint.utils": "partix.orbax.checkpoint.utils",
    "orbax.checkpoint.tree": "partix.orbax.checkpoint.tree",
    "orbax.checkpoint.checkpoint_manager": "partix.orbax.checkpoint.checkpoint_manager",
    "orbax.checkpoint.checkpoint_managers": "partix.orbax.checkpoint.checkpoint_manager",
    "orbax.checkpoint.checkpointers": "partix.orbax.checkpoint.checkpointers",
    # Flax NNX's module API (docs/nnx.md).
    "flax": "partix.nnx.as_flax",
    "flax.nnx": "partix.nnx",
    "flax.nnx.spmd": "partix.nnx.spmd",
    "flax.nnx.nn": "partix.nnx.nn",
    "flax.nnx.nn.initializers": "partix.nnx.nn.initializers",
    "flax.nnx.nn.activations": "partix.nnx.nn.activations",
    "flax.nnx.training": "partix.nnx.training",
    "flax.nnx.training.metrics": "partix.nnx.training.metrics",
    "flax.nnx.training.optimizer": "partix.nnx.training.optimizer",
}
# The top-level packages MODULES covers (and whose they are): any other module under them is
# one partix lacks.
_ROOTS = {"jax": "JAX", "orbax": "Orbax", "flax": "Flax"}


class _Missing(importlib.abc.MetaPathFinder):
  """Answers every other `jax.*` (`orbax.*`, `flax.*`) import with an ImportError naming it."""

  def find_spec(self, name, path=None, target=None):
    root = name.split(".")[0]
    if root in _ROOTS:
      if name in MODULES:
        return None
      raise ImportError(f"partix does not provide the {_ROOTS[root]} module {name!r} (running "
                        "under partix.as_jax)", name=name)
    return None


# The JAX release whose semantics partix implements (docs/semantics.md): what
# `jax.__version__` says under as_jax, for libraries that choose code paths by it.
JAX_VERSION = "0.10.2"


class _Jax(types.ModuleType):
  """`jax` under as_jax: partix's top-level module seen through JAX's name and version. Every
  attribute is partix's (set on partix as well, so both stay one namespace)."""

  def __init__(self, partix):
    super().__init__("jax", partix.__doc__)
    object.__setattr__(self, "_partix", partix)
    object.__setattr__(self, "__version__", JAX_VERSION)
    object.__setattr__(self, "__path__", [])  # a package: `import jax.numpy` looks here

  def __getattr__(self, name):
    return getattr(self._partix, name)

  def __setattr__(self, name, value):
    setattr(self._partix, name, value)

  def __dir__(self):
    return dir(self._partix)


def install():
  """Installs partix under JAX's module names (idempotent)."""
  for jax_name, ours in MODULES.items():
    if jax_name not in sys.modules:
      module = importlib.import_module(ours)
      if jax_name in _ROOTS and not hasattr(module, "__path__"):
        module.__path__ = []  # a package, so `import flax.linen` reaches _Missing
      sys.modules[jax_name] = _Jax(module) if jax_name == "jax" else module
  if not any(isinstance(f, _Missing) for f in sys.meta_path):
    sys.meta_path.insert(0, _Missing())


def main(argv):
  """python -m partix.as_jax SCRIPT [ARGS...] | -m MODULE [ARGS...]"""
  if len(argv) < 2 or (argv[1] == "-m" and len(argv) < 3):
    print("usage: python -m partix.as_jax SCRIPT [ARGS...]  or  python -m partix.as_jax -m "
          "MODULE [ARGS...]", file=sys.stderr)
    return 2
  if argv[1] == "-m":
    sys.argv = [argv[2]] + argv[3:]
    runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
  else:
    sys.argv = argv[1:]
    runpy.run_path(argv[1], run_name="__main__")
  return 0


install()

if __name__ == "__main__":
  sys.exit(main(sys.argv))
