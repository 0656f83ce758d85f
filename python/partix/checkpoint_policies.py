"""jax.checkpoint_policies (partix.checkpoint_policies)."""
from partix._src.checkpoint_policies import (checkpoint_dots,  # noqa: F401
                                             checkpoint_dots_with_no_batch_dims,
                                             dots_saveable, dots_with_no_batch_dims_saveable,
                                             everything_saveable, nothing_saveable,
                                             save_any_names_but_these, save_from_both_policies,
                                             save_only_these_names)
