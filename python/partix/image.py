"""jax.image: image resampling (resize, scale_and_translate) with JAX's kernels."""
from partix._src.image_scale import ResizeMethod, resize, scale_and_translate  # noqa: F401

__all__ = ["ResizeMethod", "resize", "scale_and_translate"]


def __getattr__(name):
  raise AttributeError(f"module 'partix.image' has no attribute {name!r}: partix does not "
                       f"provide jax.image.{name}")
