"""Ordering tokens (jax.lax.create_token, after_all, jax.extend.core.Token). partix runs one
program's effects in program order, so a token orders nothing itself: it is a value with no
data that passes through jit, vmap and control flow as an empty pytree, for programs written
to thread one."""
from partix._src import tree_util as tu
from partix._src.core import Array, PartixError


class Token:
  """A token: no data; every token is equal to every other."""
  __slots__ = ()

  def __repr__(self):
    return "Token()"

  def __eq__(self, other):
    return isinstance(other, Token)

  def __hash__(self):
    return hash(Token)

  def block_until_ready(self):
    return self


tu.register_pytree_node(Token, lambda t: ((), None), lambda aux, children: Token())


def _check(api, operands):
  for x in tu.tree_leaves(operands):
    if not isinstance(x, (Array, Token)) and not hasattr(x, "shape"):
      raise PartixError(f"[{api}] operand {x!r} is neither an array nor a token")


def create_token(*operands):
  """lax.create_token: a new token (the operands are ignored, as in JAX)."""
  del operands
  return Token()


def after_all(*operands):
  """lax.after_all: a token that follows its operands (tokens or arrays)."""
  _check("after_all", operands)
  return Token()
