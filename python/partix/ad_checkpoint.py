"""jax.ad_checkpoint (partix.ad_checkpoint): checkpoint (remat), checkpoint_name, and
saved_residuals / print_saved_residuals (what differentiating a function keeps for the
backward pass)."""
from partix._src.api import checkpoint, remat  # noqa: F401
from partix._src.checkpoint_policies import checkpoint_name  # noqa: F401
from partix._src.residuals import print_saved_residuals, saved_residuals  # noqa: F401
from partix import checkpoint_policies  # noqa: F401
