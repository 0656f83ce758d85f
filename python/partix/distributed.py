"""partix.distributed: multi-process start-up (as jax.distributed), under mpirun."""
from partix import _core


def initialize(coordinator_address=None, num_processes=None, process_id=None,
               local_device_ids=None, **kw):
  """Joins the job Open MPI launched (mpirun -np N python prog.py); without mpirun it is one
  process and nothing changes. The coordinator arguments of JAX are accepted and unused: MPI
  knows the job."""
  _core.distributed_initialize()


def shutdown():
  pass


def is_initialized():
  return _core.is_multi_process()
