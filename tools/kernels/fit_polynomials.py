#!/usr/bin/env python3
"""Derives the constants of src/backend/cpu/vector_math.h.

Near-minimax polynomial fits by Lawson's iteratively reweighted least squares on
Chebyshev-distributed points, in 60-digit arithmetic (mpmath), minimising the error of the
quantity the kernel finally computes (see each fit's weight). Also prints the three-part
split of pi/2 used by the sin/cos range reduction.

Run: python3 tools/kernels/fit_polynomials.py [exp tanh erf_small erf_large pio2]
"""
import sys

import mpmath as mp

mp.mp.dps = 60


def lawson(target, weight, basis, a, b, n_pts=300, iters=50):
    """Coefficients c minimising max |weight(x) * (sum_k c_k basis_k(x) - target(x))| on [a, b]."""
    xs = [(a + b) / 2 + (b - a) / 2 * mp.cos(mp.pi * (i + mp.mpf(0.5)) / n_pts) for i in range(n_pts)]
    rows = [[bf(x) * weight(x) for bf in basis] for x in xs]
    tgts = [target(x) * weight(x) for x in xs]
    m = len(basis)
    w = [mp.mpf(1)] * n_pts
    best = None
    for _ in range(iters):
        A = mp.matrix(m, m)
        rhs = mp.matrix(m, 1)
        for row, t, wi in zip(rows, tgts, w):
            for i in range(m):
                rhs[i] += wi * row[i] * t
                for j in range(m):
                    A[i, j] += wi * row[i] * row[j]
        c = mp.lu_solve(A, rhs)
        errs = [abs(sum(c[k] * row[k] for k in range(m)) - t) for row, t in zip(rows, tgts)]
        e = max(errs)
        if best is None or e < best[1]:
            best = (c, e)
        s = sum(wi * ei for wi, ei in zip(w, errs))
        w = [wi * ei / s for wi, ei in zip(w, errs)]
    return best


def report(name, c, err, a, b):
    print(f"// {name} on [{mp.nstr(a, 6)}, {mp.nstr(b, 6)}]: max weighted error {mp.nstr(err, 3)}")
    for k in range(len(c)):
        print(f"  c{k} = {mp.nstr(c[k], 17)}")


def powers(count):
    return [(lambda x, p=p: x**p) for p in range(count)]


def fit_exp():
    # Float exp: e^r = 1 + r + r^2 q(r), |r| <= ln2/2; weight makes the error relative to e^r.
    a, b = -mp.log(2) / 2, mp.log(2) / 2
    tgt = lambda r: (mp.exp(r) - 1 - r) / r**2 if r != 0 else mp.mpf(0.5)
    c, e = lawson(tgt, lambda r: r**2 / mp.exp(r), powers(5), a, b)
    report("exp (float): q(r) = (e^r - 1 - r) / r^2", c, e, a, b)


def fit_tanh():
    # Float tanh for small x: tanh(x) = x + x^3 q(x^2), 0 <= x <= 0.625; relative error.
    a, b = mp.mpf(0), mp.mpf(0.625) ** 2
    tgt = lambda t: (mp.tanh(mp.sqrt(t)) - mp.sqrt(t)) / t**1.5 if t != 0 else -mp.mpf(1) / 3
    wt = lambda t: t**1.5 / mp.tanh(mp.sqrt(t)) if t != 0 else 0
    c, e = lawson(tgt, wt, powers(5), a, b)
    report("tanh (float): q(t) = (tanh(x) - x) / x^3, t = x^2", c, e, a, b)


def fit_erf_small():
    # erf for small x: erf(x) = x + x p(x^2), 0 <= x <= 1; relative error. Fitting
    # erf(x)/x - 1 keeps the large leading coefficient 2/sqrt(pi) out of the rounding.
    a, b = mp.mpf(0), mp.mpf(1)
    tgt = lambda t: mp.erf(mp.sqrt(t)) / mp.sqrt(t) - 1 if t != 0 else 2 / mp.sqrt(mp.pi) - 1
    wt = lambda t: mp.sqrt(t) / mp.erf(mp.sqrt(t)) if t != 0 else mp.sqrt(mp.pi) / 2
    c, e = lawson(tgt, wt, powers(8), a, b)
    report("erf small: p(t) = erf(x) / x - 1, t = x^2", c, e, a, b)


def fit_erf_large():
    # erf for 1 <= x <= 4: erf(x) = 1 - exp(-x^2) Q(x); the error that matters is the
    # absolute error of exp(-x^2) Q(x), hence the weight.
    a, b = mp.mpf(1), mp.mpf(4)
    tgt = lambda x: mp.erfc(x) * mp.exp(x * x)
    basis = [(lambda x, p=p: (x - mp.mpf(2.5)) ** p) for p in range(10)]
    c, e = lawson(tgt, lambda x: mp.exp(-x * x), basis, a, b)
    report("erf large: Q(x) = erfc(x) exp(x^2), powers of (x - 2.5)", c, e, a, b)


def fit_pio2():
    # pi/2 = C1 + C2 + C3 with C1, C2 of 33 significant bits: k * C1 and k * C2 are exact in
    # double for |k| < 2^20.
    def round_bits(v, bits):
        m, e = mp.frexp(v)
        return mp.ldexp(mp.nint(mp.ldexp(m, bits)), e - bits)
    pio2 = mp.pi / 2
    c1 = round_bits(pio2, 33)
    c2 = round_bits(pio2 - c1, 33)
    c3 = round_bits(pio2 - c1 - c2, 53)
    for n, v in (("C1", c1), ("C2", c2), ("C3", c3)):
        print(f"// {n} = {mp.nstr(v, 25)} (hex {float(v).hex()})")


if __name__ == "__main__":
    for w in sys.argv[1:] or ["exp", "tanh", "erf_small", "erf_large", "pio2"]:
        globals()["fit_" + w]()
