#!/usr/bin/env python3
"""Golden outputs of partix's primitives and op library, computed independently with numpy.

Regenerate (from the repository root; Python is never needed to build or test partix):

    python3 -m venv /tmp/golden-venv
    /tmp/golden-venv/bin/pip install numpy scipy
    /tmp/golden-venv/bin/python tools/golden/primitives.py    # writes tests/golden/primitives.json

The inputs are small, fixed and deterministic (hand-picked edge cases plus values on a coarse
binary grid), so regenerating gives the same file. The tests in tests/prim/ and tests/ops/
load the file, run every case through partix with the reference kernels and with the default
(fast) kernels, and compare.

Semantics encoded here are XLA's/JAX's where they differ from numpy's (the library follows
XLA): integer division truncates and x / 0 = -1, x rem 0 = x; integer arithmetic wraps;
float -> int conversion truncates, saturates and maps NaN to 0; sign keeps signed zero;
take/gather indices are clamped into range; dynamic slice starts are clamped so the slice
fits; max/min/argmax propagate NaN; top_k puts NaN first, sort (ascending) puts NaN last;
+ and max of bools are or, * and min are and; bf16 rounds to nearest even from f32. Computations run in float64 and round once to the
output dtype (via f32 for bf16, as a float32 computation followed by a cast would).

File layout: {"promotion": {...}, "weak": [...], "broadcast": [...], "cases": [...]}. A case is
  {"name", "family", "op", "attrs", "inputs": [T], "outputs": [T], "rtol", "atol"}
with T = {"dtype", "shape", "data"}: data flat, row-major; NaN and infinities as the strings
"nan", "inf", "-inf". A float is written with the fewest digits that survive the C++ loader's
path (strtod, then narrowing through float) bit-exactly. "op" names a function of the op
library, or "prim:NAME" for a primitive bound directly, whose attrs are typed:
{"ints": [...]}, {"int": n}, {"f": x}, {"b": true}, {"dtype": "f32"}.

Tolerances (|got - want| <= atol + rtol * |want|; rtol = atol = 0 means bit-exact, sign of
zero included):
  EXACT   0, 0      data movement, integers, comparisons, conversions, floor/ceil/round,
                    max/min/select: there is exactly one right answer.
  ARITH   1e-6, 0   + - * / rem in f32: IEEE rounds them correctly (0.5 ulp); 1e-6 (~8 ulp)
                    leaves room for reciprocal-based fast kernels.
  TRANS   5e-7, 1e-7  transcendentals in f32: about 4 ulp relative, and 1e-7 absolute for
                    results near zero of functions bounded by O(1).
  ERFINV  2e-6, 1e-7  single-precision erf_inv approximations are good to a few ulp only.
  SUM     1e-6, 1e-6 * max(sum |terms|)  reductions and contractions: the summation order
                    of a fast kernel changes the rounding by up to n ulp of the sum of |terms|.
  NN      4e-6, 1e-6  composites (softmax, norms, losses) round after every primitive in f32.
  BF16    2^-7 relative (one bf16 ulp) where a bf16 result is computed, not moved;
  F16     2^-10 relative (one f16 ulp); F64  1e-14 relative.
"""

import json
import math
import os
import sys
import warnings

import numpy as np
import scipy.special

EXACT = (0.0, 0.0)
ARITH = (1e-6, 0.0)
TRANS = (5e-7, 1e-7)
ERFINV = (2e-6, 1e-7)
NN = (4e-6, 1e-6)
BF16 = (2.0**-7, 0.0)
F16 = (2.0**-10, 0.0)
F64 = (1e-14, 0.0)

I32_MIN, I32_MAX = -(2**31), 2**31 - 1
I64_MIN, I64_MAX = -(2**63), 2**63 - 1

# ---------------------------------------------------------------------------------------------
# dtypes and encoding


def bf16_round(x):
    """f32 -> bf16, round to nearest even, kept as f32 values. NaN stays NaN."""
    f = np.asarray(x, dtype=np.float32)
    b = f.view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    r = (r & 0xFFFFFFFF).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(f), np.float32(np.nan), r).astype(np.float32)


NP = {"bool": np.bool_, "i32": np.int32, "i64": np.int64, "f16": np.float16,
      "bf16": np.float32, "f32": np.float32, "f64": np.float64}
FLOATS = ("f16", "bf16", "f32", "f64")


def arr(dtype, values, shape=None):
    """An input array of a partix dtype (bf16 held as f32), values rounded to the dtype."""
    if dtype in ("i32", "i64"):
        a = np.array([int(v) for v in np.ravel(np.asarray(values, dtype=object))],
                     dtype=NP[dtype])
        a = a.reshape(np.shape(values))
    else:
        a = np.array(values, dtype=np.float64 if dtype in FLOATS else NP[dtype])
    if dtype in FLOATS:
        a = to_dtype(dtype, a)
    if shape is not None:
        a = a.reshape(shape)
    return (dtype, a)


def to_dtype(dtype, y):
    """Rounds float64 (or integer) results to a partix dtype once (bf16 via f32)."""
    y = np.asarray(y)
    if dtype == "f64":
        return y.astype(np.float64)
    if dtype == "f32":
        return y.astype(np.float32)
    if dtype == "f16":
        return y.astype(np.float16)
    if dtype == "bf16":
        return bf16_round(y.astype(np.float32))
    if dtype == "bool":
        return y.astype(np.bool_)
    return y.astype(NP[dtype])


def cxx_load(s, dtype):
    """What the C++ loader makes of a number's text: strtod, then narrowing through float."""
    d = np.float64(float(s))
    if dtype == "f64":
        return d
    f = np.float32(d)
    if dtype == "f32":
        return f
    if dtype == "f16":
        return np.float16(f)
    return bf16_round(f)[()]


def bits(v):
    v = np.asarray(v)
    return v.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[v.dtype.itemsize]).item()


def fmt_float(v, dtype):
    v = np.float64(v)
    if np.isnan(v):
        return '"nan"'
    if np.isinf(v):
        return '"inf"' if v > 0 else '"-inf"'
    want = to_dtype(dtype, np.array(v))[()]
    for p in range(1, 18):
        s = "%.*g" % (p, v)
        if bits(cxx_load(s, dtype)) == bits(want):
            break
    else:
        raise AssertionError(f"cannot encode {v!r} as {dtype}")
    if not any(c in s for c in ".en"):
        s += ".0"  # keep -0.0 and integral values floating in JSON
    return s


def enc_tensor(t):
    dtype, a = t
    flat = np.ravel(a)
    if dtype == "bool":
        data = ["true" if bool(v) else "false" for v in flat]
    elif dtype in ("i32", "i64"):
        data = [str(int(v)) for v in flat]
    else:
        data = [fmt_float(v, dtype) for v in flat]
    shape = ",".join(str(d) for d in a.shape)
    return f'{{"dtype":"{dtype}","shape":[{shape}],"data":[{",".join(data)}]}}'


# ---------------------------------------------------------------------------------------------
# cases

CASES = []


def case(family, name, op, inputs, outputs, tol, attrs=None):
    assert name.replace("_", "").isalnum(), name
    assert all(c["name"] != name for c in CASES), f"duplicate case {name}"
    CASES.append(dict(family=family, name=name, op=op, attrs=attrs or {}, inputs=inputs,
                      outputs=outputs, rtol=tol[0], atol=tol[1]))


def ints(v):
    return {"ints": [int(x) for x in v]}


def f64(t):
    return t[1].astype(np.float64)


def wrap(v, dtype):
    """Two's complement wrap-around of a Python int to i32/i64."""
    n = 32 if dtype == "i32" else 64
    return ((int(v) + 2 ** (n - 1)) % 2**n) - 2 ** (n - 1)


def int_map(dtype, fn, *ts):
    """Applies fn to Python ints elementwise and wraps the result to dtype."""
    shape = ts[0][1].shape
    cols = [np.ravel(t[1]).tolist() for t in ts]
    out = [wrap(fn(*[int(c) for c in vals]), dtype) for vals in zip(*cols)]
    return arr(dtype, np.array(out, dtype=object).reshape(shape))


def grid(n, lo, hi, step=1.0 / 16):
    """n values evenly spread over [lo, hi], snapped to multiples of `step`."""
    return list(np.round(np.linspace(lo, hi, n) / step) * step)


def sum_tol(x_abs_sum):
    return (1e-6, 1e-6 * float(np.max(x_abs_sum, initial=0.0)))


NAN, INF = float("nan"), float("inf")

# ---- elementwise: unary ----


def unary(name, op, fn, dtype, values, tol, out_dtype=None, prim=False):
    x = arr(dtype, values)
    with np.errstate(all="ignore"):
        y = fn(f64(x))
    case("elementwise", name, ("prim:" + op) if prim else op, [x],
         [(out_dtype or dtype, to_dtype(out_dtype or dtype, y))], tol)


def xla_sign(x):
    return np.where(x > 0, 1.0, np.where(x < 0, -1.0, x))  # keeps NaN and signed zero


