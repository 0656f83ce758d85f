"""jax.scipy.special (partix.scipy.special): the special functions partix computes, composed
from partix's ops (the gamma family, incomplete gamma and beta, zeta and the Bessel functions
I0, I1 live in partix._src.special_fns, shared with partix.lax). The others raise
AttributeError saying partix does not provide them."""
import numpy as _np

from partix import lax as _lax
from partix._src import special_fns as _sf
from partix import numpy as _jnp
from partix.nn import log_softmax, logsumexp, softmax  # noqa: F401

__all__ = ["erf", "erfc", "erfinv", "expit", "logit", "logsumexp", "xlogy", "xlog1py", "ndtr",
           "ndtri", "entr", "gammaln", "loggamma", "gamma", "gammasgn", "digamma", "betaln",
           "beta", "factorial", "comb", "poch", "multigammaln", "kl_div", "rel_entr",
           "log_ndtr", "boxcox", "boxcox1p", "softmax", "log_softmax", "gammainc",
           "gammaincc", "betainc", "polygamma", "zeta", "i0", "i0e", "i1", "i1e", "erfcx"]


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


def gammaln(x):
  """log |Gamma(x)| (inf at the poles 0, -1, -2, ...)."""
  return _sf.lgamma(_float(x))


loggamma = gammaln


def gammasgn(x):
  """The sign of Gamma(x): +1 for x > 0, alternating between the poles below 0 (nan at them)."""
  x = _float(x)
  fl = _jnp.floor(x)
  neg_sign = _jnp.where(_jnp.mod(fl, 2.0) == 0, 1.0, -1.0)
  return _jnp.where(x > 0, 1.0, _jnp.where(x == fl, _jnp.nan, neg_sign))


def gamma(x):
  x = _float(x)
  return gammasgn(x) * _jnp.exp(gammaln(x))


def digamma(x):
  """psi(x) = d/dx log Gamma(x) (nan at the poles 0, -1, ...)."""
  return _sf.digamma(_float(x))


def gammainc(a, x):
  """The regularized lower incomplete gamma function P(a, x)."""
  return _sf.igamma(_float(a), _float(x))


def gammaincc(a, x):
  """The regularized upper incomplete gamma function Q(a, x) = 1 - P(a, x)."""
  return _sf.igammac(_float(a), _float(x))


def betainc(a, b, x):
  """The regularized incomplete beta function I_x(a, b)."""
  return _sf.betainc(_float(a), _float(b), _float(x))


def polygamma(n, x):
  """The n-th derivative of digamma (n a non-negative integer)."""
  return _sf.polygamma(_float(n), _float(x))


def zeta(x, q=None):
  """The Hurwitz zeta function sum_k (q + k)^-x (q=None: Riemann's, q = 1)."""
  x = _float(x)
  return _sf.zeta(x, _jnp.ones_like(x) if q is None else _float(q))


def i0e(x):
  return _sf.bessel_i0e(_float(x))


def i1e(x):
  return _sf.bessel_i1e(_float(x))


def i0(x):
  x = _float(x)
  return _sf.bessel_i0e(x) * _jnp.exp(_jnp.abs(x))


def i1(x):
  x = _float(x)
  return _sf.bessel_i1e(x) * _jnp.exp(_jnp.abs(x))


def erfcx(x):
  """exp(x^2) erfc(x), without the overflow of the product for large x."""
  return _sf.erfcx(_float(x))


def betaln(a, b):
  a, b = _float(a), _float(b)
  return gammaln(a) + gammaln(b) - gammaln(a + b)


def beta(a, b):
  a, b = _float(a), _float(b)
  return gammasgn(a) * gammasgn(b) * gammasgn(a + b) * _jnp.exp(betaln(a, b))


def factorial(n, exact=False):
  if exact:
    raise NotImplementedError("factorial with exact=True is not supported (as in JAX)")
  n = _float(n)
  return _jnp.where(n < 0, 0.0, _jnp.exp(gammaln(n + 1.0)))


def comb(N, k, exact=False, repetition=False):
  if exact:
    raise NotImplementedError("comb with exact=True is not supported (as in JAX)")
  N, k = _float(N), _float(k)
  if repetition:
    N = N + k - 1.0
  ok = (k >= 0) & (k <= N) & (N >= 0)
  val = _jnp.exp(gammaln(N + 1.0) - gammaln(k + 1.0) - gammaln(N - k + 1.0))
  return _jnp.where(ok, val, 0.0)


def poch(z, m):
  """The rising factorial Gamma(z + m) / Gamma(z)."""
  z, m = _float(z), _float(m)
  return gammasgn(z + m) * gammasgn(z) * _jnp.exp(gammaln(z + m) - gammaln(z))


def multigammaln(a, d):
  """log of the multivariate gamma function of dimension d (an int)."""
  a = _float(a)
  out = d * (d - 1) / 4.0 * _np.log(_np.pi)
  for j in range(int(d)):
    out = out + gammaln(a - j / 2.0)
  return out


def rel_entr(x, y):
  """x log(x / y) for x, y > 0; 0 at x = 0 (y >= 0); inf otherwise."""
  x, y = _float(x), _float(y)
  both = (x > 0) & (y > 0)
  safe = _jnp.where(both, x / _jnp.where(both, y, 1.0), 1.0)
  return _jnp.where(both, x * _jnp.log(safe), _jnp.where((x == 0) & (y >= 0), 0.0, _jnp.inf))


def kl_div(x, y):
  """x log(x / y) - x + y (scipy's kl_div)."""
  x, y = _float(x), _float(y)
  return _jnp.where((x >= 0) & (y >= 0), rel_entr(x, y) - x + y, _jnp.inf)


def log_ndtr(x):
  """log of the standard normal CDF, accurate in both tails."""
  x = _float(x)
  lower = x < -3.0
  z = -x / _np.sqrt(2.0)
  # For x < -3 the erfc is tiny: write it as exp(-z^2) * erfcx(z), erfcx by its continued
  # fraction (eight terms: float32-accurate for z > 2).
  zz = _jnp.where(lower, z, 1.0)
  cf = zz
  for k in range(8, 0, -1):
    cf = zz + (k / 2.0) / cf
  log_tail = -zz * zz - _jnp.log(cf) - 0.5 * _np.log(_np.pi) - _np.log(2.0)
  upper = x > 0  # log(1 - p) for the small p = ndtr(-x), without rounding 1 - p to 1
  middle = _jnp.where(upper, _jnp.log1p(-ndtr(-x)), _jnp.log(ndtr(x)))
  return _jnp.where(lower, log_tail, middle)


def boxcox(x, lmbda):
  x, lmbda = _float(x), _float(lmbda)
  return _jnp.where(lmbda == 0, _jnp.log(x),
                    (_jnp.power(x, lmbda) - 1.0) / _jnp.where(lmbda == 0, 1.0, lmbda))


def boxcox1p(x, lmbda):
  x, lmbda = _float(x), _float(lmbda)
  return _jnp.where(lmbda == 0, _jnp.log1p(x),
                    (_jnp.power(1.0 + x, lmbda) - 1.0) / _jnp.where(lmbda == 0, 1.0, lmbda))


def __getattr__(name):
  raise AttributeError(f"partix does not provide jax.scipy.special.{name}")
