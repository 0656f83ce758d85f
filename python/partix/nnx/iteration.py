"""nnx.vmap and nnx.scan over functions of modules (partix.vmap and partix.lax.scan on the
modules' state). A module mapped over an axis has every array of its state mapped over that
axis; a module with in_axes None is broadcast (its changes inside are not written back)."""
import functools

import partix
from partix._src.core import PartixError
from partix.nnx import graph, statelib
from partix.nnx.variables import Variable
from partix.nnx.transforms import (_MISSING, _Extracted, _decorator, _finish, _node_list,
                                   _rebuild, _split_out)


class Carry:
  """The marker of scan's carried argument and result in in_axes / out_axes."""


def _per_arg(axes, n, api):
  if isinstance(axes, (int, type(None))) or axes is Carry:
    return (axes,) * n
  axes = tuple(axes)
  if len(axes) != n:
    raise PartixError(f"[nnx.{api}] in_axes {axes} has {len(axes)} entries for {n} arguments")
  return axes


def _check_int_axis(ax, what, api):
  if ax is not None and not isinstance(ax, int):
    raise PartixError(f"[nnx.{api}] {what} {ax!r}: partix.nnx maps a module over one int axis "
                      "(or None)")


def vmap(f=_MISSING, *, in_axes=0, out_axes=0, axis_name=None, axis_size=None,
         spmd_axis_name=None, transform_metadata=None, **unused):
  """nnx.vmap: f mapped over an axis of its arguments; modules in the arguments are mapped
  over that axis of each of their arrays, modules returned are stacked along out_axes."""
  def make(fun):
    @functools.wraps(fun)
    def wrapper(*args):
      axes = _per_arg(in_axes, len(args), "vmap")
      for ax, a in zip(axes, args):
        if _node_list(a):
          _check_int_axis(ax, "in_axes", "vmap")
      exs = [_Extracted(a) for a in args]
      out_ax = out_axes if isinstance(out_axes, int) else 0
      box = {}

      def inner(states, others):
        rebuilt = [_rebuild(ex.treedef, ex.node_pos, ex.graphdef, st, oth, ex.n)[0]
                   for ex, st, oth in zip(exs, states, others)]
        out = fun(*rebuilt)
        mapped = [a for a, ax in zip(rebuilt, axes) if ax is not None]
        st, oth, box["info"] = _split_out(_node_list(mapped), {}, out)
        box["mapped"] = [i for i, ax in enumerate(axes) if ax is not None]
        return st, oth
      state_axes = tuple(axes)
      res_state, res_others = partix.vmap(
          inner, in_axes=(state_axes, state_axes), out_axes=(out_ax, out_axes),
          axis_name=axis_name, axis_size=axis_size, spmd_axis_name=spmd_axis_name)(
              [ex.state for ex in exs], [ex.others for ex in exs])
      out = _finish_mapped(args, box, res_state, res_others)
      name = dict(transform_metadata or {}).get("partition_name")
      _add_axis(_node_list(out), out_ax, name)
      return out
    return wrapper
  return _decorator(f, make)


def _add_axis(nodes, axis, name):
  """The sharding annotations of the Variables built by vmap gain the mapped axis (named
  `name`, or None: not sharded), as Flax's transform_metadata does."""
  seen = set()
  for node in nodes:
    for _, x in graph.iter_graph(node):
      if isinstance(x, Variable) and id(x) not in seen and x.get_metadata("out_sharding", None):
        seen.add(id(x))
        spec = list(x.out_sharding)
        spec.insert(axis if axis >= 0 else len(spec) + 1 + axis, name)
        x.set_metadata(out_sharding=tuple(spec))


def _finish_mapped(args, box, state, others):
  """Results built, and the mapped argument modules updated with their new (mapped) state."""
  out = _finish({}, box["info"], state, others, write_back=False)
  _write_parts(_node_list([args[i] for i in box["mapped"]]), statelib.to_flat_state(state))
  return out


