"""jax.version: the JAX release whose API and semantics partix follows (what `jax.__version__`
says under partix.as_jax). partix's own version is partix.__version__."""
__version__ = "0.10.2"
__version_info__ = (0, 10, 2)
_version = __version__


def __getattr__(name):
  raise AttributeError(f"module 'partix.version' has no attribute {name!r}: partix does not "
                       f"provide jax.version.{name}")
