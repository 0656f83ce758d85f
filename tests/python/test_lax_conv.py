"""lax's convolutions (partix/_src/lax_conv.py) against a naive numpy convolution written here
(strides, lhs/rhs dilation, padding strings and pairs, feature and batch groups, dimension
numbers, 1-3 spatial dimensions), against numbers JAX 0.10.2 gives, and under grad (finite
differences), jit, vmap and an 8-device batch sharding; bad arguments raise PartixError."""
import itertools

import numpy as np
import pytest

import partix as jax
import partix.numpy as jnp
from partix import lax
from partix._src.core import PartixError

R = np.random.default_rng(0)


def close(got, want, tol=1e-4):
  np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                             rtol=tol, atol=tol)


# ---- the oracle: a direct loop over the kernel's taps in canonical (N, C, spatial) order ----

def perms(dn, ndim):
  """(lhs, rhs, out) permutations into (N, C, spatial...) order, spatial as rhs orders them."""
  if dn is None:
    return (tuple(range(ndim)),) * 3
  rhs = dn[1]
  out = []
  for spec, (a, b) in zip(dn, (("N", "C"), ("O", "I"), ("N", "C"))):
    sp = [c for c in rhs if c not in "OI"]
    out.append((spec.index(a), spec.index(b)) + tuple(spec.index(c) for c in sp))
  return tuple(out)


