"""nnx.metrics: metrics whose running totals are Variables (MetricState), so they update
inside nnx.jit and are written back: Average, Accuracy, MultiMetric."""
from partix import numpy as jnp
from partix._src.core import PartixError
from partix.nnx.module import Object
from partix.nnx.variables import Variable


class MetricState(Variable):
  __slots__ = ()


class Metric(Object):
  def reset(self):
    raise NotImplementedError

  def update(self, **kwargs):
    raise NotImplementedError

  def compute(self):
    raise NotImplementedError


class Average(Metric):
  """The mean of every value passed as `argname` to update (arrays count each element)."""

  def __init__(self, argname="values"):
    self.argname = argname
    self.total = MetricState(jnp.array(0, dtype=jnp.float32))
    self.count = MetricState(jnp.array(0, dtype=jnp.int32))

  def reset(self):
    self.total[...] = jnp.array(0, dtype=jnp.float32)
    self.count[...] = jnp.array(0, dtype=jnp.int32)

  def update(self, *, mask=None, **kwargs):
    if self.argname not in kwargs:
      raise TypeError(f"Expected keyword argument '{self.argname}'")
    values = kwargs[self.argname]
    if mask is not None and isinstance(values, (int, float)):
      raise ValueError(f"If mask is provided, {self.argname} should be a jax array")
    if isinstance(values, (int, float)):
      self.total[...] = self.total[...] + values
      self.count[...] = self.count[...] + 1
    elif mask is None:
      values = jnp.asarray(values)
      self.total[...] = self.total[...] + jnp.sum(values)
      self.count[...] = self.count[...] + values.size
    else:
      self.total[...] = self.total[...] + jnp.sum(values * jnp.asarray(mask, values.dtype))
      self.count[...] = self.count[...] + jnp.asarray(jnp.sum(mask), jnp.int32)

  def compute(self):
    return self.total[...] / self.count[...]


class Accuracy(Average):
  """The fraction of argmax(logits) equal to labels (or of logits > threshold for one
  probability per example)."""

  def __init__(self, threshold=None, *args, **kwargs):
    if threshold is not None and not isinstance(threshold, float):
      raise TypeError(f"Expected threshold to be a float, got {type(threshold)}")
    self.threshold = threshold
    super().__init__(*args, **kwargs)

  def update(self, *, logits, labels, **_):
    if self.threshold is not None:
      pred = jnp.asarray(logits > self.threshold, jnp.int32)
    else:
      if logits.ndim != labels.ndim + 1:
        raise ValueError(f"Expected logits.ndim==labels.ndim+1, got {logits.ndim} and "
                         f"{labels.ndim}")
      pred = jnp.argmax(logits, axis=-1)
    super().update(values=jnp.asarray(pred == labels, jnp.float32))


class MultiMetric(Metric):
  """Several metrics updated together: update(**kwargs) passes every keyword to each;
  compute() gives {name: value}."""

  def __init__(self, **metrics):
    for name, m in metrics.items():
      if not isinstance(m, Metric):
        raise PartixError(f"[nnx.MultiMetric] {name}={m!r} is not a metric")
    self._metric_names = tuple(metrics)
    for name, m in metrics.items():
      object.__setattr__(self, name, m)

  def reset(self):
    for name in self._metric_names:
      getattr(self, name).reset()

  def update(self, **updates):
    for name in self._metric_names:
      getattr(self, name).update(**updates)

  def compute(self):
    return {name: getattr(self, name).compute() for name in self._metric_names}
