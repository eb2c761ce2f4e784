"""S3-FIFO's queues on a packed mlist (structures/mlist.py): their sizes and the
evictions from the small and the main queue. Shared by s3fifo and s4fifo, whose states lay their rows out
differently, so the rows are arguments."""
from __future__ import annotations

from ..jit import njit
from .pins import keeps_cursor
from .mlist import leave, move_to_head, push_head, unlink

# libCacheSim's S3-FIFO parameters (S3FIFO.c), the defaults of every S3-FIFO variant
S3FIFO_DEFAULTS = {"small_ratio": 0.10, "ghost_ratio": 0.90, "move_to_main_threshold": 2}


def queue_sizes(capacity: int, small_ratio: float, ghost_ratio: float) -> tuple[int, int, int]:
    """(small, main, ghost) sizes in blocks, truncated like libCacheSim; small >= 1."""
    small = max(1, int(capacity * small_ratio))
    return small, capacity - small, int(capacity * ghost_ratio)


@njit
def evict_reinserting(lk, fam, s, freq, where, meta, n_col, pin, r):
    """Evict from the main FIFO (list `s` of link family `fam`): a block with a count
    (row `freq`, capped at 3) goes back to the head with one less, a block pinned by
    request r goes back as it is; the first other block leaves: its row `where` is set
    to 0 and the size lk[meta, n_col] drops. -1 if nothing is evictable."""
    limit = 4 * lk[meta, n_col] + 4  # every block is reinserted at most 3 times
    for _ in range(limit):
        v = lk[fam, s]
        if v == s:
            return -1
        f = lk[freq, v]
        if f >= 1:
            move_to_head(lk, fam, s, v)
            lk[freq, v] = min(f, 3) - 1
        elif pin[v] == r:
            move_to_head(lk, fam, s, v)
        else:
            leave(lk, fam, v, where, meta, n_col)
            return v
    return -1


@njit
def evict_small(lk, fam, s, m, freq, where, meta, n_s, n_m, in_m, thr, pin, r, cur):
    """Evict from the small FIFO (list `s`): walking from its tail, a block with a count
    of at least `thr` moves to the main FIFO's head (list `m`: its row `where` set to
    `in_m`, its count reset); the first block request r has not pinned leaves, unlinked,
    and the caller records its ghost. -1 if none leaves. r's pinned blocks with a low
    count stay put while r evicts: the walk resumes after them (cursor pair `cur`)."""
    v = lk[fam, cur[1]] if keeps_cursor(r) and cur[0] == r else lk[fam, s]
    while v != s:
        pv = lk[fam, v]
        if lk[freq, v] >= thr:  # reused in S: promote to M
            unlink(lk, fam, v)
            lk[meta, n_s] -= 1
            push_head(lk, fam, m, v)
            lk[meta, n_m] += 1
            lk[where, v] = in_m
            lk[freq, v] = 0
        elif pin[v] != r:  # quick demotion
            unlink(lk, fam, v)
            lk[meta, n_s] -= 1
            return v
        else:
            cur[0] = r
            cur[1] = v
        v = pv
    return -1


@njit
def evict_queues(lk, fam, s, m, freq, where, meta, n_s, n_m, in_m, m_cap, thr, pin, r, cur):
    """S3-FIFO's choice of queue: the main FIFO when it is over `m_cap` or the small one
    is empty, else the small one, each falling back on the other. Returns the victim
    (-1 if none) and whether it left the small FIFO (the caller then records its ghost)."""
    if lk[meta, n_m] > m_cap or lk[meta, n_s] == 0:
        v = evict_reinserting(lk, fam, m, freq, where, meta, n_m, pin, r)
        if v >= 0:
            return v, False
        return evict_small(lk, fam, s, m, freq, where, meta, n_s, n_m, in_m, thr, pin, r, cur), True
    v = evict_small(lk, fam, s, m, freq, where, meta, n_s, n_m, in_m, thr, pin, r, cur)
    if v >= 0:
        return v, True
    # S emptied into M (or only pinned blocks left): evict from M
    return evict_reinserting(lk, fam, m, freq, where, meta, n_m, pin, r), False
