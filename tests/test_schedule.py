"""sim_core.traces.schedule: the paper's appendix-B replay, checked by hand on a 3-session trace."""
import numpy as np
import pytest

from sim_core import Trace, simulate
from sim_core.traces.schedule import steady_concurrency


def three_sessions() -> Trace:
    # A: t = 0, 10, 20 (20 s); B: t = 5, 11 (6 s); C: t = 7, 30 (23 s); a single-turn request at 8
    return Trace.from_requests([[1, 2], [3], [4, 5], [9], [1, 2, 6], [3, 7], [1, 2, 6, 8], [4, 5, 10]],
                               arrival_s=[0, 5, 7, 8, 10, 11, 20, 30], session=[0, 1, 2, -1, 0, 1, 0, 2])


def replay(t: Trace) -> list[tuple[float, int, list[int]]]:
    return [(float(t.arrival_s[r]), int(t.session[r]), t.request_blocks(r).tolist()) for r in range(t.n_requests)]


def test_sessions_start_as_slots_free_and_keep_their_own_gaps():
    tr = three_sessions()
    # one slot: A, then B when A ends (20), then C when B ends (26); ids re-densified
    assert replay(steady_concurrency(tr, 1, truncate_at=None)) == [
        (0, 0, [0, 1]), (10, 0, [0, 1, 2]), (20, 0, [0, 1, 2, 3]), (20, 1, [4]), (26, 1, [4, 5]), (26, 2, [6, 7]),
        (49, 2, [6, 7, 8])]
    # two slots: A and B at 0, C when B ends (6)
    assert [(a, s) for a, s, _ in replay(steady_concurrency(tr, 2, truncate_at=None))] == [
        (0, 0), (0, 1), (6, 1), (6, 2), (10, 0), (20, 0), (29, 2)]


def test_truncation_keeps_the_same_requests_at_every_concurrency():
    tr = three_sessions()
    # at concurrency 2 the last session (C) starts at 6: A keeps t=0, B both, C its first;
    # a truncated session frees its slot at its last kept request
    assert [(a, s) for a, s, _ in replay(steady_concurrency(tr, 1, truncate_at=2))] == [(0, 0), (0, 1), (6, 1), (6, 2)]
    sizes = {tuple(sorted(np.diff(steady_concurrency(tr, c, truncate_at=2).req_offsets).tolist())) for c in (1, 2, 3)}
    assert sizes == {(1, 2, 2, 2)}  # A [1, 2]; B [3], [3, 7]; C [4, 5]


def test_more_sessions_in_flight_means_fewer_hits():
    # 40 sessions of 6 turns each re-reading a growing private history: with a cache of 60
    # blocks, a few sessions in flight fit, many do not (paper appendix B's trend)
    reqs, arr, sess = [], [], []
    for s in range(40):
        for k in range(6):
            reqs.append([s * 100 + j for j in range(4 * (k + 1))])
            arr.append(s * 1000.0 + 10 * k)
            sess.append(s)
    tr = Trace.from_requests(reqs, arrival_s=arr, session=sess)
    hr = [simulate(steady_concurrency(tr, c, truncate_at=None), "lru", [60])[0].hit_ratio for c in (1, 4, 16)]
    assert hr[0] == pytest.approx(sum(4 * k for k in range(6)) / sum(4 * (k + 1) for k in range(6)))
    assert hr[0] > hr[1] > hr[2]


def test_bad_input():
    tr = three_sessions()
    with pytest.raises(ValueError, match="at least 1"):
        steady_concurrency(tr, 0)
    with pytest.raises(ValueError, match="no multi-turn sessions"):
        steady_concurrency(Trace.from_requests([[1], [2]], session=[-1, 0]), 4)
