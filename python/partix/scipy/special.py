"""jax.scipy.special (partix.scipy.special): the special functions partix computes. The others
(gammaln, digamma, ...) raise AttributeError saying partix does not provide them."""
import numpy as _np

from partix import lax as _lax
from partix import numpy as _jnp
from partix.nn import logsumexp  # noqa: F401

__all__ = ["erf", "erfc", "erfinv", "expit", "logit", "logsumexp", "xlogy", "xlog1py", "ndtr",
           "ndtri", "entr"]


def _float(x):
  x = _jnp.asarray(x)
  return x if _jnp.issubdtype(x.dtype, _jnp.floating) else x.astype(_jnp.float32)


def erf(x):
  return _lax.erf(_float(x))


def erfc(x):
  return _lax.erfc(_float(x))


def erfinv(x):
  return _lax.erf_inv(_float(x))


def expit(x):
  return _lax.logistic(_float(x))


def logit(x):
  x = _float(x)
  return _jnp.log(x / (1 - x))


def xlogy(x, y):
  """x * log(y), 0 where x is 0."""
  x, y = _float(x), _float(y)
  return _jnp.where(x == 0, _jnp.zeros_like(x * y), x * _jnp.log(y))


def xlog1py(x, y):
  """x * log1p(y), 0 where x is 0."""
  x, y = _float(x), _float(y)
  return _jnp.where(x == 0, _jnp.zeros_like(x * y), x * _jnp.log1p(y))


def entr(x):
  """-x log x for x > 0, 0 at 0, -inf below."""
  x = _float(x)
  return _jnp.where(x > 0, -xlogy(x, x), _jnp.where(x == 0, 0.0, -_jnp.inf))


def ndtr(x):
  """The standard normal CDF."""
  x = _float(x)
  return 0.5 * erfc(-x / _np.sqrt(2.0))


def ndtri(p):
  """The standard normal quantile function (ndtr's inverse)."""
  p = _float(p)
  return _np.sqrt(2.0) * erfinv(2 * p - 1)


def __getattr__(name):
  raise AttributeError(f"partix does not provide jax.scipy.special.{name}")