def elementwise_unary():
    erf = np.vectorize(math.erf, otypes=[np.float64])
    wide = grid(12, -8, 8) + [0.0, -0.0, 0.5, -0.5]
    unary("neg_f32", "neg", np.negative, "f32", [1.5, -2.25, 0.0, -0.0, INF, -INF, NAN,
                                                  3.4028234663852886e38], EXACT)
    unary("exp_f32", "exp", np.exp, "f32",
          grid(12, -20, 20) + [0.0, -0.0, 88.5, 89.0, -104.0, INF, -INF, NAN], TRANS)
    unary("exp_f64", "exp", np.exp, "f64", [-3.3, 0.1, 1.0, 2.5, 700.0], F64)
    unary("exp_bf16", "exp", np.exp, "bf16", [-2.0, -0.5, 0.0, 0.75, 3.0, 10.0], BF16)
    unary("exp_i32_to_f32", "exp", np.exp, "i32", [-3, 0, 1, 2, 10], TRANS, out_dtype="f32")
    unary("log_f32", "log", np.log, "f32",
          [0.001, 0.1, 0.5, 1.0, 1.0000001192092896, 2.0, 10.0, 1000.0, 1e30, 0.0, -0.0, -1.0,
           INF, NAN], TRANS)
    unary("log_f16", "log", np.log, "f16", [0.25, 1.0, 3.0, 100.0, 0.0], F16)
    unary("sin_f32", "sin", np.sin, "f32", wide + [3.1415927410125732, 100.0], TRANS)
    unary("cos_f32", "cos", np.cos, "f32", wide + [1.5707963705062866, 100.0], TRANS)
    unary("tanh_f32", "tanh", np.tanh, "f32", grid(12, -20, 20) + [1e-4, -1e-4, INF, -INF, NAN],
          TRANS)
    unary("sqrt_f32", "sqrt", np.sqrt, "f32",
          [0.0, -0.0, 0.25, 2.0, 3.0, 1e-6, 100.0, 1e30, INF, -1.0, NAN], ARITH)
    unary("rsqrt_f32", "rsqrt", lambda x: 1.0 / np.sqrt(x), "f32",
          [0.25, 2.0, 3.0, 1e-6, 100.0, 1e30, 0.0, INF], TRANS)
    unary("abs_f32", "abs", np.abs, "f32", [-2.5, 2.5, 0.0, -0.0, -INF, NAN], EXACT)
    case("elementwise", "abs_i32", "abs", [arr("i32", [-5, 5, 0, I32_MIN, I32_MAX])],
         [arr("i32", [5, 5, 0, I32_MIN, I32_MAX])], EXACT)  # |INT_MIN| wraps to INT_MIN
    unary("sign_f32", "sign", xla_sign, "f32", [-2.5, 3.0, 0.0, -0.0, INF, -INF, NAN, 1e-30],
          EXACT)
    case("elementwise", "sign_i32", "sign", [arr("i32", [-7, 0, 9, I32_MIN])],
         [arr("i32", [-1, 0, 1, -1])], EXACT)
    case("elementwise", "neg_i32", "neg", [arr("i32", [5, -7, 0, I32_MIN, I32_MAX])],
         [arr("i32", [-5, 7, 0, I32_MIN, -I32_MAX])], EXACT)
    case("elementwise", "neg_i64", "neg", [arr("i64", [5, I64_MIN, I64_MAX])],
         [arr("i64", [-5, I64_MIN, -I64_MAX])], EXACT)
    special = [-2.5, -1.5, -0.5, -0.0, 0.0, 0.5, 1.5, 2.5, 0.49999997019767761, 3.7, -3.7,
               1e10, -INF, NAN]
    unary("floor_f32", "floor", np.floor, "f32", special, EXACT)
    unary("ceil_f32", "ceil", np.ceil, "f32", special, EXACT)
    unary("round_f32", "round", np.rint, "f32", special, EXACT)  # half to even
    unary("round_bf16", "round", np.rint, "bf16", [-2.5, -1.5, 0.5, 1.5, 2.5, 100.5], EXACT)
    # Integer operands of floor/ceil/round are returned as they are.
    for op in ("floor", "ceil", "round"):
        case("elementwise", f"{op}_i32", op, [arr("i32", [-3, 0, 7])],
             [arr("i32", [-3, 0, 7])], EXACT)
    unary("logistic_f32", "logistic", lambda x: 1.0 / (1.0 + np.exp(-x)), "f32",
          grid(12, -30, 30) + [0.0, 1000.0, -1000.0, INF, -INF, NAN], TRANS)
    unary("erf_f32", "erf", erf, "f32", grid(12, -4, 4) + [1e-3, -0.0, INF, -INF, NAN], TRANS)
    erfc = np.vectorize(math.erfc, otypes=[np.float64])
    unary("erfc_f32", "erfc", erfc, "f32",
          grid(12, -4, 10) + [1e-3, -0.0, 27.0, INF, -INF, NAN], TRANS)
    unary("erfc_f64", "erfc", erfc, "f64", [-2.0, -0.5, 0.0, 0.5, 1.0, 3.0, 10.0, 26.0], F64)
    unary("erf_inv_f32", "erf_inv", scipy.special.erfinv, "f32",
          [-0.999, -0.9, -0.5, -0.1, 0.0, 0.1, 0.3, 0.5, 0.75, 0.9, 0.99, 0.999, 1.0, -1.0, 1.5,
           NAN], ERFINV)
    unary("log1p_f32", "log1p", np.log1p, "f32",
          [-0.5, -1e-5, 1e-7, 1e-3, 1.0, 10.0, 1e30, -1.0, -2.0, INF], TRANS)
    unary("expm1_f32", "expm1", np.expm1, "f32",
          [-1e-5, 1e-7, 1e-3, 1.0, -20.0, 10.0, -0.0, INF, -INF], TRANS)
    case("elementwise", "not_bool", "logical_not", [arr("bool", [True, False, True])],
         [arr("bool", [False, True, False])], EXACT)
    case("elementwise", "logical_not_f32", "logical_not", [arr("f32", [0.0, -0.0, 2.0, NAN])],
         [arr("bool", [True, True, False, False])], EXACT)
    case("elementwise", "square_i32", "square", [arr("i32", [-3, 4, 46341])],
         [arr("i32", [9, 16, wrap(46341**2, "i32")])], EXACT)
    # The primitives directly, where the op library adds logic (float promotion, identity for
    # integer rounding): integer operands of neg/abs/sign and f64 of floor.
    case("elementwise", "prim_abs_i64", "prim:abs", [arr("i64", [-5, I64_MIN, 3])],
         [arr("i64", [5, I64_MIN, 3])], EXACT)
    unary("prim_floor_f64", "floor", np.floor, "f64", [-2.5, 2.5, -0.0, 1e300], EXACT, prim=True)
    unary("prim_exp_f32", "exp", np.exp, "f32", [-1.0, 0.0, 2.0], TRANS, prim=True)
    case("elementwise", "prim_not_bool", "prim:not", [arr("bool", [True, False])],
         [arr("bool", [False, True])], EXACT)


# ---- elementwise: binary ----


def xla_div(a, b):
    if b == 0:
        return -1
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def xla_rem(a, b):
    if b == 0:
        return a
    return a - b * xla_div(a, b)


def binary(name, op, fn, dtype, a, b, tol, out_dtype=None, prim=False):
    x, y = arr(dtype, a), arr(dtype, b)
    with np.errstate(all="ignore"):
        z = fn(f64(x), f64(y))
    od = out_dtype or dtype
    case("elementwise", name, ("prim:" + op) if prim else op, [x, y], [(od, to_dtype(od, z))],
         tol)


def elementwise_binary():
    a = [1.5, -2.25, 0.0, 7.0, INF, INF, -3.0, 1e30, 0.1, NAN]
    b = [0.25, 4.0, -0.0, -7.0, INF, -INF, 0.0, 1e30, 0.2, 1.0]
    binary("add_f32", "add", np.add, "f32", a, b, ARITH)
    binary("sub_f32", "sub", np.subtract, "f32", a, b, ARITH)
    binary("mul_f32", "mul", np.multiply, "f32", a, b, ARITH)
    binary("div_f32", "div", np.divide, "f32",
           [1.0, -1.0, 0.0, 7.0, 1.0, 3.0, -6.0, INF, 1e-30, NAN],
           [3.0, 0.0, 0.0, 2.0, -0.0, 7.0, 4.0, INF, 1e30, 2.0], ARITH)
    # rem exists as a primitive only (the op library has no remainder function).
    binary("prim_rem_f32", "rem", np.fmod, "f32",
           [5.5, -5.5, 5.5, -5.5, 1.0, INF, 3.0, 7.25, -0.0],
           [2.0, 2.0, -2.0, -2.0, 3.0, 2.0, 0.0, INF, 1.0], ARITH, prim=True)
    binary("pow_f32", "pow", np.power, "f32",
           [2.0, 2.0, -2.0, -2.0, 0.0, 0.0, 4.0, 1.5, 10.0, 1.0, 0.5],
           [3.0, 0.5, 3.0, 0.5, 0.0, -1.0, -0.5, 2.5, -3.0, NAN, 40.0], TRANS)
    mx_a = [1.0, -2.0, NAN, 3.0, -INF, 5.0, 0.5]
    mx_b = [2.0, -3.0, 1.0, NAN, 1.0, 5.0, -0.5]
    binary("max_f32", "maximum", np.maximum, "f32", mx_a, mx_b, EXACT)
    binary("min_f32", "minimum", np.minimum, "f32", mx_a, mx_b, EXACT)
    binary("add_f16", "add", np.add, "f16", [1.0, 65504.0, 0.1], [2.0**-11, 65504.0, 0.2], EXACT)
    binary("mul_bf16", "mul", np.multiply, "bf16", [1.5, 3.0, -0.0078125], [1.0078125, 1e2, 3.0],
           EXACT)
    binary("div_f64", "div", np.divide, "f64", [1.0, 2.0, -1.0], [3.0, 7.0, 0.0], F64)
    for dt in ("i32", "i64"):
        lo, hi = (I32_MIN, I32_MAX) if dt == "i32" else (I64_MIN, I64_MAX)
        x = arr(dt, [7, -7, 7, -7, 5, 0, lo, lo, 3, hi, 100])
        y = arr(dt, [2, 2, -2, -2, 0, 0, -1, 1, 5, 1, -7])
        for name, op, fn in (("add", "add", lambda p, q: p + q), ("sub", "sub", lambda p, q: p - q),
                             ("mul", "mul", lambda p, q: p * q), ("div", "div", xla_div),
                             ("rem", "rem", xla_rem), ("max", "maximum", max),
                             ("min", "minimum", min)):
            if op == "rem":
                name, op = "prim_rem", "prim:rem"
            case("elementwise", f"{name}_{dt}", op, [x, y], [int_map(dt, fn, x, y)], EXACT)
    # Comparisons (NaN compares unequal to everything; -0 == 0).
    ca = [1.0, 2.0, NAN, 0.0, -INF, 3.0, NAN]
    cb = [2.0, 2.0, 1.0, -0.0, -INF, -3.0, NAN]
    for op, fn in (("equal", np.equal), ("not_equal", np.not_equal), ("less", np.less),
                   ("less_equal", np.less_equal), ("greater", np.greater),
                   ("greater_equal", np.greater_equal)):
        binary(f"{op}_f32", op, fn, "f32", ca, cb, EXACT, out_dtype="bool")
        binary(f"{op}_i32", op, fn, "i32", [1, 5, -3, I32_MIN], [2, 5, -4, I32_MAX], EXACT,
               out_dtype="bool")
    for op, fn in (("logical_and", np.logical_and), ("logical_or", np.logical_or)):
        binary(f"{op}_bool", op, fn, "bool", [True, True, False, False],
               [True, False, True, False], EXACT, out_dtype="bool")
        binary(f"{op}_f32", op, fn, "f32", [1.0, 0.0, NAN, -0.0], [2.0, 3.0, 0.0, 1.0], EXACT,
               out_dtype="bool")
    # Arithmetic on bools stays bool, as in numpy and JAX: + and max are or, * and min are and.
    for op, fn in (("add", np.add), ("mul", np.multiply), ("maximum", np.maximum),
                   ("minimum", np.minimum)):
        x, y = arr("bool", [True, True, False, False]), arr("bool", [True, False, True, False])
        case("elementwise", f"{op}_bool", op, [x, y], [("bool", fn(x[1], y[1]))], EXACT)
    # Bitwise and/or exist as primitives on integers.
    x, y = arr("i32", [12, -1, 5, I32_MIN]), arr("i32", [10, 7, 0, -1])
    case("elementwise", "prim_and_i32", "prim:and", [x, y], [int_map("i32", lambda p, q: p & q, x, y)],
         EXACT)
    case("elementwise", "prim_or_i32", "prim:or", [x, y], [int_map("i32", lambda p, q: p | q, x, y)],
         EXACT)
    case("elementwise", "prim_xor_i32", "prim:xor", [x, y],
         [int_map("i32", lambda p, q: p ^ q, x, y)], EXACT)
    # Shifts as XLA defines them: by a negative amount or the width or more, a left shift gives
    # 0 and an arithmetic right shift the sign bit.
    for dt, bits, lo in (("i32", 32, I32_MIN), ("i64", 64, I64_MIN)):
        xs = arr(dt, [1, -8, lo, 12345, -1, 7, 5, -5, 3])
        ss = arr(dt, [3, 1, 1, bits - 1, bits - 1, bits, -1, bits + 8, 0])
        case("elementwise", f"prim_shift_left_{dt}", "prim:shift_left", [xs, ss],
             [int_map(dt, lambda p, q, b=bits: 0 if q < 0 or q >= b else p << q, xs, ss)], EXACT)
        case("elementwise", f"prim_shift_right_arithmetic_{dt}", "prim:shift_right_arithmetic",
             [xs, ss], [int_map(dt, lambda p, q, b=bits: p >> (b - 1 if q < 0 or q >= b else q),
                                xs, ss)], EXACT)
    for op, fn in (("eq", np.equal), ("lt", np.less), ("ge", np.greater_equal)):
        binary(f"prim_{op}_bool", op, fn, "bool", [True, False, True], [True, True, False],
               EXACT, out_dtype="bool", prim=True)
    # Rank-0 operands: the primitives take a scalar on either side without broadcasting.
    x = arr("f32", [1.0, 2.0, -3.0, 0.5, 8.0, -0.25], (2, 3))
    s = arr("f32", 2.0, ())
    case("elementwise", "prim_sub_scalar_rhs", "prim:sub", [x, s], [("f32", x[1] - np.float32(2))],
         EXACT)
    case("elementwise", "prim_div_scalar_lhs", "prim:div", [s, x],
         [("f32", (np.float64(2) / f64(x)).astype(np.float32))], ARITH)
    case("elementwise", "prim_max_scalar_i32", "prim:max", [arr("i32", [1, 9, -4]),
                                                            arr("i32", 3, ())],
         [arr("i32", [3, 9, 3])], EXACT)


