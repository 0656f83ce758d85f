"""jax.custom_batching: custom_vmap (a function with a batching rule of its own) and
sequential_vmap (one batched by a loop over the examples).

partix's vmap batches a traced program primitive by primitive in the core, which has no place
for a Python rule; so the rule is applied where vmap is given the custom_vmap function itself
(`vmap(f)`, nested vmaps included: the innermost applies it): the rule receives the whole
batch (batched arguments with their axis first) and its results are placed on out_axes.
Where the function is called inside a larger vmapped function (or a jit, or a custom_vjp,
inside the vmap), partix batches the function's own operations instead, which gives the same
values whenever the rule computes what vmap of the function computes. Outside vmap the function
runs as it is (jit, grad and the rest see its own operations)."""
import functools

from partix._src import tree_util as tu
from partix._src.batching import _per_leaf
from partix._src.core import PartixError, asarray
from partix._src.custom_derivatives import _positional
from partix._src.lax_ops import map as lax_map
import partix.numpy as jnp

__all__ = ["custom_vmap", "sequential_vmap"]


class _NoRule(PartixError, AttributeError):
  """A custom_vmap function called before def_vmap (JAX raises AttributeError)."""


class custom_vmap:  # noqa: N801 (JAX's name)
  """jax.custom_batching.custom_vmap: `f.def_vmap(rule)` gives f a batching rule
  rule(axis_size, in_batched, *args) -> (out, out_batched): in_batched holds one tree of bools
  per argument (whether each leaf is batched, its batch axis first), out_batched one bool per
  leaf of out (whether it is batched along its first axis). See the module's docstring for
  where partix applies the rule."""

  def __init__(self, fun):
    if not callable(fun):
      raise PartixError(f"[custom_vmap] {fun!r} is not callable")
    functools.update_wrapper(self, fun)
    self.fun = fun
    self.vmap_rule = None

  def def_vmap(self, vmap_rule):
    """Sets the batching rule; returns it unchanged (usable as a decorator)."""
    if not callable(vmap_rule):
      raise PartixError(f"[custom_vmap.def_vmap] {vmap_rule!r} is not callable")
    self.vmap_rule = vmap_rule
    return vmap_rule

  def __get__(self, obj, objtype=None):
    return self if obj is None else functools.partial(self, obj)

  def _check_rule(self):
    if self.vmap_rule is None:
      raise _NoRule(f"[custom_vmap] no batching rule defined for {self.__name__}: define one "
                    f"with {self.__name__}.def_vmap")

  def __call__(self, *args, **kwargs):
    self._check_rule()
    return self.fun(*_positional(self.fun, args, kwargs, "custom_vmap"))

  def _partix_custom_vmap(self, args, kwargs, in_axes, out_axes, axis_size):
    """vmap(self, in_axes, out_axes, axis_size=axis_size)(*args, **kwargs) through the rule
    (partix._src.batching.vmap calls this)."""
    api = "vmap"
    self._check_rule()
    n_pos = len(args)
    args = _positional(self.fun, args, kwargs, "custom_vmap")
    if isinstance(in_axes, (tuple, list)):
      if len(args) > n_pos:  # keyword arguments, now positional, are mapped on axis 0
        in_axes = tuple(in_axes) + (0,) * (len(args) - n_pos)
    elif len(args) > n_pos and in_axes is None:
      in_axes = (None,) * n_pos + (0,) * (len(args) - n_pos)
    leaves, tree = tu.tree_flatten(tuple(args))
    axes = _per_leaf(tuple(in_axes) if isinstance(in_axes, list) else in_axes, tree, api,
                     "in_axes")
    arrays, batched, sizes = [], [], set()
    for x, a in zip(leaves, axes):
      if a is None:
        arrays.append(x)
        batched.append(False)
        continue
      x = asarray(x, api=api)
      if not -x.ndim <= a < x.ndim:
        raise PartixError(f"[{api}] in_axes {a} is out of range for an argument of shape "
                          f"{tuple(x.shape)}")
      sizes.add(x.shape[a])
      arrays.append(jnp.moveaxis(x, a, 0))
      batched.append(True)
    if axis_size is not None:
      sizes.add(axis_size)
    if len(sizes) > 1:
      raise PartixError(f"[{api}] the mapped axes of the arguments have different sizes "
                        f"{sorted(sizes)}")
    if not sizes:
      raise PartixError(f"[{api}] no argument is mapped (every in_axes is None): give "
                        "axis_size")
    size = sizes.pop()
    moved = tu.tree_unflatten(tree, arrays)
    if not any(batched):
      out = self.fun(*moved)
      out_batched = tu.tree_map(lambda _: False, out)
    else:
      in_batched = list(tu.tree_unflatten(tree, batched))
      res = self.vmap_rule(size, in_batched, *moved)
      if not (isinstance(res, (tuple, list)) and len(res) == 2):
        raise PartixError(f"[custom_vmap] the rule of {self.__name__} must return a pair "
                          f"(out, out_batched), got {type(res).__name__}")
      out, out_batched = res
    out_leaves, out_tree = tu.tree_flatten(out)
    flags, flags_tree = tu.tree_flatten(out_batched)
    if flags_tree != out_tree:
      raise PartixError(f"[custom_vmap] the rule of {self.__name__} returned outputs of "
                        f"structure {out_tree} but out_batched of structure {flags_tree}")
    placed = []
    for v, b, a in zip(out_leaves, flags, _per_leaf(out_axes, out_tree, api, "out_axes")):
      v = asarray(v, api=api)
      if b and v.shape[:1] != (size,):
        raise PartixError(f"[custom_vmap] the rule of {self.__name__} marked an output of "
                          f"shape {tuple(v.shape)} batched, but its first axis is not the "
                          f"batch of {size}")
      if a is None:
        if b:
          raise PartixError(f"[{api}] out_axes is None for an output the rule of "
                            f"{self.__name__} batched")
        placed.append(v)
        continue
      if not b:
        v = jnp.broadcast_to(v, (size,) + tuple(v.shape))
      if not -v.ndim <= a < v.ndim:
        raise PartixError(f"[{api}] out_axes {a} is out of range for an output of rank "
                          f"{v.ndim - 1}")
      placed.append(jnp.moveaxis(v, 0, a))
    return tu.tree_unflatten(out_tree, placed)


def sequential_vmap(f):
  """jax.custom_batching.sequential_vmap: f as a custom_vmap whose rule runs f once per example
  in a loop (lax.map), for functions that do not batch otherwise."""

  f = custom_vmap(f)

  @f.def_vmap
  def rule(axis_size, in_batched, *args):
    flat, tree = tu.tree_flatten(list(args))
    flags = tu.tree_leaves(in_batched)
    mapped = [x for x, b in zip(flat, flags) if b]

    def one(xs):
      it = iter(xs)
      return f.fun(*tu.tree_unflatten(tree, [next(it) if b else x
                                             for x, b in zip(flat, flags)]))
    out = lax_map(one, mapped)
    return out, tu.tree_map(lambda _: True, out)
  return f