def _remove_axis(nodes, axis):
  """Inside scan, a sliced Variable's out_sharding loses the scanned axis."""
  seen = set()
  for node in nodes:
    for _, x in graph.iter_graph(node):
      spec = x.get_metadata("out_sharding", None) if isinstance(x, Variable) else None
      ndim = getattr(x.get_raw_value(), "ndim", None) if spec else None
      if spec and id(x) not in seen and ndim is not None and len(spec) == ndim + 1:
        seen.add(id(x))
        x.set_metadata(out_sharding=tuple(spec[:axis]) + tuple(spec[axis + 1:]))


def _write_parts(nodes, flat, values_only=False):
  """Each argument node updated from its part (paths (0, k, ...)) of a [inputs, outputs]
  state (only the values with values_only: the nodes keep their metadata)."""
  for k, node in enumerate(nodes):
    part = [(p[2:], v.get_raw_value() if values_only and isinstance(v, Variable) else v)
            for p, v in flat if len(p) > 2 and p[0] == 0 and p[1] == k]
    if part:
      graph.update(node, statelib.from_flat_state(part))


def scan(f=_MISSING, *, length=None, reverse=False, unroll=1, in_axes=(Carry, 0),
         out_axes=(Carry, 0), transform_metadata=None, **unused):
  """nnx.scan: f(carry, x) -> (carry, y) run along axis 0 of the x arguments (arrays or
  modules whose state is stacked), as lax.scan; in_axes marks the carried argument with
  nnx.Carry, mapped ones with 0 and broadcast ones with None. out_axes is (Carry, 0)."""
  def make(fun):
    @functools.wraps(fun)
    def wrapper(*args):
      axes = _per_arg(in_axes, len(args), "scan")
      if axes.count(Carry) > 1 or any(a not in (Carry, 0, None) for a in axes):
        raise PartixError(f"[nnx.scan] in_axes {in_axes}: partix.nnx takes one nnx.Carry and "
                          "otherwise 0 or None")
      if tuple(out_axes) not in ((Carry, 0),) and out_axes is not Carry:
        raise PartixError(f"[nnx.scan] out_axes {out_axes}: partix.nnx takes (nnx.Carry, 0) "
                          "or nnx.Carry")
      ci = axes.index(Carry) if Carry in axes else None
      xs_idx = [i for i, a in enumerate(axes) if a == 0 and a is not Carry]
      carry_ex = _Extracted(args[ci]) if ci is not None else None
      xs_ex = [_Extracted(args[i]) for i in xs_idx]
      box = {}

      def body(carry, xs):
        full = list(args)
        objects = {}
        if carry_ex is not None:
          full[ci], objects = _rebuild(carry_ex.treedef, carry_ex.node_pos, carry_ex.graphdef,
                                       carry[0], carry[1], carry_ex.n)
        for i, ex, (st, oth) in zip(xs_idx, xs_ex, xs):
          full[i], _ = _rebuild(ex.treedef, ex.node_pos, ex.graphdef, st, oth, ex.n)
          _remove_axis(_node_list(full[i]), 0)
        out = fun(*full)
        c_out, y = (out, None) if out_axes is Carry else out
        cst, coth, box["carry"] = _split_out([], {}, c_out)
        yst, yoth, box["y"] = _split_out(_node_list([full[i] for i in xs_idx]), {}, y)
        return (cst, coth), (yst, yoth)
      init = (carry_ex.state, carry_ex.others) if carry_ex is not None else (
          statelib.State(), [])
      xs = [(ex.state, ex.others) for ex in xs_ex]
      (cst, coth), (yst, yoth) = partix.lax.scan(body, init, xs, length=length,
                                                 reverse=reverse, unroll=unroll)
      carry_out = _finish({}, box["carry"], cst, coth, write_back=False)
      ys_out = _finish({}, box["y"], yst, yoth, write_back=False)
      _write_parts(_node_list([args[i] for i in xs_idx]), statelib.to_flat_state(yst),
                   values_only=True)
      return carry_out if out_axes is Carry else (carry_out, ys_out)
    return wrapper
  return _decorator(f, make)
