"""Exact comparison of linear scores over time, and the first time one overtakes another
(the certificates of the kinetic tournament, `structures/kinetic.py`).

An item has a positive weight c, a target time n and an id; its score at integer time t is
(n - t) / c (inverse) or (n - t) * c. Every comparison decides the sign of a*x - b*y (a, b
float64 weights, x, y integers) exactly, from the rounded products and, when those are
equal, from their exact rounding errors (Dekker's two-product). The order is therefore that
of exact rationals, independent of rounding; ties go to the smaller id. Crossing times come
from the float crossing time minus a rigorous error margin (an early answer only makes the
caller re-check), and when the margin does not clear the clock the first crossing is found
with the exact predicate.
"""
from __future__ import annotations

import numpy as np

from ..jit import njit

NO_EVENT = np.iinfo(np.int64).max
_SPLIT = 134217729.0  # 2**27 + 1 (Dekker split)
_EPS = 2.0 ** -52


@njit
def two_prod_err(a, b, p):
    """Exact error of p = fl(a*b): a*b == p + err (no overflow/underflow)."""
    t = _SPLIT * a
    ah = t - (t - a)
    al = a - ah
    t = _SPLIT * b
    bh = t - (t - b)
    bl = b - bh
    return ((ah * bh - p) + ah * bl + al * bh) + al * bl


@njit
def sign_diff(a, x, b, y):
    """Exact sign of a*x - b*y for finite floats (x, y integral, |x|, |y| < 2**53)."""
    p = a * x
    q = b * y
    # rounding is monotone: fl(A) > fl(B) implies A > B
    if p > q:
        return 1
    if p < q:
        return -1
    e = two_prod_err(a, x, p)
    f = two_prod_err(b, y, q)
    if e > f:
        return 1
    if e < f:
        return -1
    return 0


@njit
def tie(a, x, b, y, io, iw):
    """beats when fl(a*x) == fl(b*y): the exact sign from the rounding errors, then ids."""
    s = sign_diff(a, x, b, y)
    return s > 0 or (s == 0 and io < iw)


@njit
def beats(co, no, io, cw, nw, iw, t, inv):
    """True if item o = (c, n, id) ranks above item w at time t (ties: smaller id).
    Unequal rounded products decide at once (rounding is monotone); the rest is rare."""
    xo = float(no - t)
    xw = float(nw - t)
    if inv:  # xo/co vs xw/cw  <=>  xo*cw vs xw*co
        a = cw
        b = co
    else:
        a = co
        b = cw
    p = a * xo
    q = b * xw
    if p != q:
        return p > q
    return tie(a, xo, b, xw, io, iw)


@njit
def first_overtake(co, no, io, cw, nw, iw, T, tmax, inv):
    """A time t > T no later than the first time item o ranks above item w (w ranks
    above o at T); NO_EVENT if that does not happen by tmax. Scalars only (no arrays
    cross the call, which keeps reference counting out of the hot loop)."""
    if inv:
        p = cw
        q = co
    else:
        p = co
        q = cw
    # score_o - score_w  ~  p*(n_o - t) - q*(n_w - t): increasing in t only if q > p
    if not (q > p) or T >= tmax:
        return NO_EVENT
    a = q * float(nw)
    b = p * float(no)
    est = (a - b) / (q - p)
    # |est - crossing| is a few ulps of the products amplified by 1/(q - p); pad it well
    err = 8.0 * _EPS * ((abs(a) + abs(b)) / (q - p) + abs(est)) + 1.0
    if est - err > float(tmax):
        return NO_EVENT
    if est - err > float(T + 2):
        return np.int64(np.floor(est - err))
    # close to the clock: find the exact first integer time
    if not beats(co, no, io, cw, nw, iw, tmax, inv):
        return NO_EVENT
    if not (est < float(tmax)):
        g = tmax
    elif est <= float(T + 1):
        g = T + 1
    else:
        g = np.int64(np.ceil(est))
        if g > tmax:
            g = tmax
    # bracket: beats(lo) false, beats(hi) true, T <= lo < hi <= tmax
    if beats(co, no, io, cw, nw, iw, g, inv):
        hi = g
        step = np.int64(1)
        lo = hi - step
        while lo > T and beats(co, no, io, cw, nw, iw, lo, inv):
            hi = lo
            step *= 2
            lo = hi - step
        if lo < T:
            lo = T
    else:
        lo = g
        step = np.int64(1)
        hi = lo + step
        while hi < tmax and not beats(co, no, io, cw, nw, iw, hi, inv):
            lo = hi
            step *= 2
            hi = lo + step
        if hi > tmax:
            hi = tmax
    while hi - lo > 1:
        mid = lo + (hi - lo) // 2
        if beats(co, no, io, cw, nw, iw, mid, inv):
            hi = mid
        else:
            lo = mid
    return hi


@njit
def match(ca, na, ia, cb, nb, ib, T, tmax, inv):
    """Winner of a against b at T (0 = a, 1 = b) and the time it may change."""
    if beats(cb, nb, ib, ca, na, ia, T, inv):
        return 1, first_overtake(ca, na, ia, cb, nb, ib, T, tmax, inv)
    return 0, first_overtake(cb, nb, ib, ca, na, ia, T, tmax, inv)
