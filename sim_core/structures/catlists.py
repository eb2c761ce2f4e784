"""Per-category recency lists that keep each request's blocks together (workload_aware).

The lists live in one packed int32 array I (dlist's seg_* links: I[pv + i], I[nx + i]
for blocks i < U and the sentinel U + c of category c), newest at the head. A layout
tuple L = (pv, nx, U, blast, bcat, cs, gl, gr, exh) gives the segment bases of
per-block and per-category fields in I:

  blast[b]  last request that touched b         bcat[b]  b's category
  cs[c]     length of category c's list
  gr[c]     request whose group sits at c's head, gl[c] that group's last block
            (nearest the tail) or -1: a request's blocks enter its category in order
            as one group, each right after the previous one (deepest nearest the tail)
  exh[c]    request for which category c holds nothing but pinned blocks
"""
from __future__ import annotations

from ..jit import njit
from .pins import keeps_cursor
from .dlist import seg_push_front, seg_unlink


@njit
def _group_drop_last(I, L, c, b):
    """b, the last block of category c's head group, leaves its place: the group ends
    at b's predecessor if that one belongs to it, else the group is closed."""
    pv, nx, U, blast, bcat, cs, gl, gr, exh = L
    p = I[pv + b]
    if p < U and I[blast + p] == I[gr + c] and I[bcat + p] == c:
        I[gl + c] = p
    else:
        I[gl + c] = -1
        I[gr + c] = -1


@njit
def cat_unlink(I, L, c, b):
    """Remove b from category c's list."""
    pv, nx, U, blast, bcat, cs, gl, gr, exh = L
    if I[gl + c] == b:
        _group_drop_last(I, L, c, b)
    seg_unlink(I, pv, nx, b)
    I[cs + c] -= 1


@njit
def cat_push(I, L, c, b, r, grouped):
    """Add b, accessed by request r, to category c: after r's group when `grouped` and
    r already has one there, else at the head as the start of r's group."""
    pv, nx, U, blast, bcat, cs, gl, gr, exh = L
    g = I[gl + c]
    if grouped and I[gr + c] == r and g >= 0:
        seg_push_front(I, pv, nx, g, b)  # right after g
    else:
        seg_push_front(I, pv, nx, U + c, b)
        I[gr + c] = r
    I[gl + c] = b
    I[cs + c] += 1


@njit
def cat_tail_unpinned(I, L, c, pin, r):
    """Oldest block of category c that request r has not pinned, or -1; not removed.
    Pinned blocks met at the tail move to the head (r's own accesses put them back in
    order right after its evictions). Nothing enters a list while r evicts, so a
    category found to hold only pinned blocks is marked exhausted for r and skipped by
    r's later evictions (cycling through it again would leave the list as it is)."""
    pv, nx, U, blast, bcat, cs, gl, gr, exh = L
    if keeps_cursor(r) and I[exh + c] == r:
        return -1
    s = U + c
    v = I[pv + s]
    moved = 0
    while v != s and pin[v] == r:
        if moved >= I[cs + c]:
            I[exh + c] = r
            return -1
        if I[gl + c] == v:
            _group_drop_last(I, L, c, v)
        seg_unlink(I, pv, nx, v)
        seg_push_front(I, pv, nx, s, v)
        moved += 1
        v = I[pv + s]
    return -1 if v == s else v
