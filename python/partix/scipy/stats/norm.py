"""jax.scipy.stats.norm (partix.scipy.stats.norm): the normal distribution."""
import numpy as _np

from partix import numpy as _jnp
from partix.scipy import special as _special

__all__ = ["logpdf", "pdf", "cdf", "logcdf", "sf", "ppf"]


def _std(x, loc, scale):
  x = _special._float(x)
  return (x - loc) / scale, _jnp.asarray(scale, x.dtype)


def logpdf(x, loc=0, scale=1):
  z, s = _std(x, loc, scale)
  return -0.5 * z * z - _jnp.log(s) - 0.5 * _np.log(2 * _np.pi)


def pdf(x, loc=0, scale=1):
  return _jnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
  z, _ = _std(x, loc, scale)
  return _special.ndtr(z)


def logcdf(x, loc=0, scale=1):
  return _jnp.log(cdf(x, loc, scale))


def sf(x, loc=0, scale=1):
  z, _ = _std(x, loc, scale)
  return _special.ndtr(-z)


def ppf(q, loc=0, scale=1):
  return _special.ndtri(q) * scale + loc
