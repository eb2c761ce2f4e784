"""structures/catlists: category lists with request groups and the exhausted-category mark."""
from __future__ import annotations

import numpy as np

from sim_core.structures.catlists import cat_push, cat_tail_unpinned, cat_unlink

U, W = 6, 2


def _lists():
    # I = prev [U+W], nxt [U+W], blast [U], bcat [U], cs [W], gl [W], gr [W], exh [W]
    n = U + W
    pv, nx, blast, bcat = 0, n, 2 * n, 2 * n + U
    cs, gl, gr, exh = 2 * n + 2 * U, 2 * n + 2 * U + W, 2 * n + 2 * U + 2 * W, 2 * n + 2 * U + 3 * W
    I = np.full(exh + W, -1, np.int32)
    I[cs:cs + W] = 0
    for s in range(U, n):
        I[pv + s] = s
        I[nx + s] = s
    return I, (pv, nx, U, blast, bcat, cs, gl, gr, exh)


def _order(I, L, c):
    pv, nx, U_, *_ = L
    out, v = [], I[nx + U_ + c]
    while v != U_ + c:
        out.append(int(v))
        v = I[nx + v]
    return out  # head (newest) to tail


def _push(I, L, c, b, r):
    cat_push(I, L, c, b, r, True)
    I[L[4] + b] = c
    I[L[3] + b] = r


def test_a_request_keeps_its_blocks_in_order_and_groups_close():
    I, L = _lists()
    for b in (0, 1, 2):
        _push(I, L, 0, b, 5)
    _push(I, L, 0, 3, 6)
    assert _order(I, L, 0) == [3, 0, 1, 2]  # request 5's group, its deepest block at the tail
    cat_unlink(I, L, 0, 3)
    assert _order(I, L, 0) == [0, 1, 2] and I[L[5]] == 3


def test_pinned_blocks_move_to_the_head_and_an_all_pinned_category_is_marked():
    I, L = _lists()
    for b in (0, 1, 2, 3):
        _push(I, L, 0, b, 1)
    pin = np.full(U, -1, np.int32)
    pin[[2, 3]] = 9  # request 9 holds the two oldest blocks
    assert cat_tail_unpinned(I, L, 0, pin, 9) == 1
    assert _order(I, L, 0) == [2, 3, 0, 1]
    pin[[0, 1]] = 9
    assert cat_tail_unpinned(I, L, 0, pin, 9) == -1
    assert _order(I, L, 0) == [2, 3, 0, 1]  # cycled once through: unchanged
    assert I[L[8]] == 9
    pin[:] = -1  # marked for request 9 only; nothing is pinned in block mode (r < 0)
    assert cat_tail_unpinned(I, L, 0, pin, 9) == -1
    assert cat_tail_unpinned(I, L, 0, pin, 10) == 1
    assert cat_tail_unpinned(I, L, 0, pin, -2) == 1
    assert cat_tail_unpinned(I, L, 1, pin, 10) == -1  # empty category, not marked
    assert I[L[8] + 1] == -1
