"""lax's convolutions (conv_general_dilated and its helpers), written over partix's primitives."""

__all__ = []
