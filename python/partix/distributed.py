"""partix.distributed: multi-process start-up (as jax.distributed), under mpirun."""
import os
import sys

from partix import _core

_previous_excepthook = None


def initialize(coordinator_address=None, num_processes=None, process_id=None,
               local_device_ids=None, **kw):
  """Joins the job Open MPI launched (mpirun -np N python prog.py); without mpirun it is one
  process and nothing changes. The coordinator arguments of JAX are accepted and unused: MPI
  knows the job.

  A process that then fails tells the others, whose pending or next collective raises
  PartixError "process N stopped: ..." at once instead of waiting for it: an uncaught exception
  (named by its type and message), an exit with a nonzero status (sys.exit(1)), or a program
  that ended while the others still wait for it in a collective."""
  _install_failure_hook()
  _core.distributed_initialize()


def shutdown():
  pass


def is_initialized():
  return _core.is_multi_process()


def _under_mpirun():
  try:
    return int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1")) > 1
  except ValueError:
    return False


def _excepthook(exc_type, exc, tb):
  """An uncaught exception ends this process: after its traceback, the job's other processes
  hear why (the exit status alone would tell them less)."""
  (_previous_excepthook or sys.__excepthook__)(exc_type, exc, tb)
  try:
    _core.distributed_notify_failure(f"uncaught {exc_type.__name__}: {exc}")
  except Exception:  # noqa: BLE001 - the process is ending; the exit status still tells them
    pass


def _install_failure_hook():
  """Chains _excepthook before the current sys.excepthook, once. Exits with a nonzero status
  (sys.exit(n), os._exit aside) are reported by the runtime's own exit handler."""
  global _previous_excepthook
  if sys.excepthook is _excepthook:
    return
  _previous_excepthook = sys.excepthook
  sys.excepthook = _excepthook
