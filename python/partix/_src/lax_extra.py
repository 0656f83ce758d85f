"""lax's special functions, generic reductions and small names (mulhi, platform_dependent,
custom_root, ...), written over partix's existing ops."""
from partix._src import special_fns as _sf

__all__ = ["lgamma", "digamma", "polygamma", "zeta", "igamma", "igammac", "igamma_grad_a",
           "random_gamma_grad", "betainc", "bessel_i0e", "bessel_i1e"]


# ---- special functions (lax takes floating operands only) ----

def _float_only(name, fn, doc=None):
  def op(*args):
    _sf.check_float(name, *args)
    return fn(*args)
  op.__name__ = name
  op.__doc__ = doc or fn.__doc__
  return op


lgamma = _float_only("lgamma", _sf.lgamma)
digamma = _float_only("digamma", _sf.digamma)
polygamma = _float_only("polygamma", _sf.polygamma)
zeta = _float_only("zeta", _sf.zeta)
igamma = _float_only("igamma", _sf.igamma)
igammac = _float_only("igammac", _sf.igammac)
igamma_grad_a = _float_only("igamma_grad_a", _sf.igamma_grad_a)
betainc = _float_only("betainc", _sf.betainc)
bessel_i0e = _float_only("bessel_i0e", _sf.bessel_i0e)
bessel_i1e = _float_only("bessel_i1e", _sf.bessel_i1e)


def random_gamma_grad(a, x):
  """The derivative in a of a Gamma(a) sample x (jax.random.gamma's reparameterization)."""
  _sf.check_float("random_gamma_grad", a, x)
  return _sf.random_gamma_grad(a, x)
