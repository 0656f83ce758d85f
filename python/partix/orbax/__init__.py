"""partix.orbax: Orbax's names over partix (`import partix.orbax.checkpoint as ocp`)."""

from partix.orbax import checkpoint
