"""jax.transfer_guard: what happens when data moves between the host and the devices, or
between devices, per direction: 'allow', 'log' (a warning on an implicit transfer),
'disallow' (an error on an implicit transfer), 'log_explicit' and 'disallow_explicit' (also on
explicit ones). Explicit transfers are device_put, device_get and the make_array_from_*
constructors; implicit ones are host data given to an op or a jitted function, an array read
on the host (np.asarray, float(), printing), and an array moved to other devices by an op.
partix checks host-to-device and device-to-host transfers where Python starts them, and
device-to-device transfers of device_put onto another set of devices; moving an array between
shardings over the same devices is a computation on those devices, not a transfer (as JAX's
device_put reshards)."""
import contextlib
import contextvars
import logging

from partix import _core

PartixError = _core.PartixError

LEVELS = ("allow", "log", "disallow", "log_explicit", "disallow_explicit")
DIRECTIONS = ("host_to_device", "device_to_device", "device_to_host")
_levels = {d: contextvars.ContextVar(f"partix_transfer_guard_{d}", default="allow")
           for d in DIRECTIONS}
_log = logging.getLogger("partix")


def _check_level(level, api):
  if level not in LEVELS:
    raise PartixError(f"[{api}] unknown transfer guard level {level!r} (one of "
                      f"{', '.join(LEVELS)})")


@contextlib.contextmanager
def _guard(directions, level, api):
  _check_level(level, api)
  tokens = [(d, _levels[d].set(level)) for d in directions]
  try:
    yield
  finally:
    for d, t in reversed(tokens):
      _levels[d].reset(t)


def transfer_guard(level):
  """Sets the guard of every direction inside the `with` block."""
  return _guard(DIRECTIONS, level, "transfer_guard")


def transfer_guard_host_to_device(level):
  return _guard(("host_to_device",), level, "transfer_guard_host_to_device")


def transfer_guard_device_to_device(level):
  return _guard(("device_to_device",), level, "transfer_guard_device_to_device")


def transfer_guard_device_to_host(level):
  return _guard(("device_to_host",), level, "transfer_guard_device_to_host")


def check(direction, explicit, what):
  """Called where a transfer starts: raises or logs as the direction's guard says."""
  level = _levels[direction].get()
  if level == "allow":
    return
  kind = "explicit" if explicit else "implicit"
  blocked = level == "disallow_explicit" or (level == "disallow" and not explicit)
  logged = level == "log_explicit" or (level == "log" and not explicit)
  message = f"{direction.replace('_', '-')} transfer ({kind}) of {what}"
  if blocked:
    raise PartixError(f"[transfer_guard] Disallowed {message}: the guard is {level!r}")
  if logged:
    _log.warning("[transfer_guard] %s", message)
