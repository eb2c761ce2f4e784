"""S3-FIFO's queues on a packed mlist (structures/mlist.py): their sizes and the main
queue's eviction. Shared by s3fifo and s4fifo, whose states lay their rows out
differently, so the rows are arguments."""
from __future__ import annotations

from ..jit import njit
from .mlist import move_to_head, unlink


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
            unlink(lk, fam, v)
            lk[meta, n_col] -= 1
            lk[where, v] = 0
            return v
    return -1
