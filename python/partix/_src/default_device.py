"""jax.default_device: the device where uncommitted work goes inside a `with` block on this
thread (arrays made from host data, device_put without a target, and jitted calls whose
arguments are all uncommitted); the C++ core keeps the choice per thread."""
import contextlib

from partix import _core
from partix._src.sharding import Device

PartixError = _core.PartixError


def _device_of(device, api):
  if device is None:
    return None
  if isinstance(device, Device):
    return device._d
  raise PartixError(f"[{api}] expected a partix Device (an entry of partix.devices()) or None, "
                    f"got {device!r}")


@contextlib.contextmanager
def default_device(device):
  """Inside the block, uncommitted work runs on `device` (None: this process's first)."""
  previous = _core.set_default_device(_device_of(device, "default_device"))
  try:
    yield
  finally:
    _core.set_default_device(previous)


def set_default_device(device, api="config.update('jax_default_device')"):
  """jax.config.update('jax_default_device', device): the choice for this thread from now."""
  _core.set_default_device(_device_of(device, api))
