"""lax's XLA-style gather and scatter with their dimension-number types, written over partix's indexing."""

__all__ = []
