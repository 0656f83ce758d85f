"""lax's special functions, generic reductions and small names (mulhi, platform_dependent, custom_root, ...)."""

__all__ = []
