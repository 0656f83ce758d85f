"""nnx.State: the state of a module graph as a nested mapping from attribute names (and list
indices) to Variables, itself a pytree (keys in sorted order), and its flat form."""
from partix import tree_util as _tu
from partix._src.core import PartixError
from partix.nnx import filterlib
from partix.nnx import variables as _vars


def _sort_key(k):
  return (0, k, "") if isinstance(k, int) else (1, 0, str(k))


class State:
  """A nested mapping of the state of a module graph: s['linear']['kernel'] or
  s.linear.kernel is the Variable at that path."""
  __slots__ = ("_mapping",)

  def __init__(self, mapping=None):
    mapping = dict(mapping or {})
    object.__setattr__(self, "_mapping", {
        k: State(v) if isinstance(v, dict) else v for k, v in mapping.items()})

  # ---- mapping ----
  def __getitem__(self, key):
    return self._mapping[key]

  def __setitem__(self, key, value):
    self._mapping[key] = State(value) if isinstance(value, dict) else value

  def __delitem__(self, key):
    del self._mapping[key]

  def __contains__(self, key):
    return key in self._mapping

  def __iter__(self):
    return iter(self._mapping)

  def __len__(self):
    return len(self._mapping)

  def keys(self):
    return self._mapping.keys()

  def values(self):
    return self._mapping.values()

  def items(self):
    return self._mapping.items()

  def get(self, key, default=None):
    return self._mapping.get(key, default)

  def pop(self, key, *default):
    return self._mapping.pop(key, *default)

  def __getattr__(self, name):
    if name.startswith("__"):
      raise AttributeError(name)
    try:
      return self._mapping[name]
    except KeyError:
      raise AttributeError(f"State has no key {name!r} (its keys: {list(self._mapping)})") \
          from None

  def __setattr__(self, name, value):
    self[name] = value

  # ---- views ----
  def flat_state(self):
    return to_flat_state(self)

  def to_pure_dict(self):
    return to_pure_dict(self)

  def filter(self, first, /, *filters):
    states = split_state(self, first, *filters, _remainder_ok=True)
    return states[0] if not filters else states

  def split(self, first, /, *filters):
    states = split_state(self, first, *filters)
    return states[0] if not filters else states

  @staticmethod
  def merge(state, /, *states):
    return merge_state(state, *states)

  def replace_by_pure_dict(self, pure_dict):
    replace_by_pure_dict(self, pure_dict)

  def __repr__(self):
    return "State(" + _repr(self._mapping, 1) + ")"


def _repr(m, depth):
  if not m:
    return "{}"
  pad = "  " * depth
  lines = []
  for k, v in sorted(m.items(), key=lambda kv: _sort_key(kv[0])):
    body = _repr(v._mapping, depth + 1) if isinstance(v, State) else repr(v)
    lines.append(f"{pad}{k!r}: {body}")
  return "{\n" + ",\n".join(lines) + "\n" + "  " * (depth - 1) + "}"


def _state_flatten_with_keys(s):
  keys = sorted(s._mapping, key=_sort_key)
  return tuple((_tu.DictKey(k), s._mapping[k]) for k in keys), tuple(keys)


def _state_flatten(s):
  keys = sorted(s._mapping, key=_sort_key)
  return [s._mapping[k] for k in keys], tuple(keys)


def _state_unflatten(keys, children):
  s = State()
  s._mapping.update(zip(keys, children))
  return s


_tu.register_pytree_with_keys(State, _state_flatten_with_keys, _state_unflatten, _state_flatten)


class FlatState:
  """The (path, leaf) pairs of a State, paths as tuples of keys, in sorted order."""
  __slots__ = ("_items",)

  def __init__(self, items):
    self._items = list(items)

  def __iter__(self):
    return iter(self._items)

  def __len__(self):
    return len(self._items)

  def __getitem__(self, i):
    return self._items[i]

  @property
  def paths(self):
    return tuple(p for p, _ in self._items)

  @property
  def leaves(self):
    return [v for _, v in self._items]

  def to_nested_state(self):
    return from_flat_state(self._items)

  def __repr__(self):
    return "FlatState([\n" + "".join(f"  ({p!r}, {v!r}),\n" for p, v in self._items) + "])"


def _walk(m, prefix, out):
  for k in sorted(m, key=_sort_key):
    v = m[k]
    if isinstance(v, (State, dict)):
      _walk(v, prefix + (k,), out)
    else:
      out.append((prefix + (k,), v))


def to_flat_state(state):
  if isinstance(state, _vars.Variable):
    return FlatState([((), state)])
  out = []
  _walk(state, (), out)
  return FlatState(out)


def from_flat_state(items):
  root = State()
  for path, leaf in items:
    if not path:
      raise PartixError("[nnx.from_flat_state] an empty path needs no State: the leaf is "
                        "the state itself")
    node = root
    for k in path[:-1]:
      if k not in node._mapping:
        node._mapping[k] = State()
      node = node._mapping[k]
    node._mapping[path[-1]] = leaf
  return root


def to_pure_dict(state):
  """Nested plain dicts of the values (Variables replaced by their values)."""
  def pure(m):
    return {k: pure(v) if isinstance(v, (State, dict)) else (
        v.get_raw_value() if isinstance(v, _vars.Variable) else v) for k, v in m.items()}
  return pure(state)


def replace_by_pure_dict(state, pure_dict):
  for path, leaf in to_flat_state(state):
    node = pure_dict
    for k in path:
      if k not in node and str(k) in node:
        k = str(k)
      if k not in node:
        raise PartixError(f"[nnx.replace_by_pure_dict] the dict has no entry at path {path}")
      node = node[k]
    if isinstance(leaf, _vars.Variable):
      leaf.set_raw_value(node)


def split_leaves(leaves, filters):
  """(path, leaf) pairs grouped by the first filter each matches, and the paths none does."""
  preds = [filterlib.to_predicate(f) for f in filters]
  groups = [[] for _ in preds]
  rest = []
  for path, leaf in leaves:
    for g, p in zip(groups, preds):
      if p(path, leaf):
        g.append((path, leaf))
        break
    else:
      rest.append(path)
  return groups, rest


def split_state(state, first, *filters, _remainder_ok=False):
  """One State per filter; each leaf goes to the first filter it matches."""
  groups, rest = split_leaves(to_flat_state(state), (first,) + filters)
  if rest and not _remainder_ok:
    raise ValueError(f"Non-exhaustive filters, got a non-empty remainder: paths {rest[:5]}; "
                     "add `...` as the last filter to catch the rest")
  return tuple(from_flat_state(g) for g in groups)


def filter_state(state, first, *filters):
  states = split_state(state, first, *filters, _remainder_ok=True)
  return states[0] if not filters else states


def merge_state(state, *states):
  items = {}
  for s in (state,) + states:
    items.update(dict(to_flat_state(s)))
  return from_flat_state(sorted(items.items(), key=lambda kv: [_sort_key(k) for k in kv[0]]))


def map_state(f, state):
  return from_flat_state([(p, f(p, v)) for p, v in to_flat_state(state)])