# ---- elementwise: broadcasting, promotion, python scalars ----


def elementwise_broadcast():
    a = arr("f32", grid(3, -1, 1), (3, 1))
    b = arr("f32", grid(4, 0, 3), (1, 4))
    case("elementwise", "add_broadcast_3x1_1x4", "add", [a, b], [("f32", a[1] + b[1])], ARITH)
    a = arr("f32", grid(24, -3, 3), (2, 3, 4))
    b = arr("f32", [0.5, -1.0, 2.0, 4.0])
    case("elementwise", "mul_broadcast_trailing", "mul", [a, b], [("f32", a[1] * b[1])], ARITH)
    s = arr("f32", 1.5, ())
    x = arr("f32", grid(6, -2, 2), (2, 3))
    case("elementwise", "sub_broadcast_rank0", "sub", [s, x], [("f32", s[1] - x[1])], ARITH)
    a = arr("f32", grid(6, 1, 6), (2, 1, 3))
    b = arr("f32", [1.0, 2.0, 4.0, 8.0], (4, 1))
    case("elementwise", "div_broadcast_both", "div", [a, b], [("f32", a[1] / b[1])], ARITH)
    a = arr("i32", [3], (1,))
    b = arr("i32", [1, 5, 3, -2, 9])
    case("elementwise", "max_broadcast_i32", "maximum", [a, b], [arr("i32", [3, 5, 3, 3, 9])],
         EXACT)
    c = arr("bool", [True, False, True], (3, 1))
    t = arr("f32", [1.0, 2.0, 3.0, 4.0], (1, 4))
    f = arr("f32", -1.0, ())
    case("elementwise", "where_broadcast", "where", [c, t, f],
         [("f32", np.where(c[1], t[1], f[1]).astype(np.float32))], EXACT)
    c = arr("bool", [True, False, False, True])
    case("elementwise", "where_promotes_i32_f32", "where",
         [c, arr("i32", [1, 2, 3, 4]), arr("f32", [0.5, 0.25, 0.125, 2.0])],
         [arr("f32", [1.0, 0.25, 0.125, 4.0])], EXACT)
    case("elementwise", "where_i32_with_fraction", "where_scalar_rhs",
         [c, arr("i32", [1, 2, 3, 4])], [arr("f32", [1.0, 0.5, 0.5, 4.0])], EXACT,
         attrs={"value": 0.5})
    case("elementwise", "where_rank0_pred", "where",
         [arr("bool", False, ()), arr("f32", [1.0, 2.0]), arr("f32", [3.0, 4.0])],
         [arr("f32", [3.0, 4.0])], EXACT)
    case("elementwise", "prim_select_rank0", "prim:select",
         [arr("bool", [True, False, True]), arr("f32", 7.0, ()), arr("f32", [1.0, 2.0, 3.0])],
         [arr("f32", [7.0, 2.0, 7.0])], EXACT)
    case("elementwise", "prim_select_i64", "prim:select",
         [arr("bool", [False, True]), arr("i64", [1, I64_MAX]), arr("i64", [I64_MIN, 2])],
         [arr("i64", [I64_MIN, I64_MAX])], EXACT)
    # Mixed dtypes promote (JAX's lattice), then compute.
    mixed = [
        ("add_i32_f32", "add", arr("i32", [1, -2, 3]), arr("f32", [0.5, 0.25, -4.0]), "f32"),
        ("add_f16_bf16", "add", arr("f16", [1.0, 0.0009765625, 3.0]),
         arr("bf16", [1.0, 1.0, 256.0]), "f32"),
        ("mul_bool_i32", "mul", arr("bool", [True, False, True]), arr("i32", [5, 6, -7]), "i32"),
        ("add_i32_i64", "add", arr("i32", [I32_MAX, -1, 0]), arr("i64", [1, -(2**40), 2**62]),
         "i64"),
        ("sub_f32_f64", "sub", arr("f32", [0.1, 1.0, 3.0]), arr("f64", [0.1, 1e-10, 1e300]),
         "f64"),
        ("add_bf16_f32", "add", arr("bf16", [1.0, 2.0, -0.5]), arr("f32", [1e-3, 1e-7, 0.25]),
         "f32"),
        ("mul_i64_bf16", "mul", arr("i64", [3, -2, 1000]), arr("bf16", [0.5, 1.5, 1.0]), "bf16"),
        ("add_bool_f16", "add", arr("bool", [True, False]), arr("f16", [0.5, 2.0]), "f16"),
    ]
    for name, op, x, y, od in mixed:
        with np.errstate(all="ignore"):
            z = {"add": np.add, "sub": np.subtract, "mul": np.multiply}[op](
                f64(to_mid(x, od)), f64(to_mid(y, od)))
        if od in ("i32", "i64"):
            out = int_map(od, {"add": lambda p, q: p + q, "mul": lambda p, q: p * q}[op],
                          (od, x[1].astype(np.int64)), (od, y[1].astype(np.int64)))
        else:
            out = (od, to_dtype(od, z))
        case("elementwise", name, op, [x, y], [out], EXACT if od in ("i32", "i64") else ARITH)
    # A plain number is weakly typed: it takes the array's dtype unless it is fractional and the
    # array is integral or bool (then f32); integral numbers act as Python ints.
    weak = [
        ("scalar_mul_i32_frac", "mul", arr("i32", [1, 2, -3]), 2.5, False, "f32"),
        ("scalar_mul_i32_int", "mul", arr("i32", [1, 2, -3]), 3.0, False, "i32"),
        ("scalar_mul_bf16", "mul", arr("bf16", [1.0, 1.0078125, -3.0]), 2.0, False, "bf16"),
        ("scalar_add_bf16_frac", "add", arr("bf16", [1.0, 256.0, -3.0]), 0.3, False, "bf16"),
        ("scalar_add_bool_int", "add", arr("bool", [True, False]), 1.0, False, "i32"),
        ("scalar_mul_bool_frac", "mul", arr("bool", [True, False]), 2.5, False, "f32"),
        ("scalar_sub_left_f32", "sub", arr("f32", [0.5, 4.0, -1.0]), 2.0, True, "f32"),
        ("scalar_div_left_f32", "div", arr("f32", [3.0, 4.0, -0.0]), 1.0, True, "f32"),
        ("scalar_div_i32", "div", arr("i32", [7, -7, 3]), 2.0, False, "i32"),
        ("scalar_mul_f16_frac", "mul", arr("f16", [1.0, 3.0, 1000.0]), 0.1, False, "f16"),
        ("scalar_mul_i64_frac", "mul", arr("i64", [1, 2**40]), 0.5, False, "f32"),
        ("scalar_lt_i32_frac", "less", arr("i32", [1, 2, 3]), 2.5, False, "bool"),
    ]
    for name, op, x, v, left, od in weak:
        calc = od if od != "bool" else "f32"
        xv = f64(to_mid(x, calc))
        sv = f64(to_mid(("f64", np.array(v)), calc))
        p, q = (sv, xv) if left else (xv, sv)
        with np.errstate(all="ignore"):
            if calc in ("i32", "i64"):
                fn = {"mul": lambda m, n: m * n, "add": lambda m, n: m + n, "div": xla_div}[op]
                out = int_map(calc, lambda e: fn(e, int(v)), (calc, x[1].astype(np.int64)))
            else:
                z = {"mul": np.multiply, "add": np.add, "sub": np.subtract, "div": np.divide,
                     "less": np.less}[op](p, q)
                out = (od, to_dtype(od, z))
        tol = EXACT if od in ("i32", "i64", "bool") else ARITH
        case("elementwise", name, "scalar_" + op, [x], [out], tol,
             attrs={"value": v, "left": left})


def to_mid(t, dtype):
    """An operand converted to the computation dtype, as promotion does before the op."""
    d, a = t
    if dtype in ("i32", "i64"):
        return (dtype, a.astype(NP[dtype]))
    return (dtype, to_dtype(dtype, a.astype(np.float64)))


