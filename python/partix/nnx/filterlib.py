"""Filters select Variables by type, tag or path, as Flax NNX's do: a Variable type, a string
(a tag), `...` / True (everything), None / False (nothing), a predicate f(path, value), or a
list/tuple of filters (any of them)."""
from partix._src.core import PartixError


class OfType:
  def __init__(self, type):
    self.type = type

  def __call__(self, path, x):
    return isinstance(x, self.type) or (isinstance(x, type) and issubclass(x, self.type))

  def __repr__(self):
    return f"OfType({self.type.__name__})"

  def __eq__(self, other):
    return isinstance(other, OfType) and other.type is self.type

  def __hash__(self):
    return hash((OfType, self.type))


class WithTag:
  def __init__(self, tag):
    self.tag = tag

  def __call__(self, path, x):
    return getattr(x, "tag", None) == self.tag if hasattr(x, "get_metadata") else False

  def __repr__(self):
    return f"WithTag({self.tag!r})"


class PathContains:
  def __init__(self, key):
    self.key = key

  def __call__(self, path, x):
    return self.key in path

  def __repr__(self):
    return f"PathContains({self.key!r})"


class Any:
  def __init__(self, *filters):
    self.predicates = tuple(to_predicate(f) for f in filters)

  def __call__(self, path, x):
    return any(p(path, x) for p in self.predicates)

  def __repr__(self):
    return f"Any{self.predicates}"


class All:
  def __init__(self, *filters):
    self.predicates = tuple(to_predicate(f) for f in filters)

  def __call__(self, path, x):
    return all(p(path, x) for p in self.predicates)

  def __repr__(self):
    return f"All{self.predicates}"


class Not:
  def __init__(self, filter):
    self.predicate = to_predicate(filter)

  def __call__(self, path, x):
    return not self.predicate(path, x)

  def __repr__(self):
    return f"Not({self.predicate!r})"


class Everything:
  def __call__(self, path, x):
    return True

  def __repr__(self):
    return "Everything()"


class Nothing:
  def __call__(self, path, x):
    return False

  def __repr__(self):
    return "Nothing()"


def to_predicate(f):
  if isinstance(f, (OfType, WithTag, PathContains, Any, All, Not, Everything, Nothing)):
    return f
  if f is Ellipsis or f is True:
    return Everything()
  if f is None or f is False:
    return Nothing()
  if isinstance(f, type):
    return OfType(f)
  if isinstance(f, str):
    return WithTag(f)
  if isinstance(f, (list, tuple)):
    return Any(*f)
  if callable(f):
    return f
  raise PartixError(f"[nnx] {f!r} is not a filter (a Variable type, a tag string, ..., None, "
                    "a predicate f(path, value), or a list of filters)")
