"""Policy state packed into a few flat arrays, whose segment offsets sit in a header.

numba adjusts the reference count of every array of a state around each hook call it
cannot fully inline, and its compile time grows with the number of fields, so the
larger policies (lrb, threelcache, workload_aware, asymcache) keep their tables as
segments of an int64, an int32 and a float64 array. These helpers lay the segments
out and, for the learned policies, view the model and the training rows inside them
and walk the trace's accesses in order.
"""
from __future__ import annotations

from ..jit import njit
from .gbdt import Forest


def layout(sizes) -> tuple[list[int], int]:
    """Start offsets of consecutive segments of the given sizes, and the total."""
    out, o = [], 0
    for n in sizes:
        out.append(o)
        o += int(n)
    return out, o


def header_layout(sizes: list[tuple[int, int]], first: int) -> list[int]:
    """Start offsets of consecutive segments (header slot, length) from `first`, then the end."""
    out, end = layout([n for _, n in sizes])
    return [first + o for o in out] + [first + end]


def forest_view(st, o_mi: int, l_mi: int, o_mf: int, l_mf: int, o_fm: int) -> Forest:
    """The model inside a packed learned-policy state (views; Python side). The o_*/l_*
    arguments are the header slots holding the segments' offsets and lengths."""
    h = st.I64
    return Forest(st.I32[h[o_mi]:h[o_mi] + h[l_mi]], st.F64[h[o_mf]:h[o_mf] + h[l_mf]],
                  h[h[o_fm]:h[o_fm] + 4])


def rows_view(st, nrows: int, o_x: int, o_y: int, n_feat: int):
    """The matured training rows and labels waiting for the next training (views)."""
    h = st.I64
    n = int(h[nrows])
    X = st.F64[h[o_x]:h[o_x] + n * n_feat].reshape(n, n_feat)
    return X, st.F64[h[o_y]:h[o_y] + n]


@njit
def next_access(h, offs, cur, rcur, skiplen, upto):
    """The next access before `upto` that a learned policy has not looked up yet, or -1.

    h[cur] is that access, h[rcur] its request; requests longer than h[skiplen] blocks
    are never served (the engine counts them as oversized), so their accesses are
    skipped. The caller looks the access up and sets h[cur] past it."""
    while h[cur] < upto:
        j = h[cur]
        while offs[h[rcur] + 1] <= j:
            h[rcur] += 1
        r = h[rcur]
        if offs[r + 1] - offs[r] > h[skiplen]:  # oversized request: never served
            h[cur] = offs[r + 1]
            continue
        return j
    return -1