# ---- elementwise: convert ----


def convert(name, src, values, dst, out_values=None, prim=False):
    x = arr(src, values)
    if out_values is None:
        out = (dst, to_dtype(dst, x[1].astype(np.float64)))
    else:
        out = arr(dst, out_values)
    op = "prim:convert" if prim else "astype"
    attrs = {"dtype": {"dtype": dst}} if prim else {"dtype": dst}
    case("elementwise", name, op, [x], [out], EXACT, attrs=attrs)


def saturate(values, dtype):
    lo, hi = (I32_MIN, I32_MAX) if dtype == "i32" else (I64_MIN, I64_MAX)
    out = []
    for v in values:
        if math.isnan(v):
            out.append(0)
        elif v >= hi + 1:  # also +inf
            out.append(hi)
        elif v <= lo:
            out.append(lo)
        else:
            out.append(int(v))  # truncates toward zero
    return out


def elementwise_convert():
    fvals = [1.7, -1.7, 2.5, -2.5, 0.0, -0.0, NAN, INF, -INF, 3e9, -3e9, 2147483520.0,
             2147483648.0, -2147483648.0, -2147483904.0]
    fvals = [float(np.float32(v)) for v in fvals]
    convert("astype_f32_i32", "f32", fvals, "i32", saturate(fvals, "i32"))
    lvals = [float(np.float32(v)) for v in [1.7, -1.7, NAN, INF, -INF, 1e19, -1e19,
                                             9.223372036854775808e18, 2.0**62, -(2.0**63)]]
    convert("astype_f32_i64", "f32", lvals, "i64", saturate(lvals, "i64"))
    dvals = [2147483647.9, -2147483648.9, 2147483648.5, -2147483649.0, 1e300, -0.9]
    convert("astype_f64_i32", "f64", dvals, "i32", saturate(dvals, "i32"))
    qvals = [9.2233720368547748e18, 9.3e18, -9.3e18, 1e-300, -12345.99]
    convert("astype_f64_i64", "f64", qvals, "i64", saturate(qvals, "i64"))
    convert("prim_convert_f32_i32", "f32", [1e10, -0.5, NAN], "i32", [I32_MAX, 0, 0], prim=True)
    # int -> float rounds to nearest even, directly (no double rounding through f64).
    big = [2**60 + 2**36 + 1, 2**53 + 1, -(2**40) - 1, I64_MAX, 16777217]
    convert("astype_i64_f32", "i64", big, "f32",
            [float(np.float32(v)) for v in [2**60 + 2**37, 2**53, -(2**40), 2.0**63, 16777216]])
    convert("astype_i32_f32", "i32", [16777217, 16777219, I32_MAX, -7, I32_MIN], "f32",
            [16777216.0, 16777220.0, 2147483648.0, -7.0, -2147483648.0])
    convert("astype_i64_f64", "i64", [2**53 + 1, I64_MAX, -3], "f64", [2.0**53, 2.0**63, -3.0])
    convert("astype_i64_i32", "i64", [2**32 + 5, 2**31, -(2**31) - 1, -1], "i32",
            [5, I32_MIN, I32_MAX, -1])
    convert("astype_i32_i64", "i32", [I32_MIN, -1, 7], "i64", [I32_MIN, -1, 7])
    convert("astype_i32_bool", "i32", [0, 1, -5, I32_MIN], "bool", [False, True, True, True])
    convert("astype_f32_bool", "f32", [0.0, -0.0, 0.5, NAN, -INF], "bool",
            [False, False, True, True, True])
    convert("astype_bool_f32", "bool", [True, False], "f32", [1.0, 0.0])
    convert("astype_bool_i32", "bool", [True, False], "i32", [1, 0])
    one = 1.0
    bvals = [one, one + 2**-8, one + 3 * 2**-8, one + 2**-8 + 2**-20, 3.4028234663852886e38,
             -3.3961775292304e38, NAN, INF, -INF, 1e-40, 0.1, -2.718281828, 65535.0]
    bvals = [float(np.float32(v)) for v in bvals]
    convert("astype_f32_bf16", "f32", bvals, "bf16")
    hvals = [65504.0, 65519.0, 65520.0, 1e5, 3e-8, 1e-8, 0.1, one + 2**-11, one + 3 * 2**-11,
             NAN, -INF, -0.0, 6.1035156e-05]
    hvals = [float(np.float32(v)) for v in hvals]
    x = arr("f32", hvals)
    case("elementwise", "astype_f32_f16", "astype", [x],
         [("f16", x[1].astype(np.float16))], EXACT, attrs={"dtype": "f16"})
    convert("astype_bf16_f32", "bf16", [1.0078125, -3.0e5, 1e-38, NAN], "f32")
    convert("astype_f16_f32", "f16", [0.000975, 65504.0, -5.96e-8, -INF], "f32")
    x = arr("bf16", [1.0078125, 3.0e5, -2.0**-20, 0.1])
    case("elementwise", "astype_bf16_f16", "astype", [x],
         [("f16", x[1].astype(np.float16))], EXACT, attrs={"dtype": "f16"})
    convert("astype_f16_bf16", "f16", [1.0 + 2**-10, 1.0 + 3 * 2**-9, 65504.0, -0.1], "bf16")
    convert("astype_f64_f32", "f64", [0.1, 1e39, -1e39, 1e-46, 1.0000000596046448], "f32")
    convert("astype_f32_f64", "f32", [0.1, -3.5, INF], "f64")
    convert("astype_i32_bf16", "i32", [257, 259, -1000001, 3], "bf16")


# ---- reductions ----


def reduce_cases():
    x = arr("f32", grid(24, -4, 4, 1.0 / 8), (2, 3, 4))
    xs = f64(x)
    for axes, keep in (([0], False), ([1], False), ([2], False), ([0, 2], False), ([1], True),
                       ([-1], False), ([], False)):
        name = ("sum_f32_axes" + "".join(str(a) if a >= 0 else "_neg" for a in axes) +
                ("_keep" if keep else "") + ("_none" if not axes else ""))
        y = np.sum(xs, axis=tuple(axes), keepdims=keep)
        case("reduce", name, "sum", [x], [("f32", to_dtype("f32", y))],
             sum_tol(np.sum(np.abs(xs), axis=tuple(axes))), attrs={"axes": axes, "keepdims": keep})
    case("reduce", "sum_f32_all", "sum_all", [x], [("f32", to_dtype("f32", xs.sum()))],
         sum_tol(np.abs(xs).sum()))
    xi = arr("i32", [I32_MAX, 1, 5, -7, I32_MIN, -1], (2, 3))
    case("reduce", "sum_i32_wraps", "sum", [xi],
         [int_map("i32", lambda a, b, c: a + b + c, *[("i32", xi[1][:, k]) for k in range(3)])],
         EXACT, attrs={"axes": [1], "keepdims": False})
    xb = arr("bool", [True, False, True, True, True, False], (2, 3))
    case("reduce", "sum_bool_counts", "sum", [xb], [arr("i32", np.sum(xb[1], axis=0))], EXACT,
         attrs={"axes": [0], "keepdims": False})
    xh = arr("bf16", [1.0, 2.0**-8, 2.0**-8, 3.0, 100.0, 0.5, -0.25, 7.0], (2, 4))
    y = np.sum(f64(xh), axis=1)
    case("reduce", "sum_bf16", "sum", [xh], [("bf16", to_dtype("bf16", y))], BF16,
         attrs={"axes": [1], "keepdims": False})
    for axes in ([1], [0, 2]):
        y = np.mean(xs, axis=tuple(axes))
        case("reduce", "mean_f32_axes" + "".join(map(str, axes)), "mean", [x],
             [("f32", to_dtype("f32", y))], sum_tol(np.mean(np.abs(xs), axis=tuple(axes))),
             attrs={"axes": axes, "keepdims": False})
    xm = arr("i32", [1, 2, 4, 7], (2, 2))
    case("reduce", "mean_i32_to_f32", "mean", [xm], [arr("f32", [2.5, 4.5])], ARITH,
         attrs={"axes": [0], "keepdims": False})
    y = np.var(xs, axis=(0, 1))
    case("reduce", "var_f32_axes01", "var", [x], [("f32", to_dtype("f32", y))], NN,
         attrs={"axes": [0, 1], "keepdims": False})
    # max/min propagate NaN; an empty reduction gives the identity.
    xn = arr("f32", [1.0, NAN, -2.0, 5.0, -INF, 3.0, 0.5, -0.5, 2.0, 9.0, -9.0, 4.0], (3, 4))
    for op, fn in (("max", np.max), ("min", np.min)):
        for axes in ([0], [1], [0, 1]):
            y = fn(f64(xn), axis=tuple(axes))
            case("reduce", f"{op}_f32_axes" + "".join(map(str, axes)), op, [xn],
                 [("f32", to_dtype("f32", y))], EXACT, attrs={"axes": axes, "keepdims": False})
        case("reduce", f"{op}_f32_keepdims", op, [x],
             [("f32", to_dtype("f32", fn(xs, axis=2, keepdims=True)))], EXACT,
             attrs={"axes": [2], "keepdims": True})
    xi = arr("i32", [3, -9, I32_MIN, 7, 0, I32_MAX], (3, 2))
    case("reduce", "max_i32_axis1", "max", [xi], [arr("i32", [3, 7, I32_MAX])], EXACT,
         attrs={"axes": [1], "keepdims": False})
    case("reduce", "min_i32_axis0", "min", [xi], [arr("i32", [I32_MIN, -9])], EXACT,
         attrs={"axes": [0], "keepdims": False})
    empty = ("f32", np.zeros((2, 0), dtype=np.float32))
    # The primitives, as lax's, give the identity over an empty axis (numpy's max and min,
    # and partix's, refuse it).
    case("reduce", "max_empty_axis", "prim:reduce_max", [empty], [arr("f32", [-INF, -INF])],
         EXACT, attrs={"axes": {"ints": [1]}})
    case("reduce", "min_empty_axis_i32", "prim:reduce_min",
         [("i32", np.zeros((0, 3), dtype=np.int32))], [arr("i32", [I32_MAX] * 3)], EXACT,
         attrs={"axes": {"ints": [0]}})
    case("reduce", "sum_empty_axis", "sum", [empty], [arr("f32", [0.0, 0.0])], EXACT,
         attrs={"axes": [1], "keepdims": False})
    # argmax/argmin: the first extremal index; NaN counts as extremal.
    xa = arr("f32", [1.0, 5.0, 5.0, -2.0, NAN, 3.0, NAN, 0.0, -7.0, -7.0, 2.0, -7.0], (3, 4))
    for op, fn in (("argmax", np.argmax), ("argmin", np.argmin)):
        for axis in (0, 1, -1):
            y = fn(f64(xa), axis=axis)
            case("reduce", f"{op}_f32_axis{axis % 2}" + ("_neg" if axis < 0 else ""), op, [xa],
                 [arr("i32", y)], EXACT, attrs={"axis": axis, "keepdims": False})
    case("reduce", "argmax_keepdims", "argmax", [x],
         [arr("i32", np.argmax(xs, axis=1)[:, None, :])], EXACT,
         attrs={"axis": 1, "keepdims": True})
    xl = arr("i64", [2**53, 2**53 + 1, 2**53 - 1, -(2**62), -(2**62) - 1, 5], (2, 3))
    case("reduce", "argmax_i64_beyond_2p53", "argmax", [xl], [arr("i32", [1, 2])], EXACT,
         attrs={"axis": 1, "keepdims": False})
    case("reduce", "argmin_i64_beyond_2p53", "argmin", [xl], [arr("i32", [2, 1])], EXACT,
         attrs={"axis": 1, "keepdims": False})
    case("reduce", "argmax_bool", "argmax", [arr("bool", [False, True, True, False], (2, 2))],
         [arr("i32", [1, 0])], EXACT, attrs={"axis": 1, "keepdims": False})
    # cumsum
    xc = arr("f32", grid(12, -3, 3, 1.0 / 8), (3, 4))
    for axis in (0, 1):
        for rev in (False, True):
            v = f64(xc)
            y = np.flip(np.cumsum(np.flip(v, axis), axis), axis) if rev else np.cumsum(v, axis)
            ya = (np.flip(np.cumsum(np.flip(np.abs(v), axis), axis), axis) if rev
                  else np.cumsum(np.abs(v), axis))
            case("reduce", f"cumsum_f32_axis{axis}" + ("_reverse" if rev else ""), "cumsum",
                 [xc], [("f32", to_dtype("f32", y))], sum_tol(ya),
                 attrs={"axis": axis, "reverse": rev})
    xi = arr("i32", [1, I32_MAX, 3, -4, 5, 6], (2, 3))
    case("reduce", "cumsum_i32_wraps", "cumsum", [xi],
         [arr("i32", [1, wrap(1 + I32_MAX, "i32"), wrap(4 + I32_MAX, "i32"), -4, 1, 7], (2, 3))],
         EXACT,
         attrs={"axis": -1, "reverse": False})
    xl = arr("i64", [I64_MAX, 1, 1, -5])
    case("reduce", "cumsum_i64_wraps", "cumsum", [xl],
         [arr("i64", [I64_MAX, I64_MIN, I64_MIN + 1, I64_MIN - 4 + 2**64])], EXACT,
         attrs={"axis": 0, "reverse": False})
    case("reduce", "cumsum_bool_reverse", "cumsum", [arr("bool", [True, False, True, True])],
         [arr("i32", [3, 2, 2, 1])], EXACT, attrs={"axis": 0, "reverse": True})
    # The primitives directly: reduce_* with axes attributes, argmax index dtype, cumsum.
    y = np.sum(xs, axis=(0, 2))
    case("reduce", "prim_reduce_sum_axes02", "prim:reduce_sum", [x],
         [("f32", to_dtype("f32", y))], sum_tol(np.sum(np.abs(xs), axis=(0, 2))),
         attrs={"axes": ints([0, 2])})
    xl2 = arr("i64", [I64_MIN, 3, I64_MAX, -3], (2, 2))
    case("reduce", "prim_reduce_max_i64", "prim:reduce_max", [xl2], [arr("i64", [3, I64_MAX])],
         EXACT, attrs={"axes": ints([1])})
    case("reduce", "prim_reduce_min_neg_axis", "prim:reduce_min", [xn],
         [("f32", to_dtype("f32", np.min(f64(xn), axis=1)))], EXACT, attrs={"axes": ints([-1])})
    case("reduce", "prim_argmax_neg_axis", "prim:argmax", [xa],
         [arr("i32", np.argmax(f64(xa), axis=1))], EXACT, attrs={"axis": {"int": -1}})
    case("reduce", "prim_argmin_i64_index", "prim:argmin", [xa],
         [arr("i64", np.argmin(f64(xa), axis=0))], EXACT,
         attrs={"axis": {"int": 0}, "index_dtype": {"dtype": "i64"}})
    v = f64(xc)
    case("reduce", "prim_cumsum_reverse", "prim:cumsum", [xc],
         [("f32", to_dtype("f32", np.flip(np.cumsum(np.flip(v, 0), 0), 0)))],
         sum_tol(np.flip(np.cumsum(np.flip(np.abs(v), 0), 0), 0)),
         attrs={"axis": {"int": 0}, "reverse": {"b": True}})


