"""numpy names built over partix's ops: choose, put, histograms, file I/O, ufunc, ..."""

__all__ = []