def same_pads(sizes, kernel, strides, lower=False):
  pads = []
  for d, k, s in zip(sizes, kernel, strides):
    total = max((-(-d // s) - 1) * s + k - d, 0)
    lo, hi = total // 2, total - total // 2
    pads.append((hi, lo) if lower else (lo, hi))
  return pads


def oracle(x, w, strides, padding, lhs_dilation=None, rhs_dilation=None, dn=None, groups=1,
           batch_groups=1):
  lp, rp, op = perms(dn, x.ndim)
  xc, wc = np.transpose(x, lp).astype(np.float64), np.transpose(w, rp).astype(np.float64)
  n = x.ndim - 2
  ld, rd = lhs_dilation or (1,) * n, rhs_dilation or (1,) * n
  dil = [(s - 1) * d + 1 for s, d in zip(xc.shape[2:], ld)]
  xd = np.zeros(xc.shape[:2] + tuple(dil))
  xd[(slice(None), slice(None)) + tuple(slice(None, None, d) for d in ld)] = xc
  kernel = wc.shape[2:]
  keff = [(k - 1) * r + 1 for k, r in zip(kernel, rd)]
  if isinstance(padding, str):
    padding = ([(0, 0)] * n if padding == "VALID" else
               same_pads(xc.shape[2:], keff, strides, padding == "SAME_LOWER"))
  xp = np.pad(xd, [(0, 0), (0, 0)] + [(max(lo, 0), max(hi, 0)) for lo, hi in padding])
  xp = xp[(slice(None), slice(None)) + tuple(slice(max(-lo, 0), xp.shape[2 + i] - max(-hi, 0))
                                             for i, (lo, hi) in enumerate(padding))]
  out_sp = [max(0, (p - k) // s + 1) for p, k, s in zip(xp.shape[2:], keff, strides)]
  nb, c, o = xc.shape[0], xc.shape[1], wc.shape[0]
  out = np.zeros((nb // batch_groups, o) + tuple(out_sp))
  if 0 in out_sp:
    return np.transpose(out, np.argsort(op))
  for f in range(o):
    ns, cs = slice(None), slice(None)
    if groups > 1:
      g = f // (o // groups)
      cs = slice(g * c // groups, (g + 1) * c // groups)
    if batch_groups > 1:
      g = f // (o // batch_groups)
      ns = slice(g * nb // batch_groups, (g + 1) * nb // batch_groups)
    for pos in itertools.product(*[range(k) for k in kernel]):
      win = tuple(slice(p * r, p * r + (m - 1) * s + 1, s)
                  for p, r, m, s in zip(pos, rd, out_sp, strides))
      patch = xp[(ns, cs) + win]
      out[:, f] += np.einsum("nc...,c->n...", patch, wc[(f, slice(None)) + pos])
  return np.transpose(out, np.argsort(op))


def layout(canon, perm):
  """The shape whose dimension perm[j] has size canon[j]."""
  shape = [0] * len(canon)
  for j, d in enumerate(perm):
    shape[d] = canon[j]
  return tuple(shape)


LAYOUTS = {1: [None, ("NWC", "WIO", "NWC"), ("NCW", "OIW", "NWC"), ("WNC", "IWO", "CWN")],
           2: [None, ("NHWC", "HWIO", "NHWC"), ("HWNC", "OHWI", "CNWH"), ("NWHC", "HWIO", "NHWC")],
           3: [None, ("NDHWC", "DHWIO", "NDHWC"), ("NCDHW", "WHDIO", "NHDWC")]}


def random_config(seed):
  g = np.random.default_rng(seed)
  n = 1 + seed % 3
  dn = LAYOUTS[n][g.integers(len(LAYOUTS[n]))]
  groups = batch_groups = 1
  kind = seed % 4
  if kind == 1:
    groups = int(g.integers(2, 4))
  elif kind == 2:
    batch_groups = 2
  nb = batch_groups * int(g.integers(1, 3))
  c = groups * int(g.integers(1, 3))
  o = groups * batch_groups * int(g.integers(1, 3))
  sp = [int(g.integers(3, 7 if n < 3 else 5)) for _ in range(n)]
  ks = [int(g.integers(1, 4)) for _ in range(n)]
  strides = tuple(int(v) for v in g.integers(1, 3, n))
  rd = tuple(int(v) for v in g.integers(1, 3, n)) if g.random() < 0.5 else None
  ld = tuple(int(v) for v in g.integers(1, 3, n)) if g.random() < 0.3 else None
  if ld is None and g.random() < 0.3:
    padding = ["SAME", "VALID", "SAME_LOWER"][g.integers(3)]
  else:
    padding = [(int(a), int(b)) for a, b in g.integers(-1, 3, (n, 2))]
  lp, rp, _ = perms(dn, n + 2)
  x = g.standard_normal(layout((nb, c, *sp), lp)).astype(np.float32)
  w = g.standard_normal(layout((o, c // groups, *ks), rp)).astype(np.float32)
  return x, w, dict(window_strides=strides, padding=padding, lhs_dilation=ld, rhs_dilation=rd,
                    dimension_numbers=dn, feature_group_count=groups,
                    batch_group_count=batch_groups)


def call_oracle(x, w, kw):
  return oracle(x, w, kw["window_strides"], kw["padding"], kw["lhs_dilation"],
                kw["rhs_dilation"], kw["dimension_numbers"], kw["feature_group_count"],
                kw["batch_group_count"])


@pytest.mark.parametrize("seed", range(48))
def test_conv_general_dilated_matches_the_oracle(seed):
  x, w, kw = random_config(seed)
  got = lax.conv_general_dilated(x, w, **kw)
  want = call_oracle(x, w, kw)
  assert got.shape == want.shape and got.dtype == np.float32
  close(got, want)


@pytest.mark.parametrize("padding", ["SAME", "VALID", "SAME_LOWER", [(2, 1), (0, 3)],
                                     [(-1, 0), (1, -2)]])
@pytest.mark.parametrize("strides", [(1, 1), (2, 3)])
def test_padding_forms_2d(padding, strides):
  x = R.standard_normal((2, 3, 8, 7)).astype(np.float32)
  w = R.standard_normal((4, 3, 3, 2)).astype(np.float32)
  close(lax.conv_general_dilated(x, w, strides, padding, rhs_dilation=(2, 1)),
        oracle(x, w, strides, padding, rhs_dilation=(2, 1)))


@pytest.mark.parametrize("ld,strides,rd,ks,pads", [
    ((3, 2), (1, 1), (1, 1), (1, 1), [(0, 0), (0, 0)]),     # phases no tap reaches: zeros
    ((2, 3), (2, 3), (1, 2), (3, 2), [(1, 2), (2, 1)]),     # stride and dilation share factors
    ((4, 2), (3, 1), (2, 3), (4, 3), [(-2, 3), (4, -1)]),   # negative pads crop
    ((2, 2), (1, 1), (1, 1), (3, 3), [(2, 2), (1, 2)]),     # the transposed conv of stride 2
])
def test_lhs_dilation(ld, strides, rd, ks, pads):
  """lhs dilation computes one convolution per output phase; every phase against the oracle."""
  x = R.standard_normal((2, 4, 5, 4)).astype(np.float32)
  w = R.standard_normal((6, 2) + ks).astype(np.float32)
  got = lax.conv_general_dilated(x, w, strides, pads, ld, rd, feature_group_count=2)
  close(got, oracle(x, w, strides, pads, ld, rd, groups=2))
  w = R.standard_normal((6, 4) + ks[::-1]).astype(np.float32)
  got = lax.conv_general_dilated(x, w, strides, pads, ld, rd, batch_group_count=2,
                                 dimension_numbers=("NCHW", "OIWH", "NCHW"))
  close(got, oracle(x, w, strides, pads, ld, rd, ("NCHW", "OIWH", "NCHW"), batch_groups=2))


def test_conv_and_conv_with_general_padding():
  x = R.standard_normal((2, 3, 6, 5)).astype(np.float32)
  w = R.standard_normal((4, 3, 2, 3)).astype(np.float32)
  close(lax.conv(x, w, (1, 2), "SAME"), oracle(x, w, (1, 2), "SAME"))
  close(lax.conv(x, w, (2, 1), "VALID"), oracle(x, w, (2, 1), "VALID"))
  pads = [(1, 2), (0, 1)]
  close(lax.conv_with_general_padding(x, w, (2, 1), pads, (2, 1), (1, 2)),
        oracle(x, w, (2, 1), pads, (2, 1), (1, 2)))
  close(lax.conv_with_general_padding(x, w, (1, 1), "SAME", None, (2, 2)),
        oracle(x, w, (1, 1), "SAME", None, (2, 2)))


def test_flax_style_call():
  """As flax's nnx.Conv calls it: NHWC input, HWIO kernel, ConvDimensionNumbers, explicit pads,
  a depthwise feature_group_count."""
  dn = lax.ConvDimensionNumbers(lhs_spec=(0, 3, 1, 2), rhs_spec=(3, 2, 0, 1),
                                out_spec=(0, 3, 1, 2))
  x = R.standard_normal((2, 9, 8, 6)).astype(np.float32)
  for groups, pads in [(1, [(1, 1), (1, 1)]), (6, [(0, 2), (1, 0)]), (3, "SAME")]:
    w = R.standard_normal((3, 3, 6 // groups, 12)).astype(np.float32)
    got = lax.conv_general_dilated(x, w, (1, 2), pads, lhs_dilation=(1, 1),
                                   rhs_dilation=(1, 1), dimension_numbers=dn,
                                   feature_group_count=groups, precision=None)
    close(got, oracle(x, w, (1, 2), pads, dn=("NHWC", "HWIO", "NHWC"), groups=groups))


def test_dtypes_and_precision():
  x = np.arange(30).reshape(2, 3, 5).astype(np.int8)
  w = np.ones((4, 3, 2), np.int8)
  assert lax.conv_general_dilated(x, w, (1,), "VALID").dtype == np.int8
  # JAX 0.10.2: int8 wraps ([123, -127, ...]); preferred int32 or float32 does not.
  np.testing.assert_array_equal(lax.conv_general_dilated(x, w, (1,), "VALID")[1, 0],
                                [123, -127, -121, -115])
  for dt in (np.int32, np.float32):
    got = lax.conv_general_dilated(x, w, (1,), "VALID", preferred_element_type=dt)
    assert got.dtype == dt
    np.testing.assert_array_equal(got[1, 0], [123, 129, 135, 141])
  b = lax.conv_general_dilated(x > 20, w > 0, (1,), "VALID")
  assert b.dtype == np.bool_
  np.testing.assert_array_equal(b[:, 0], [[False] * 4, [True] * 4])
  xb, wb = jnp.asarray(x, jnp.bfloat16), jnp.asarray(w, jnp.bfloat16)
  assert lax.conv_general_dilated(xb, wb, (1,), "VALID").dtype == jnp.bfloat16
  out = lax.conv_general_dilated(xb, wb, (1,), "VALID", preferred_element_type=jnp.float32)
  assert out.dtype == np.float32
  xf, wf = x.astype(np.float32), w.astype(np.float32)
  for p in (lax.Precision.HIGHEST, "highest", (lax.Precision.DEFAULT, lax.Precision.HIGH)):
    close(lax.conv_general_dilated(xf, wf, (1,), "VALID", precision=p),
          oracle(xf, wf, (1,), "VALID"))


def test_empty_output():
  x, w = np.ones((2, 3, 5), np.float32), np.ones((4, 3, 2), np.float32)
  assert lax.conv_general_dilated(x, w, (1,), [(-2, -2)]).shape == (2, 4, 0)
  assert lax.conv_general_dilated(x, w, (1,), [(-1, -1)]).shape == (2, 4, 2)


# ---- the helpers of dimension numbers, shapes and padding (values from JAX 0.10.2) ----

def test_dimension_numbers():
  dn = lax.conv_dimension_numbers((1, 2, 3, 4), (1, 2, 3, 4), ("NHWC", "HWIO", "NHWC"))
  assert isinstance(dn, lax.ConvDimensionNumbers)
  assert dn == ((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))
  assert dn.lhs_spec == (0, 3, 1, 2) and dn.rhs_spec == (3, 2, 0, 1)
  assert lax.conv_dimension_numbers((1, 2, 3), (4, 5, 6), None) == ((0, 1, 2),) * 3
  assert lax.conv_dimension_numbers((1, 2, 3), (4, 5, 6), dn) is dn
  assert lax.conv_general_permutations(("NCHW", "HWIO", "NWHC")) == (
      (0, 1, 2, 3), (3, 2, 0, 1), (0, 3, 2, 1))
  assert lax.conv_general_permutations(("WNC", "IWO", "CWN")) == ((1, 2, 0), (2, 0, 1),
                                                                  (2, 0, 1))
  assert lax.ConvGeneralDilatedDimensionNumbers is not None


def test_shape_tuples_and_pads():
  assert lax.padtype_to_pads((5, 6), (3, 2), (2, 1), "SAME") == [(1, 1), (0, 1)]
  assert lax.padtype_to_pads((5, 6, 7), (3, 2, 4), (2, 1, 3), "SAME_LOWER") == [
      (1, 1), (1, 0), (2, 1)]
  assert lax.padtype_to_pads((5, 6), (3, 2), (2, 1), "VALID") == [(0, 0), (0, 0)]
  dn = ("NHWC", "HWIO", "NHWC")
  assert lax.conv_general_shape_tuple((1, 9, 7, 2), (3, 2, 2, 5), (2, 3), "SAME", dn) == (
      1, 5, 3, 5)
  assert lax.conv_shape_tuple((4, 2, 9, 7), (5, 2, 3, 2), (2, 3), [(1, 0), (-1, 2)], 2) == (
      2, 5, 4, 3)
  assert lax.conv_transpose_shape_tuple((1, 3, 2, 1), (2, 2, 1, 1), (2, 1), "SAME", dn) == (
      1, 6, 2, 1)
  x = np.ones((1, 9, 7, 2), np.float32)
  w = np.ones((3, 2, 2, 5), np.float32)
  got = lax.conv_general_dilated(x, w, (2, 3), "SAME", dimension_numbers=dn)
  assert got.shape == lax.conv_general_shape_tuple(x.shape, w.shape, (2, 3), "SAME", dn)


# ---- conv_transpose, patches and the local convolution ----

X_T = np.arange(1, 7, dtype=np.float32).reshape(1, 3, 2, 1)
W_T = np.arange(1, 5, dtype=np.float32).reshape(2, 2, 1, 1)


@pytest.mark.parametrize("padding,kw,want", [
    ("SAME", {}, [[4, 11], [2, 5], [12, 25], [6, 11], [20, 39], [10, 17]]),
    ("VALID", {}, [[4, 11, 6], [2, 5, 2], [12, 25, 12], [6, 11, 4], [20, 39, 18],
                   [10, 17, 6]]),
    ([(1, 0), (0, 1)], {}, [[11, 6], [5, 2], [25, 12], [11, 4], [39, 18]]),
    ("SAME", {"transpose_kernel": True}, [[1, 4], [3, 10], [3, 10], [9, 24], [5, 16],
                                          [15, 38]]),
    ([(0, 1), (1, 0)], {"use_consistent_padding": True},
     [[11, 6], [5, 2], [25, 12], [11, 4], [39, 18]]),
])
def test_conv_transpose_values_of_jax(padding, kw, want):
  got = lax.conv_transpose(X_T, W_T, (2, 1), padding, **kw)
  np.testing.assert_array_equal(np.asarray(got)[0, :, :, 0], want)


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_conv_transpose_is_the_gradient_of_conv(n, padding):
  """With transpose_kernel, conv_transpose is the input gradient of the forward conv (Keras),
  for input sizes the strides tile."""
  dn = ("N" + "HWD"[:n] + "C", "HWD"[:n] + "IO", "N" + "HWD"[:n] + "C")
  sp = ((8, 8, 6) if padding == "SAME" else (7, 8, 8))[:n]
  strides = (2, 1, 3 if padding == "SAME" else 2)[:n]
  x = R.standard_normal((2, *sp, 3)).astype(np.float32)
  w = R.standard_normal((*(3, 2, 2)[:n], 3, 4)).astype(np.float32)
  y, vjp = jax.vjp(lambda a: lax.conv_general_dilated(a, w, strides, padding,
                                                      dimension_numbers=dn), x)
  ct = R.standard_normal(y.shape).astype(np.float32)
  got = lax.conv_transpose(ct, w, strides, padding, dimension_numbers=dn, transpose_kernel=True)
  want = vjp(ct)[0]
  assert got.shape == want.shape == x.shape
  close(got, want)


def patches_oracle(x, filter_shape, strides, padding, rhs_dilation=None):
  """NCHW patches: feature c * prod(filter) + t holds channel c at the window's tap t."""
  c, taps = x.shape[1], int(np.prod(filter_shape))
  w = np.zeros((c * taps, c) + tuple(filter_shape), np.float32)
  for ci in range(c):
    for t, pos in enumerate(itertools.product(*[range(k) for k in filter_shape])):
      w[(ci * taps + t, ci) + pos] = 1
  return oracle(x, w, strides, padding, rhs_dilation=rhs_dilation)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_patches(n):
  x = R.standard_normal((2, 3) + (5, 4, 3)[:n]).astype(np.float32)
  fs, strides = (2, 3, 2)[:n], (1, 2, 1)[:n]
  got = lax.conv_general_dilated_patches(x, fs, strides, "SAME", rhs_dilation=(2,) * n)
  close(got, patches_oracle(x, fs, strides, "SAME", (2,) * n))
  dn = ("N" + "HWD"[:n] + "C", "HWD"[:n] + "IO", "N" + "HWD"[:n] + "C")
  xl = np.moveaxis(x, 1, -1)
  got = lax.conv_general_dilated_patches(xl, fs, strides, "VALID", dimension_numbers=dn,
                                         preferred_element_type=np.float32)
  close(got, np.moveaxis(patches_oracle(x, fs, strides, "VALID"), 1, -1))


def test_local():
  x = R.standard_normal((2, 3, 6, 5)).astype(np.float32)
  fs = (3, 2)
  p = patches_oracle(x, fs, (2, 1), [(1, 1), (0, 1)])    # (N, C * 6, 3, 5)
  w = R.standard_normal((4, 18, 3, 5)).astype(np.float32)
  got = lax.conv_general_dilated_local(x, w, (2, 1), [(1, 1), (0, 1)], fs)
  close(got, np.einsum("nihw,oihw->nohw", p, w))
  dn = ("NHWC", "HWIO", "NHWC")
  got = lax.conv_general_dilated_local(np.moveaxis(x, 1, -1), np.transpose(w, (2, 3, 1, 0)),
                                       (2, 1), [(1, 1), (0, 1)], fs, dimension_numbers=dn)
  close(got, np.moveaxis(np.einsum("nihw,oihw->nohw", p, w), 1, -1))


# ---- transformations: grad, jit, vmap, sharding ----

GRAD_CASES = [
    dict(window_strides=(2, 1), padding=[(1, 2), (-1, 1)], rhs_dilation=(1, 2)),
    dict(window_strides=(1, 1), padding=[(1, 1), (2, 0)], lhs_dilation=(2, 3)),
    dict(window_strides=(1, 2), padding="SAME", feature_group_count=2),
    dict(window_strides=(1, 1), padding="VALID", batch_group_count=2),
]


@pytest.mark.parametrize("case", range(len(GRAD_CASES)))
def test_grad_matches_finite_differences(case):
  kw = GRAD_CASES[case]
  g = kw.get("feature_group_count", 1)
  x = R.standard_normal((4, 4, 6, 5)).astype(np.float32)
  w = R.standard_normal((4, 4 // g, 3, 2)).astype(np.float32)

  def loss(a, b):
    return jnp.sum(jnp.sin(lax.conv_general_dilated(a, b, **kw)))
  gx, gw = jax.grad(loss, argnums=(0, 1))(x, w)
  np64 = {k: v for k, v in kw.items()}
  for arg, grad in ((0, gx), (1, gw)):
    v = R.standard_normal((x, w)[arg].shape)
    eps = 1e-3

    def f(t):
      a, b = x.astype(np.float64), w.astype(np.float64)
      if arg == 0:
        a = a + t * v
      else:
        b = b + t * v
      return np.sum(np.sin(oracle(a, b, np64["window_strides"], np64["padding"],
                                  np64.get("lhs_dilation"), np64.get("rhs_dilation"), None,
                                  np64.get("feature_group_count", 1),
                                  np64.get("batch_group_count", 1))))
    fd = (f(eps) - f(-eps)) / (2 * eps)
    np.testing.assert_allclose(float(np.sum(np.asarray(grad, np.float64) * v)), fd,
                               rtol=2e-3, atol=2e-3)


def test_jit_matches_eager():
  for seed in (0, 5, 10, 14):
    x, w, kw = random_config(seed)
    f = jax.jit(lambda a, b, kw=kw: lax.conv_general_dilated(a, b, **kw))
    close(f(x, w), call_oracle(x, w, kw))
  t = jax.jit(lambda a, b: lax.conv_transpose(a, b, (2, 1), "SAME", transpose_kernel=True))
  np.testing.assert_array_equal(np.asarray(t(X_T, W_T))[0, :, :, 0],
                                [[1, 4], [3, 10], [3, 10], [9, 24], [5, 16], [15, 38]])
  x = R.standard_normal((2, 3, 5, 4)).astype(np.float32)
  p = jax.jit(lambda a: lax.conv_general_dilated_patches(a, (2, 2), (1, 1), "SAME"))
  close(p(x), patches_oracle(x, (2, 2), (1, 1), "SAME"))


def test_jit_grad():
  x = R.standard_normal((2, 7, 6, 3)).astype(np.float32)
  w = R.standard_normal((3, 3, 3, 4)).astype(np.float32)
  dn = ("NHWC", "HWIO", "NHWC")

  def loss(a, b):
    return jnp.sum(lax.conv_general_dilated(a, b, (2, 1), "SAME", dimension_numbers=dn) ** 2)
  eager = jax.grad(loss, argnums=(0, 1))(x, w)
  jitted = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, w)
  for a, b in zip(eager, jitted):
    close(a, b)
  # d/dw of sum(y^2) is 2 * sum_n patches^T y: check one kernel entry against the oracle.
  y = oracle(x, w, (2, 1), "SAME", dn=dn)
  eps, e = 1e-2, np.zeros_like(w)
  e[1, 2, 0, 3] = 1
  fd = (np.sum(oracle(x, w + eps * e, (2, 1), "SAME", dn=dn) ** 2)
        - np.sum(oracle(x, w - eps * e, (2, 1), "SAME", dn=dn) ** 2)) / (2 * eps)
  assert y.shape == (2, 4, 6, 4)
  np.testing.assert_allclose(float(jitted[1][1, 2, 0, 3]), fd, rtol=1e-3)


def test_vmap():
  x = R.standard_normal((3, 2, 4, 6, 5)).astype(np.float32)
  w = R.standard_normal((3, 6, 2, 3, 2)).astype(np.float32)
  kw = dict(window_strides=(1, 2), padding=[(1, 0), (1, 1)], rhs_dilation=(2, 1),
            feature_group_count=2)
  got = jax.vmap(lambda a: lax.conv_general_dilated(a, w[0], **kw))(x)
  close(got, np.stack([oracle(a, w[0], kw["window_strides"], kw["padding"], None, (2, 1),
                              None, 2) for a in x]))
  got = jax.vmap(lambda a, b: lax.conv_general_dilated(a, b, **kw))(x, w)
  close(got, np.stack([oracle(a, b, kw["window_strides"], kw["padding"], None, (2, 1), None, 2)
                       for a, b in zip(x, w)]))
  got = jax.vmap(lambda b: lax.conv_general_dilated(x[0], b, **kw), in_axes=0, out_axes=1)(w)
  close(got, np.stack([oracle(x[0], b, kw["window_strides"], kw["padding"], None, (2, 1),
                              None, 2) for b in w], 1))
  xs = R.standard_normal((3, 1, 3, 2, 1)).astype(np.float32)
  got = jax.vmap(lambda a: lax.conv_transpose(a, W_T, (2, 1), "VALID"))(xs)
  close(got, np.stack([lax.conv_transpose(a, W_T, (2, 1), "VALID") for a in xs]))
  close(got[1], oracle(xs[1], W_T, (1, 1), [(1, 1), (1, 1)], (2, 1), None,
                       ("NHWC", "HWIO", "NHWC")))
  got = jax.vmap(lambda a: lax.conv_general_dilated_patches(a, (2, 3), (1, 2), "SAME"))(x)
  close(got, np.stack([patches_oracle(a, (2, 3), (1, 2), "SAME") for a in x]))
  gw = jax.vmap(jax.grad(lambda b, a: jnp.sum(lax.conv_general_dilated(a, b, **kw))))(w, x)
  assert gw.shape == w.shape
  close(gw[1], jax.grad(lambda b: jnp.sum(lax.conv_general_dilated(x[1], b, **kw)))(w[1]))


@pytest.fixture(scope="module")
def mesh():
  if jax.device_count() < 8:
    pytest.skip("needs 8 devices (PARTIX_NUM_CPU_DEVICES=8)")
  return jax.make_mesh((8,), ("x",))


def test_sharded_batch(mesh):
  dn = ("NHWC", "HWIO", "NHWC")
  x = R.standard_normal((16, 7, 6, 4)).astype(np.float32)
  w = R.standard_normal((3, 3, 2, 6)).astype(np.float32)
  xs = jax.device_put(x, jax.NamedSharding(mesh, jax.P("x")))
  kw = dict(window_strides=(2, 1), padding="SAME", dimension_numbers=dn, feature_group_count=2)
  want = oracle(x, w, (2, 1), "SAME", dn=dn, groups=2)
  eager = lax.conv_general_dilated(xs, w, **kw)
  assert eager.sharding.spec == jax.P("x")
  close(eager, want)
  jitted = jax.jit(lambda a, b: lax.conv_general_dilated(a, b, **kw))(xs, w)
  assert jitted.sharding.spec == jax.P("x")
  close(jitted, want)

  def loss(a, b):
    return jnp.sum(jnp.tanh(lax.conv_general_dilated(a, b, **kw)))
  gx, gw = jax.jit(jax.grad(loss, argnums=(0, 1)))(xs, w)
  rx, rw = jax.grad(loss, argnums=(0, 1))(x, w)
  assert gx.sharding.spec == jax.P("x")
  close(gx, rx)
  close(gw, rw)


def test_sharded_transpose_and_patches(mesh):
  x = R.standard_normal((8, 3, 2, 1)).astype(np.float32)
  xs = jax.device_put(x, jax.NamedSharding(mesh, jax.P("x")))
  got = jax.jit(lambda a: lax.conv_transpose(a, W_T, (2, 1), "SAME"))(xs)
  assert got.sharding.spec == jax.P("x")
  close(got, oracle(x, W_T, (1, 1), [(1, 1), (1, 0)], (2, 1), None, ("NHWC", "HWIO", "NHWC")))
  w1 = R.standard_normal((1, 1, 1, 3)).astype(np.float32)   # strides 3, 2: some phases are 0
  got = lax.conv_transpose(xs, w1, (3, 2), "VALID")
  assert got.sharding.spec == jax.P("x") and got.shape == (8, 9, 4, 3)
  close(got, oracle(x, w1, (1, 1), [(0, 2), (0, 1)], (3, 2), None, ("NHWC", "HWIO", "NHWC")))
  xn = R.standard_normal((8, 2, 5, 4)).astype(np.float32)
  xns = jax.device_put(xn, jax.NamedSharding(mesh, jax.P("x")))
  close(lax.conv_general_dilated_patches(xns, (2, 2), (1, 1), "VALID"),
        patches_oracle(xn, (2, 2), (1, 1), "VALID"))


# ---- bad input ----

X4 = np.ones((2, 3, 6, 5), np.float32)
W4 = np.ones((4, 3, 2, 2), np.float32)


@pytest.mark.parametrize("args,kw,match", [
    ((X4, W4[0], (1, 1), "SAME"), {}, r"same rank.*\(2, 3, 6, 5\) and \(3, 2, 2\)"),
    ((X4, W4, (1, 1), "FULL"), {}, r"'FULL'"),
    ((X4, W4, (1, 1), [(1, 1, 1), (0, 0)]), {}, r"\(1, 1, 1\)"),
    ((X4, W4, (1, 1), [(1, 1)]), {}, r"2 \(low, high\) pairs.*\[\(1, 1\)\]"),
    ((X4, W4, (1,), "SAME"), {}, r"window_strides.*\(1,\)"),
    ((X4, W4, (1, 0), "SAME"), {}, r"window_strides.*\(1, 0\)"),
    ((X4, W4, (1, 1), "SAME"), {"dimension_numbers": ("NCHW", "OIHX", "NCHW")},
     r"same spatial characters.*OIHX"),
    ((X4, W4, (1, 1), "SAME"), {"dimension_numbers": ("NCHW", "OIHW")}, r"three strings"),
    ((X4, W4, (1, 1), "SAME"), {"dimension_numbers": ("NCH", "OIH", "NCH")}, r"'NCH'"),
    ((X4, W4, (1, 1), "SAME"), {"dimension_numbers": ("NNHW", "OIHW", "NCHW")}, r"'NNHW'"),
    ((X4, W4, (1, 1), "SAME"), {"feature_group_count": 2}, r"feature_group_count=2"),
    ((X4, W4, (1, 1), "SAME"), {"feature_group_count": 0}, r"feature_group_count.*0"),
    ((X4, W4, (1, 1), "SAME"), {"batch_group_count": 3}, r"batch_group_count=3"),
    ((X4, W4, (1, 1), "SAME"), {"lhs_dilation": (2, 1)}, r"'SAME'.*lhs_dilation=\(2, 1\)"),
    ((X4, W4, (1, 1), [(-4, -3), (0, 0)]), {}, r"negative padding.*-4"),
    ((X4, W4.astype(np.float16), (1, 1), "SAME"), {}, r"same dtype.*float16"),
    ((X4, W4, (1, 1), "SAME"), {"precision": "fast"}, r"precision.*'fast'"),
])
def test_bad_input(args, kw, match):
  with pytest.raises(PartixError, match=r"lax\.conv_general_dilated") as info:
    lax.conv_general_dilated(*args, **kw)
  assert info.match(match)


def test_bad_input_of_the_other_names():
  with pytest.raises(PartixError, match=r"lax\.padtype_to_pads.*'FULL'"):
    lax.padtype_to_pads((5,), (3,), (1,), "FULL")
  with pytest.raises(PartixError,
                     match=r"lax\.conv_general_permutations.*'O' and 'I'.*'OHWC'"):
    lax.conv_general_permutations(("NCHW", "OHWC", "NCHW"))
  with pytest.raises(PartixError, match=r"lax\.conv_dimension_numbers.*\(1, 2\).*\(1, 2, 3\)"):
    lax.conv_dimension_numbers((1, 2), (1, 2, 3), None)
  with pytest.raises(PartixError, match=r"lax\.conv_transpose.*'SAME_LOWER'"):
    lax.conv_transpose(X_T, W_T, (2, 1), "SAME_LOWER", use_consistent_padding=True)
  with pytest.raises(PartixError, match=r"lax\.conv_transpose.*rank 6"):
    lax.conv_transpose(np.ones((1,) * 6), np.ones((1,) * 6), (1,) * 4, "SAME")
  with pytest.raises(PartixError, match=r"lax\.conv_general_dilated_patches.*filter_shape.*"
                     r"\(2,\)"):
    lax.conv_general_dilated_patches(X4, (2,), (1, 1), "SAME")
  with pytest.raises(PartixError, match=r"lax\.conv_general_dilated_local.*\(4, 10, 6, 5\)"):
    lax.conv_general_dilated_local(X4, np.ones((4, 10, 6, 5), np.float32), (1, 1), "SAME",
                                   (2, 2))
