from partix.nnx.training import metrics, optimizer  # noqa: F401
