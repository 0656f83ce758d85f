"""jax.ad_checkpoint (partix.ad_checkpoint): checkpoint (remat) and checkpoint_name."""
from partix._src.api import checkpoint, remat  # noqa: F401
from partix._src.checkpoint_policies import checkpoint_name  # noqa: F401
from partix import checkpoint_policies  # noqa: F401