# ---- contractions ----


def dot_case(name, op, inputs, spec, tol_dtype="f32", out_dtype=None, attrs=None):
    vals = [f64(t) for t in inputs]
    y = np.einsum(spec, *vals)
    bound = np.einsum(spec, *[np.abs(v) for v in vals])
    od = out_dtype or inputs[0][0]
    if od in ("i32", "i64"):
        out, tol = (od, np.asarray(y).astype(NP[od])), EXACT
    elif od == "bf16" or tol_dtype == "bf16":
        out, tol = (od, to_dtype(od, y)), (2.0**-7, 2.0**-7 * float(np.max(bound)))
    else:
        out, tol = (od, to_dtype(od, y)), sum_tol(bound)
    case("dot", name, op, inputs, [out], tol, attrs=attrs)


def dot_cases():
    def m(shape, lo=-2.0, hi=2.0, dtype="f32", step=1.0 / 8):
        return arr(dtype, grid(int(np.prod(shape)), lo, hi, step), shape)

    a, b = m((3, 4)), m((4, 5), -1.5, 3.0)
    dot_case("matmul_2d", "matmul", [a, b], "ij,jk->ik")
    dot_case("matmul_1d_2d", "matmul", [m((4,)), b], "j,jk->k")
    dot_case("matmul_2d_1d", "matmul", [a, m((4,), 0.5, 2.0)], "ij,j->i")
    dot_case("matmul_1d_1d", "matmul", [m((4,)), m((4,), 0.5, 2.0)], "j,j->")
    dot_case("matmul_batched_rhs_2d", "matmul", [m((2, 3, 4)), b], "bij,jk->bik")
    dot_case("matmul_broadcast_batch", "matmul", [m((2, 1, 3, 4)), m((3, 4, 2), -1.0, 1.0)],
             "abij,bjk->abik")
    dot_case("matmul_2d_3d", "matmul", [a, m((2, 4, 5), 0.0, 3.0)], "ij,bjk->bik")
    dot_case("matmul_1d_3d", "matmul", [m((4,)), m((2, 4, 5), 0.0, 3.0)], "j,bjk->bk")
    dot_case("matmul_i32", "matmul", [arr("i32", np.arange(-3, 3).reshape(2, 3)),
                                      arr("i32", np.arange(12).reshape(3, 4))], "ij,jk->ik")
    # Integer contractions wrap, as XLA's do.
    a_i, b_i = arr("i32", [[65536, 65536, 3]]), arr("i32", [[65536], [1], [-7]])
    case("dot", "matmul_i32_wraps", "matmul", [a_i, b_i],
         [arr("i32", [[wrap(65536 * 65536 + 65536 - 21, "i32")]])], EXACT)
    a_l, b_l = arr("i64", [2**62, 2**62, 5]), arr("i64", [2, 1, -1])
    case("dot", "dot_general_i64_wraps", "dot_general", [a_l, b_l],
         [arr("i64", wrap(2**63 + 2**62 - 5, "i64"), ())], EXACT,
         attrs={"a_contract": [0], "b_contract": [0]})
    dot_case("matmul_bf16", "matmul", [m((2, 3), dtype="bf16", step=0.25),
                                       m((3, 2), 0.5, 5.0, dtype="bf16", step=0.25)],
             "ij,jk->ik")
    # dot_general: several contracting dims in different orders, batch dims not leading.
    x, y = m((2, 3, 4)), m((4, 3, 5), -1.0, 2.0)
    dot_case("dot_general_multi_contract", "dot_general", [x, y], "abc,cbd->ad",
             attrs={"a_contract": [1, 2], "b_contract": [1, 0]})
    x, y = m((3, 2, 4)), m((4, 2, 5), -1.0, 2.0)
    dot_case("dot_general_batch_middle", "dot_general", [x, y], "ibk,kbj->bij",
             attrs={"a_contract": [2], "b_contract": [0], "a_batch": [1], "b_batch": [1]})
    x, y = m((2, 3, 4), dtype="bf16", step=0.25), m((2, 4, 2), dtype="bf16", step=0.25)
    dot_case("dot_general_bf16_out_f32", "dot_general", [x, y], "bij,bjk->bik", out_dtype="f32",
             tol_dtype="f32", attrs={"a_contract": [2], "b_contract": [1], "a_batch": [0],
                                     "b_batch": [0], "out_dtype": "f32"})
    dot_case("dot_general_outer", "dot_general", [m((3,)), m((2,))], "i,j->ij",
             attrs={"a_contract": [], "b_contract": []})
    # The primitive directly.
    x, y = m((2, 3, 4)), m((3, 4, 2, 5), -1.0, 1.0)
    dot_case("prim_dot_general", "prim:dot_general", [x, y], "bij,ijkl->bkl",
             attrs={"lhs_contract": ints([1, 2]), "rhs_contract": ints([0, 1])})
    x, y = m((4, 2, 3)), m((2, 4, 3), -1.0, 1.0)
    dot_case("prim_dot_general_batch", "prim:dot_general", [x, y], "abk,bak->ba",
             attrs={"lhs_contract": ints([2]), "rhs_contract": ints([2]),
                    "lhs_batch": ints([1, 0]), "rhs_batch": ints([0, 1])})
    x, y = m((2, 3), dtype="bf16", step=0.25), m((3, 2), dtype="bf16", step=0.25)
    dot_case("prim_dot_general_out_f32", "prim:dot_general", [x, y], "ij,jk->ik",
             out_dtype="f32", attrs={"lhs_contract": ints([1]), "rhs_contract": ints([0]),
                                     "out_dtype": {"dtype": "f32"}})
    # einsum
    specs = [
        ("einsum_matmul", "ij,jk->ik", [(3, 4), (4, 2)]),
        ("einsum_batched", "bij,bjk->bik", [(2, 3, 4), (2, 4, 2)]),
        ("einsum_transpose", "ij->ji", [(3, 4)]),
        ("einsum_sum_all", "ij->", [(3, 4)]),
        ("einsum_sum_rows", "ij->j", [(3, 4)]),
        ("einsum_inner", "i,i->", [(5,), (5,)]),
        ("einsum_outer", "i,j->ij", [(3,), (2,)]),
        ("einsum_attention", "bhtd,bhsd->bhts", [(1, 2, 3, 4), (1, 2, 2, 4)]),
        ("einsum_multi_contract", "abc,cbd->ad", [(2, 3, 4), (4, 3, 2)]),
        ("einsum_chain3", "ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
        ("einsum_implicit", "ba,ca", [(2, 3), (4, 3)]),
        ("einsum_keep_shared", "ij,jk->ijk", [(2, 3), (3, 2)]),
        ("einsum_elementwise", "ij,ij->ij", [(2, 3), (2, 3)]),
        ("einsum_private_sum", "ijk,k->i", [(2, 3, 4), (4,)]),
        ("einsum_upper_labels", "Ab,bC->CA", [(2, 3), (3, 4)]),
    ]
    for k, (name, spec, shapes) in enumerate(specs):
        ops = [m(s, -1.5 + 0.25 * j, 1.5 + 0.5 * k / len(specs)) for j, s in enumerate(shapes)]
        dot_case(name, "einsum", ops, spec, attrs={"spec": spec})


# ---- shapes ----


def shape_cases():
    x = arr("f32", grid(24, -3, 3, 1.0 / 4), (2, 3, 4))
    v = x[1]

    def sc(name, op, inputs, out, attrs=None):
        case("shape", name, op, inputs, [out], EXACT, attrs=attrs)

    sc("reshape_4x6", "reshape", [x], ("f32", v.reshape(4, 6)), {"shape": [4, 6]})
    sc("reshape_infer", "reshape", [x], ("f32", v.reshape(6, -1)), {"shape": [6, -1]})
    sc("reshape_flat_i32", "reshape", [arr("i32", np.arange(6).reshape(2, 3))],
       arr("i32", np.arange(6)), {"shape": [6]})
    sc("reshape_scalar", "reshape", [arr("f32", 3.5, ())], arr("f32", [[3.5]]), {"shape": [1, 1]})
    sc("prim_reshape", "prim:reshape", [x], ("f32", v.reshape(3, 2, 2, 2)),
       {"shape": ints([3, 2, 2, 2])})
    sc("transpose_201", "transpose", [x], ("f32", v.transpose(2, 0, 1)), {"perm": [2, 0, 1]})
    sc("transpose_neg", "transpose", [x], ("f32", v.transpose(0, 2, 1)), {"perm": [0, -1, -2]})
    sc("transpose_default", "transpose_all", [x], ("f32", v.T))
    sc("prim_transpose", "prim:transpose", [x], ("f32", v.transpose(1, 2, 0)),
       {"perm": ints([1, 2, 0])})
    sc("swapaxes", "swapaxes", [x], ("f32", np.swapaxes(v, 0, 2)), {"a": 0, "b": 2})
    sc("moveaxis", "moveaxis", [x], ("f32", np.moveaxis(v, 0, -1)), {"source": 0,
                                                                    "destination": -1})
    c = arr("f32", [1.0, 2.0, 3.0], (3, 1))
    sc("broadcast_to_3d", "broadcast_to", [c], ("f32", np.broadcast_to(c[1], (2, 3, 4))),
       {"shape": [2, 3, 4]})
    sc("broadcast_to_rank0", "broadcast_to", [arr("i32", 7, ())],
       arr("i32", np.full((2, 2), 7)), {"shape": [2, 2]})
    r = arr("bf16", [1.0, -2.0, 0.5])
    sc("prim_broadcast_in_dim_col", "prim:broadcast_in_dim", [r],
       ("bf16", np.broadcast_to(r[1][:, None], (3, 4))), {"shape": ints([3, 4]), "dims": ints([0])})
    r2 = arr("f32", [1.0, 2.0, 3.0], (1, 3))
    sc("prim_broadcast_in_dim_expand", "prim:broadcast_in_dim", [r2],
       ("f32", np.broadcast_to(r2[1][:, None, :], (2, 4, 3))),
       {"shape": ints([2, 4, 3]), "dims": ints([0, 2])})
    sc("expand_dims_neg", "expand_dims", [x], ("f32", v[:, :, None, :]), {"axis": -2})
    sc("squeeze", "squeeze", [arr("f32", [1.0, 2.0], (1, 2, 1))], arr("f32", [1.0, 2.0]),
       {"axes": [0, -1]})
    sc("flatten", "flatten", [x], ("f32", v.ravel()))
    y = arr("f32", grid(35, -4, 4, 1.0 / 4), (5, 7))
    sc("slice_basic", "slice", [y], ("f32", y[1][1:4, 2:7]), {"start": [1, 2], "stop": [4, 7]})
    sc("slice_strided", "slice", [y], ("f32", y[1][0:5:2, 1:7:3]),
       {"start": [0, 1], "stop": [5, 7], "strides": [2, 3]})
    sc("slice_stride_past_end", "slice", [y], ("f32", y[1][1:2:4, 0:7:10]),
       {"start": [1, 0], "stop": [2, 7], "strides": [4, 10]})
    sc("slice_empty", "slice", [y], ("f32", y[1][2:2, :]), {"start": [2, 0], "stop": [2, 7]})
    sc("slice_axis_neg", "slice_axis", [x], ("f32", v[:, :, 1:3]),
       {"axis": -1, "start": 1, "stop": 3})
    sc("prim_slice_strided", "prim:slice", [x], ("f32", v[1:2, 0:3:2, 1:4:2]),
       {"start": ints([1, 0, 1]), "stop": ints([2, 3, 4]), "strides": ints([1, 2, 2])})
    p, q = arr("f32", [1.0, 2.0, 3.0, 4.0], (2, 2)), arr("f32", [5.0, 6.0], (1, 2))
    sc("concatenate_axis0", "concatenate", [p, q], ("f32", np.concatenate([p[1], q[1]], 0)),
       {"axis": 0})
    r3 = arr("f32", [7.0, 8.0, 9.0, 10.0, 11.0, 12.0], (2, 3))
    sc("concatenate_axis_neg_3", "concatenate", [p, r3, p],
       ("f32", np.concatenate([p[1], r3[1], p[1]], -1)), {"axis": -1})
    sc("concatenate_promotes", "concatenate", [arr("i32", [1, 2]), arr("f32", [0.5])],
       arr("f32", [1.0, 2.0, 0.5]), {"axis": 0})
    sc("concatenate_empty_operand", "concatenate", [p, ("f32", np.zeros((0, 2), np.float32))],
       p, {"axis": 0})
    sc("prim_concatenate_i64", "prim:concatenate", [arr("i64", [[1], [2]]),
                                                    arr("i64", [[3, I64_MAX], [4, 5]])],
       arr("i64", [[1, 3, I64_MAX], [2, 4, 5]]), {"axis": {"int": 1}})
    sc("stack_axis0", "stack", [arr("f32", [1.0, 2.0]), arr("f32", [3.0, 4.0])],
       arr("f32", [[1.0, 2.0], [3.0, 4.0]]), {"axis": 0})
    sc("stack_axis_neg", "stack", [arr("f32", [1.0, 2.0]), arr("f32", [3.0, 4.0])],
       arr("f32", [[1.0, 3.0], [2.0, 4.0]]), {"axis": -1})
    parts = np.split(v, 2, axis=2)
    case("shape", "split_axis2", "split", [x], [("f32", s) for s in parts], EXACT,
         attrs={"sections": 2, "axis": 2})
    z = arr("f32", [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], (2, 3))
    sc("pad_low_high", "pad", [z], ("f32", np.pad(z[1], ((1, 0), (2, 1)), constant_values=-1.5)),
       {"low": [1, 2], "high": [0, 1], "value": -1.5})
    sc("pad_i32", "pad", [arr("i32", [1, 2, 3])], arr("i32", [0, 0, 1, 2, 3, 0]),
       {"low": [2], "high": [1], "value": 0.0})
    sc("pad_bf16", "pad", [arr("bf16", [1.5, -2.0])], arr("bf16", [1.5, -2.0, 3.0, 3.0]),
       {"low": [0], "high": [2], "value": 3.0})
    # Interior padding exists on the primitive only.
    zi = np.full((1 + 2 + 1 + 0, 1 + 3 + 2 * 2 + 2), 9.0, dtype=np.float32)  # low+n+interior+high
    zi[1:1 + 3:2, 1:1 + 7:3] = z[1]
    sc("prim_pad_interior", "prim:pad", [z], ("f32", zi),
       {"low": ints([1, 1]), "high": ints([0, 2]), "interior": ints([1, 2]), "value": {"f": 9.0}})
    sc("prim_pad_interior_empty_dim", "prim:pad", [("f32", np.zeros((0, 2), np.float32))],
       ("f32", np.full((2, 5), 1.0, np.float32)),
       {"low": ints([1, 0]), "high": ints([1, 0]), "interior": ints([3, 3]), "value": {"f": 1.0}})
    sc("flip_axis0", "flip", [x], ("f32", np.flip(v, 0)), {"axes": [0]})
    sc("flip_axes_neg", "flip", [x], ("f32", np.flip(v, (0, 2))), {"axes": [0, -1]})
    sc("prim_rev", "prim:rev", [arr("i32", np.arange(6).reshape(2, 3))],
       arr("i32", np.arange(6).reshape(2, 3)[:, ::-1]), {"axes": ints([1])})


# ---- indexing ----


def index_cases():
    x = arr("f32", grid(12, -3, 3, 1.0 / 4), (3, 4))
    v = x[1]

    def ic(name, op, inputs, outs, attrs=None):
        case("index", name, op, inputs, outs, EXACT, attrs=attrs)

    idx = arr("i32", [[2, 0], [1, 1]])
    ic("take_axis0", "take", [x, idx], [("f32", np.take(v, idx[1], axis=0))], {"axis": 0})
    idx = arr("i32", [3, -3, 5, 0, 1])
    ic("take_axis1_clamped", "take", [x, idx], [("f32", np.take(v, idx[1], axis=1, mode="clip"))],
       {"axis": 1})
    idx = arr("i64", [[1], [2]])
    ic("take_i64_axis_neg", "take", [x, idx], [("f32", np.take(v, idx[1], axis=-1))],
       {"axis": -1})
    xb = arr("bf16", [1.0, 2.0, 3.0])
    ic("take_bf16_scalar_index", "take", [xb, arr("i32", 2, ())], [arr("bf16", 3.0, ())],
       {"axis": 0})
    ti = arr("i32", [[3, 0, 0], [1, -1, 9], [2, 2, 3]])
    ic("take_along_axis1", "take_along_axis", [x, ti],
       [("f32", np.take_along_axis(v, np.clip(ti[1], 0, 3), axis=1))], {"axis": 1})
    ti0 = arr("i32", [[2, 0, 1, 5]])
    ic("take_along_axis0_clamped", "take_along_axis", [x, ti0],
       [("f32", np.take_along_axis(v, np.clip(ti0[1], 0, 2), axis=0))], {"axis": 0})
    # scatter_add: repeated indices accumulate; out-of-range ones clamp.
    base = arr("f32", np.zeros((4, 2)))
    si = arr("i32", [1, 3, 1, 1, 7, -2])
    upd = arr("f32", grid(12, -2, 2, 1.0 / 4), (6, 2))
    ref = base[1].astype(np.float64).copy()
    np.add.at(ref, np.clip(si[1], 0, 3), f64(upd))
    ic("scatter_add_repeated", "scatter_add", [base, si, upd], [("f32", ref.astype(np.float32))],
       {"axis": 0})
    base = arr("i32", np.arange(12).reshape(3, 4))
    si = arr("i32", [[0, 0], [3, 2]])
    upd = arr("i32", np.arange(1, 13).reshape(3, 2, 2))
    ref = base[1].astype(np.int64).copy()
    for o in range(3):
        for j, k in enumerate(si[1].ravel()):
            ref[o, k] += upd[1].reshape(3, 4)[o, j]
    ic("scatter_add_axis1_i32", "scatter_add", [base, si, upd], [arr("i32", ref)], {"axis": 1})
    base = arr("f32", [[1.0, 2.0], [3.0, 4.0]])
    sa_i = arr("i32", [[1, 1, 0], [0, 5, 0]])
    sa_u = arr("f32", [[0.5, 0.25, 8.0], [1.0, 2.0, 4.0]])
    ref = f64(base).copy()
    for r in range(2):
        for j in range(3):
            ref[r, min(max(sa_i[1][r, j], 0), 1)] += sa_u[1][r, j]
    ic("prim_scatter_add_along", "prim:scatter_add_along", [base, sa_i, sa_u],
       [("f32", ref.astype(np.float32))], {"axis": {"int": 1}})
    ic("prim_take_along_axis0", "prim:take_along", [x, arr("i64", [[2, 1, 0, 9]])],
       [("f32", np.array([[v[2, 0], v[1, 1], v[0, 2], v[2, 3]]], np.float32))], {"axis": {"int": 0}})
    ic("prim_take_clamped", "prim:take", [x, arr("i32", [-1, 4])],
       [("f32", v[[0, 2]])], {"axis": {"int": 0}})
    ic("prim_scatter_add_i64_wraps", "prim:scatter_add",
       [arr("i64", [I64_MAX, 0]), arr("i32", [0, 0]), arr("i64", [1, 2])],
       [arr("i64", [I64_MIN + 2, 0])], {"axis": {"int": 0}})
    ic("prim_scatter_add_along_i32_wraps", "prim:scatter_add_along",
       [arr("i32", [I32_MAX, 5]), arr("i32", [0, 0]), arr("i32", [1, 1])],
       [arr("i32", [I32_MIN + 1, 5])], {"axis": {"int": 0}})
    ic("prim_scatter_add", "prim:scatter_add",
       [arr("f32", [1.0, 2.0, 3.0]), arr("i32", [[2, 2], [0, 9]]),
        arr("f32", [[0.5, 0.25], [1.0, 4.0]])], [arr("f32", [2.0, 2.0, 7.75])], {"axis": {"int": 0}})

    # dynamic_slice / dynamic_update_slice: starts clamp so the slice fits.
    def dyn_start(s, n, size):
        return min(max(s, 0), n - size)

    y = arr("f32", grid(20, -5, 5, 1.0 / 4), (4, 5))
    for name, starts, sizes in (("in_range", [1, 2], [2, 3]), ("clamped_high", [3, 4], [2, 3]),
                                ("clamped_negative", [-2, -9], [3, 2]), ("full", [9, 0], [4, 5])):
        st = [dyn_start(s, n, k) for s, n, k in zip(starts, (4, 5), sizes)]
        out = y[1][st[0]:st[0] + sizes[0], st[1]:st[1] + sizes[1]]
        ic(f"dynamic_slice_{name}", "dynamic_slice",
           [y, arr("i32", starts[0], ()), arr("i64", starts[1], ())], [("f32", out)],
           {"sizes": sizes})
        upd = arr("f32", -np.arange(1, 1 + sizes[0] * sizes[1]).reshape(sizes) / 4.0)
        ref = y[1].copy()
        ref[st[0]:st[0] + sizes[0], st[1]:st[1] + sizes[1]] = upd[1]
        ic(f"dynamic_update_slice_{name}", "dynamic_update_slice",
           [y, upd, arr("i32", starts[0], ()), arr("i32", starts[1], ())], [("f32", ref)])
    ic("prim_dynamic_slice_i64_start", "prim:dynamic_slice",
       [arr("i32", np.arange(6)), arr("i64", 2**40, ())], [arr("i32", [3, 4, 5])],
       {"sizes": ints([3])})
    ic("prim_dynamic_update_slice_clamp", "prim:dynamic_update_slice",
       [arr("i32", np.arange(6)), arr("i32", [-1, -2]), arr("i32", 5, ())],
       [arr("i32", [0, 1, 2, 3, -1, -2])])
    # iota
    for name, shape, dim, dt in (("iota_dim0", (3, 4), 0, "i32"), ("iota_dim1_f32", (3, 4), 1, "f32"),
                                 ("iota_dim_neg_i64", (2, 3, 2), -2, "i64")):
        out = np.broadcast_to(np.arange(shape[dim]).reshape(
            [shape[dim] if d == dim % len(shape) else 1 for d in range(len(shape))]), shape)
        ic(name, "iota", [], [arr(dt, out) if dt != "f32" else ("f32", out.astype(np.float32))],
           {"shape": list(shape), "dimension": dim, "dtype": dt})
    ic("prim_iota_bf16", "prim:iota", [], [arr("bf16", np.arange(5.0))],
       {"shape": ints([5]), "dimension": {"int": 0}, "dtype": {"dtype": "bf16"}})

    # top_k (descending; NaN first; ties keep the lower index) and sort.
    def order_desc(row):
        return sorted(range(len(row)), key=lambda i: (0 if math.isnan(row[i]) else 1,
                                                      -row[i] if not math.isnan(row[i]) else 0, i))

    def order_asc(row):
        return sorted(range(len(row)), key=lambda i: (1 if math.isnan(row[i]) else 0,
                                                      row[i] if not math.isnan(row[i]) else 0, i))

    tk = arr("f32", [3.0, 1.0, 3.0, NAN, -INF, 2.0, 0.5, 0.5, -1.0, 7.0, 0.5, INF], (2, 6))
    for k in (0, 3, 6):
        rows = [order_desc(list(f64(tk)[r]))[:k] for r in range(2)]
        vals = np.array([[tk[1][r, i] for i in rows[r]] for r in range(2)], np.float32).reshape(2, k)
        ic(f"top_k_k{k}", "top_k", [tk], [("f32", vals), arr("i32", np.array(rows).reshape(2, k))],
           {"k": k})
    tl = arr("i64", [2**53, 2**53 + 1, -5, I64_MIN, I64_MAX, 2**53 + 1])
    rows = order_desc([int(e) for e in tl[1]])
    ic("top_k_i64_exact", "top_k", [tl], [arr("i64", [int(tl[1][i]) for i in rows[:4]]),
                                          arr("i32", rows[:4])], {"k": 4})
    for desc in (False, True):
        rows = [(order_desc if desc else order_asc)(list(f64(tk)[r])) for r in range(2)]
        vals = np.array([[tk[1][r, i] for i in rows[r]] for r in range(2)], np.float32)
        ic("sort_f32_" + ("descending" if desc else "ascending"), "sort", [tk],
           [("f32", vals), arr("i32", rows)], {"descending": desc})
    si = arr("i32", [5, I32_MIN, -1, 5, I32_MAX, 0])
    rows = order_asc([int(e) for e in si[1]])
    ic("sort_i32_ascending", "sort", [si], [arr("i32", [int(si[1][i]) for i in rows]),
                                            arr("i32", rows)], {"descending": False})
    ic("prim_top_k_bf16", "prim:top_k", [arr("bf16", [1.0, 4.0, -2.0, 4.0])],
       [arr("bf16", [4.0, 4.0]), arr("i32", [1, 3])], {"k": {"int": 2}})
    oh = arr("i32", [0, 2, -1, 5, 3])
    ic("one_hot_f32", "one_hot", [oh],
       [("f32", (oh[1][:, None] == np.arange(4)[None, :]).astype(np.float32))], {"n": 4})
    ic("one_hot_i32_2d", "one_hot", [arr("i64", [[1], [0]])],
       [arr("i32", [[[0, 1, 0]], [[1, 0, 0]]])], {"n": 3, "dtype": "i32"})


# ---- random (threefry2x32, 20 rounds) ----

M32 = 0xFFFFFFFF


def threefry2x32(k0, k1, c0, c1):
    rot = [13, 15, 26, 6, 17, 29, 16, 24]
    ks = [k0, k1, 0x1BD11BDA ^ k0 ^ k1]
    x0, x1 = (c0 + ks[0]) & M32, (c1 + ks[1]) & M32
    for r in range(20):
        x0 = (x0 + x1) & M32
        x1 = ((x1 << rot[r % 8]) | (x1 >> (32 - rot[r % 8]))) & M32
        x1 ^= x0
        if r % 4 == 3:
            s = r // 4 + 1
            x0 = (x0 + ks[s % 3]) & M32
            x1 = (x1 + ks[(s + 1) % 3] + s) & M32
    return x0, x1


# Known-answer vectors of Random123 (threefry2x32_20): (key, counter) -> output.
THREEFRY_KAT = [
    ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
]


def as_i32(u):
    return u - 2**32 if u >= 2**31 else u


def random_cases():
    for key, ctr, out in THREEFRY_KAT:
        assert threefry2x32(*key, *ctr) == out, (key, ctr)
    key = (0, 42)
    keyt = arr("i32", [as_i32(k) for k in key])
    for name, shape, domain in (("random_bits", (3, 4), 0), ("random_bits_domain5", (2, 3), 5)):
        n = int(np.prod(shape))
        vals = [as_i32(threefry2x32(*key, ((i >> 32) ^ (domain << 24)) & M32, i & M32)[0])
                for i in range(n)]
        attrs = {"shape": ints(shape)}
        if domain:
            attrs["domain"] = {"int": domain}
        case("random", "prim_" + name, "prim:random_bits", [keyt], [arr("i32", vals, shape)],
             EXACT, attrs)
    key2 = (0xDEADBEEF, 7)
    k2 = arr("i32", [as_i32(k) for k in key2])
    for dt in ("f32", "f64", "bf16", "f16"):
        vals = []
        for i in range(6):
            x0, x1 = threefry2x32(*key2, (i >> 32) & M32, i & M32)
            if dt == "f64":
                vals.append(((x0 << 32 | x1) >> 11) * 2.0**-53)
            elif dt == "bf16":
                vals.append((x0 >> 24) * 2.0**-8)
            elif dt == "f16":
                vals.append((x0 >> 21) * 2.0**-11)
            else:
                vals.append((x0 >> 8) * 2.0**-24)
        case("random", f"prim_random_uniform_{dt}", "prim:random_uniform", [k2],
             [arr(dt, vals, (2, 3))], EXACT, {"shape": ints([2, 3]), "dtype": {"dtype": dt}})
    for name, data, dt in (("fold_in_i32", 7, "i32"), ("fold_in_i64", 2**40 + 3, "i64")):
        d = data & 0xFFFFFFFFFFFFFFFF
        a, b = threefry2x32(*key, ((d >> 32) ^ 0x80000000) & M32, d & M32)
        case("random", "prim_random_" + name, "prim:random_fold_in", [keyt, arr(dt, data, ())],
             [arr("i32", [as_i32(a), as_i32(b)])], EXACT)


# ---- neural-network composites ----


def nn_cases():
    x = arr("f32", grid(24, -6, 6, 1.0 / 16), (4, 6))
    v = f64(x)

    def nc(name, op, inputs, y, attrs=None, tol=NN, dtype="f32"):
        outs = y if isinstance(y, list) else [(dtype, to_dtype(dtype, y))]
        case("nn", name, op, inputs, outs, tol, attrs=attrs)

    erf = np.vectorize(math.erf, otypes=[np.float64])
    nc("relu", "relu", [x], np.maximum(v, 0), tol=EXACT)
    nc("silu", "silu", [x], v / (1 + np.exp(-v)))
    c = math.sqrt(2 / math.pi)
    nc("gelu_tanh", "gelu", [x], 0.5 * v * (1 + np.tanh(c * (v + 0.044715 * v**3))),
       {"approximate": True})
    nc("gelu_erf", "gelu", [x], 0.5 * v * (1 + erf(v / math.sqrt(2))), {"approximate": False})

    def softmax(a, axis):
        e = np.exp(a - a.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)

    def lse(a, axis, keepdims=False):
        m = np.max(a, axis=axis, keepdims=True)
        m = np.where(np.isinf(m), 0.0, m)
        with np.errstate(divide="ignore"):
            s = np.log(np.sum(np.exp(a - m), axis=axis, keepdims=True)) + m
        return s if keepdims else np.squeeze(s, axis=axis)

    nc("softmax_last", "softmax", [x], softmax(v, -1), {"axis": -1})
    nc("softmax_axis0", "softmax", [x], softmax(v, 0), {"axis": 0})
    big = arr("f32", [1000.0, 999.0, -INF, 998.0, -INF, -INF, 0.0, 1.0], (2, 4))
    nc("softmax_large_and_inf", "softmax", [big], softmax(f64(big), -1), {"axis": -1})
    nc("log_softmax_last", "log_softmax", [x], v - lse(v, -1, True), {"axis": -1})
    nc("log_softmax_axis0", "log_softmax", [x], v - lse(v, 0, True), {"axis": 0})
    nc("logsumexp_axis1", "logsumexp", [x], lse(v, 1), {"axes": [1], "keepdims": False})
    nc("logsumexp_keepdims", "logsumexp", [x], lse(v, 0, True), {"axes": [0], "keepdims": True})
    inf_rows = arr("f32", [-INF, -INF, -INF, 1.0, INF, 2.0, 88.0, 89.0, 90.0], (3, 3))
    nc("logsumexp_inf_rows", "logsumexp", [inf_rows], lse(f64(inf_rows), 1),
       {"axes": [1], "keepdims": False})
    gamma = arr("f32", grid(6, 0.5, 2.0, 1.0 / 8))
    beta = arr("f32", grid(6, -1.0, 1.0, 1.0 / 8))

    def layer_norm(a, g, b, eps):
        mu = a.mean(-1, keepdims=True)
        var = ((a - mu) ** 2).mean(-1, keepdims=True)
        return (a - mu) / np.sqrt(var + eps) * g + b

    nc("layer_norm", "layer_norm", [x, gamma, beta], layer_norm(v, f64(gamma), f64(beta), 1e-5),
       {"eps": 1e-5})
    nc("layer_norm_eps", "layer_norm", [x, gamma, beta], layer_norm(v, f64(gamma), f64(beta), 0.5),
       {"eps": 0.5})
    xb = arr("bf16", grid(12, -3, 3, 1.0 / 8), (2, 6))
    gb, bb = arr("bf16", f64(gamma)), arr("bf16", f64(beta))
    # bf16 normalises in f32 and rounds the normalised value to bf16 before scaling.
    xn = to_dtype("bf16", layer_norm(f64(xb), 1.0, 0.0, 1e-5)).astype(np.float64)
    nc("layer_norm_bf16", "layer_norm", [xb, gb, bb],
       to_dtype("bf16", to_dtype("bf16", xn * f64(gb)).astype(np.float64) + f64(bb)),
       {"eps": 1e-5}, tol=(2.0**-6, 2.0**-8), dtype="bf16")
    w = arr("f32", grid(6, -1.0, 2.0, 1.0 / 8))
    nc("rms_norm", "rms_norm", [x, w], v / np.sqrt((v * v).mean(-1, keepdims=True) + 1e-6) * f64(w),
       {"eps": 1e-6})
    labels = arr("i32", [0, 5, 2, 3])
    ce = -np.take_along_axis(v - lse(v, -1, True), labels[1][:, None], axis=-1)[:, 0]
    nc("cross_entropy", "cross_entropy", [x, labels], ce)
    lg = arr("f32", grid(24, -4, 4, 1.0 / 16), (2, 2, 6))
    lb = arr("i64", [[1, 4], [5, 0]])
    lv = f64(lg)
    ce = -np.take_along_axis(lv - lse(lv, -1, True), lb[1][..., None], axis=-1)[..., 0]
    nc("cross_entropy_3d_i64_labels", "cross_entropy", [lg, lb], ce)
    t, s, off = 3, 5, 1
    mask = np.arange(s)[None, :] <= np.arange(t)[:, None] + off
    nc("causal_mask", "causal_mask", [], [arr("bool", mask)], {"t": t, "s": s, "offset": off},
       tol=EXACT)
    nc("clip", "clip", [arr("f32", [-3.0, -1.0, 0.5, 2.0, 9.0, NAN])],
       np.array([-1.0, -1.0, 0.5, 2.0, 2.0, NAN]), {"lo": -1.0, "hi": 2.0}, tol=EXACT)


# ---- dtype promotion: JAX's lattice, for the dtypes partix has ----

# Edges of the lattice (lower -> higher). 'i*' and 'f*' are the weak types of a plain integral
# or fractional number; they materialise as i32 and f32 when nothing stronger is present.
LATTICE = {"bool": ["i*"], "i*": ["i32"], "i32": ["i64"], "i64": ["f*"], "f*": ["f16", "bf16"],
           "f16": ["f32"], "bf16": ["f32"], "f32": ["f64"], "f64": []}
DTYPES = ["bool", "i32", "i64", "f16", "bf16", "f32", "f64"]


def upper(t):
    seen, todo = set(), [t]
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo.extend(LATTICE[n])
    return seen


def join(a, b):
    common = upper(a) & upper(b)
    least = [c for c in common if common <= upper(c)]
    assert len(least) == 1, (a, b, least)
    return {"i*": "i32", "f*": "f32"}.get(least[0], least[0])


def promotion():
    table = [[join(a, b) for b in DTYPES] for a in DTYPES]
    weak = []
    for d in DTYPES:
        for v in (2.0, 2.5):
            weak.append({"dtype": d, "value": v, "result": join(d, "i*" if v == int(v) else "f*")})
    return {"dtypes": DTYPES, "table": table}, weak


def broadcasting():
    """numpy's broadcast of shape pairs; None where numpy refuses."""
    pairs = [((), ()), ((), (2, 3)), ((3,), (2, 3)), ((3, 1), (1, 4)), ((2, 1, 3), (4, 1)),
             ((1,), (5,)), ((5, 1, 1), (1, 4, 1)), ((0,), (1,)), ((2, 0), (1, 0)), ((3,), (4,)),
             ((2, 3), (3, 2)), ((2, 3), (2,)), ((4, 2, 3), (5, 1, 3)), ((1, 1), (7,))]
    out = []
    for a, b in pairs:
        try:
            r = list(np.broadcast_shapes(a, b))
        except ValueError:
            r = None
        out.append({"a": list(a), "b": list(b), "result": r})
    return out


# ---------------------------------------------------------------------------------------------


def encode_attr(v):
    return json.dumps(v, separators=(",", ":"), allow_nan=False)


def main():
    np.seterr(all="ignore")
    warnings.simplefilter("ignore", RuntimeWarning)
    elementwise_unary()
    elementwise_binary()
    elementwise_broadcast()
    elementwise_convert()
    reduce_cases()
    dot_cases()
    shape_cases()
    index_cases()
    random_cases()
    nn_cases()
    prom, weak = promotion()
    lines = ["{", f'"generator":"tools/golden/primitives.py, numpy {np.__version__}",',
             f'"promotion":{encode_attr(prom)},', f'"weak":{encode_attr(weak)},',
             f'"broadcast":{encode_attr(broadcasting())},', '"cases":[']
    for k, c in enumerate(CASES):
        head = (f'{{"name":"{c["name"]}","family":"{c["family"]}","op":"{c["op"]}",'
                f'"attrs":{encode_attr(c["attrs"])},"rtol":{c["rtol"]!r},"atol":{c["atol"]!r},')
        ins = ",".join(enc_tensor(t) for t in c["inputs"])
        outs = ",".join(enc_tensor(t) for t in c["outputs"])
        lines.append(f'{head}"inputs":[{ins}],"outputs":[{outs}]}}' +
                     ("," if k + 1 < len(CASES) else ""))
    lines += ["]", "}"]
    text = "\n".join(lines) + "\n"
    json.loads(text)  # well-formed
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.path.join(root, "tests", "golden", "primitives.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    print(f"wrote {len(CASES)} cases, {len(text)} bytes to {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
