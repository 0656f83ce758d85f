"""partix.orbax.checkpoint: Orbax's checkpoint API (`import orbax.checkpoint as ocp` becomes
`import partix.orbax.checkpoint as ocp`) over partix's sharded, crash-safe checkpoints
(partix.ckpt). CheckpointManager, CheckpointManagerOptions, args.StandardSave/StandardRestore
and PyTreeSave/PyTreeRestore, StandardCheckpointer, PyTreeCheckpointer, utils. Differences
from Orbax are listed in docs/orbax.md; a name partix does not provide raises AttributeError
saying so."""

from partix.orbax.checkpoint import args
from partix.orbax.checkpoint import utils
from partix.orbax.checkpoint.checkpoint_manager import (CheckpointManager,
                                                        CheckpointManagerOptions,
                                                        StepAlreadyExistsError)
from partix.orbax.checkpoint.checkpointers import (AsyncCheckpointer, Checkpointer,
                                                   PyTreeCheckpointer,
                                                   PyTreeCheckpointHandler,
                                                   StandardCheckpointer,
                                                   StandardCheckpointHandler)
from partix.orbax.checkpoint import checkpoint_manager as checkpoint_managers
from partix.orbax.checkpoint import checkpointers
from partix.orbax.checkpoint.args import CheckpointArgs

from partix.orbax.checkpoint import tree


def __getattr__(name):
  if name.startswith("__"):
    raise AttributeError(name)
  raise AttributeError(f"module 'orbax.checkpoint' has no attribute {name!r}: partix's Orbax "
                       f"API does not provide {name} (see docs/orbax.md)")
