"""Quick-demotion family: ARC, SIEVE, S3-FIFO, LIRS, S4-FIFO.

Hand-computed traces check each policy's distinctive behaviour (states are inspected
through the policies' own layouts); libCacheSim (an independent implementation)
checks block mode hit for hit; invariants and the Belady bound cover request mode.
"""
from __future__ import annotations

import numpy as np
import pytest

from sim_core import Trace, simulate
from sim_core.replay.engine import FAILED, new_engine_state, replay_range
from sim_core.policies import PolicyContext, get_policy
from sim_core.policies import arc, lirs, s3fifo, s4fifo, sieve
from tests.helpers import libcachesim, mooncake_trace, session_trace

A, B, C, D, E, F, G = 1, 2, 3, 4, 5, 6, 7


def single(seq):
    """One block per request (block mode = request mode), and hash -> dense id."""
    t = Trace.from_requests([[x] for x in seq])
    ids = {}
    for x, b in zip(seq, t.blocks):
        ids.setdefault(x, int(b))
    return t, ids


def replay(trace, policy, cap, mode="block", **params):
    """simulate() without the bookkeeping, returning the policy state and the hits."""
    spec = get_policy(policy)
    depth = max(trace.max_request_blocks, 1)
    ctx = PolicyContext(trace=trace, capacity=cap, mode=mode, cost_per_depth=np.ones(depth),
                        params={**spec.defaults, **params})
    st = spec.make_state(ctx)
    es = new_engine_state(trace.n_unique, trace.n_requests, depth, cap)
    replay_range(trace.req_offsets, trace.blocks, np.zeros(0, np.int32), np.int64(cap), mode == "request", False, st, es,
                 0, trace.n_requests)
    assert not es.counters[FAILED]
    return st, int(es.hit_by_depth.sum())


def lcs_hits(trace, policy, cap, tmp_path, **kwargs):
    libcachesim()
    from sim_core.replay.reference import libcachesim_hit_ratio, write_oracle_general

    path = write_oracle_general(trace, tmp_path / f"{policy}-{cap}.oracleGeneral")
    return round(libcachesim_hit_ratio(path, policy, cap, **kwargs) * trace.n_accesses)


# ------------------------------------------------------------------------ ARC
def test_arc_ghost_hits_adapt_p(tmp_path):
    # c = 2.  A: T1=[A].  A: hit, T2=[A].  B: T1=[B].
    # C: |T1|+|B1|+1 = 2 is not > c, REPLACE: |T1| = 1 > p = 0 -> B to B1; T1=[C].
    # B: ghost hit in B1 -> p = min(0 + max(|B2|/|B1| = 0, 1), 2) = 1; REPLACE: |T1| = 1
    #    is not > p and B came from B1 -> T2's LRU A goes to B2; B -> T2.
    # A: ghost hit in B2 -> p = max(1 - max(|B1|/|B2| = 0, 1), 0) = 0; REPLACE: |T1| = 1
    #    > 0 -> C goes to B1; A -> T2.  One hit in all.
    seq = [A, A, B, C, B, A]
    t5, _ = single(seq[:5])
    st, _ = replay(t5, "arc", 2)
    assert st.p[0] == 1.0  # the B1 hit grew p
    t, ids = single(seq)
    st, hits = replay(t, "arc", 2)
    assert st.p[0] == 0.0  # the B2 hit shrank it
    where = st.lk[arc.WHERE]
    assert (where[ids[A]], where[ids[B]], where[ids[C]]) == (arc.IN_T2, arc.IN_T2, arc.IN_B1)
    assert hits == 1 == lcs_hits(t, "arc", 2, tmp_path)


def test_arc_b1_hit_grows_p_by_the_ghost_ratio(tmp_path):
    # c = 3. A A B B C C: T2 = [C, B, A].  D: T1 empty -> REPLACE takes T2's LRU A to B2.
    # D: hit, T2 = [D, C, B].  E E: B to B2, T2 = [E, D, C], B2 = [B, A].
    # F: REPLACE (T1 empty) takes C to B2 = [C, B, A]; T1 = [F].
    # G: |T1|+|B1|+1 = 2 <= 3, |T1|+|T2|+|B1|+|B2| = 6 = 2c -> drop B2's LRU A;
    #    REPLACE: |T1| = 1 > p = 0 -> F to B1.
    # F: ghost hit in B1 with |B2| = 2, |B1| = 1 -> p = 0 + 2 / 1 = 2.
    seq = [A, A, B, B, C, C, D, D, E, E, F, G, F]
    t, ids = single(seq)
    st, hits = replay(t, "arc", 3)
    assert st.p[0] == 2.0
    assert hits == 5 == lcs_hits(t, "arc", 3, tmp_path)


# ---------------------------------------------------------------------- SIEVE
def test_sieve_hand_retains_visited_blocks_and_resets_their_bit(tmp_path):
    # c = 3, queue shown newest first.  A B C -> [C B A].  A: hit, visited.
    # D: the hand starts at the tail A: visited -> kept in place, bit reset; B is
    #    unvisited -> evicted; hand -> C.  [D C A].   E: C evicted; hand -> D.  [E D A]
    # D: hit.  F: D visited -> bit reset; E evicted; the hand runs past the head.  [F D A]
    # G: the hand restarts at the tail: A's bit was reset at D and never set again ->
    #    A is evicted.  A: miss.  Hits: A, D.
    seq = [A, B, C, A, D, E, D, F, G, A]
    t, ids = single(seq)
    st, hits = replay(t, "sieve", 3)
    assert hits == 2 == lcs_hits(t, "sieve", 3, tmp_path)
    t9, ids = single(seq[:9])
    st, _ = replay(t9, "sieve", 3)
    # A left; D survived the hand with its bit reset
    assert st.lk[sieve.L, ids[A]] == -1 and st.lk[sieve.VISITED, ids[D]] == 0
    # the same trace with A hit again before the hand comes back: A is kept again
    # F: D's bit reset, E evicted, wrap.  G: A's bit reset, D evicted.  A: hit.
    seq2 = [A, B, C, A, D, E, D, A, F, G, A]
    t2, _ = single(seq2)
    assert replay(t2, "sieve", 3)[1] == 4 == lcs_hits(t2, "sieve", 3, tmp_path)


# --------------------------------------------------------------------- S3-FIFO
def test_s3fifo_demotes_one_hit_blocks_and_promotes_ghost_hits(tmp_path):
    # c = 10, small_ratio 0.2: |S| = 2, |M| = 8, ghost 9 entries.
    # 1, 2 fill S; S is full before any eviction, so 3..10 go to M (libCacheSim's warm-up).
    # 11: S's oldest, 1, was never hit -> demoted: evicted, its id enters G.  12: 2 too.
    t, ids = single(list(range(1, 13)))
    st, _ = replay(t, "s3fifo", 10, small_ratio=0.2)
    where = st.lk[s3fifo.WHERE]
    assert where[ids[1]] == where[ids[2]] == s3fifo.IN_G
    assert where[ids[11]] == where[ids[12]] == s3fifo.IN_S
    # 1 again: ghost hit -> straight into M (11 is demoted to make room).
    # 13: M is over its share -> M's oldest (3, freq 0) is evicted.  1: hit in M.  3: miss.
    seq = list(range(1, 13)) + [1, 13, 1, 3]
    t, ids = single(seq)
    st, hits = replay(t, "s3fifo", 10, small_ratio=0.2)
    where = st.lk[s3fifo.WHERE]
    assert where[ids[1]] == s3fifo.IN_M and where[ids[11]] == s3fifo.IN_G
    assert hits == 1 == lcs_hits(t, "s3fifo", 10, tmp_path, small_size_ratio=0.2)


def test_s3fifo_moves_blocks_reused_in_small_to_main(tmp_path):
    # as above; 11 is hit twice while in S (freq 2 = move_to_main_threshold).
    # 12: S's oldest, 2, is demoted.  13: S's oldest, 11, moves to M; 12 is demoted.
    seq = list(range(1, 12)) + [11, 11, 12, 13]
    t, ids = single(seq)
    st, hits = replay(t, "s3fifo", 10, small_ratio=0.2)
    assert st.lk[s3fifo.WHERE, ids[11]] == s3fifo.IN_M and st.lk[s3fifo.WHERE, ids[12]] == s3fifo.IN_G
    assert hits == 2 == lcs_hits(t, "s3fifo", 10, tmp_path, small_size_ratio=0.2)
    # threshold 3: two hits are not enough, 11 is demoted too
    st, _ = replay(t, "s3fifo", 10, small_ratio=0.2, move_to_main_threshold=3)
    assert st.lk[s3fifo.WHERE, ids[11]] == s3fifo.IN_G


def test_s3fifo_tiny_cache_deviation_from_libcachesim(tmp_path):
    # libCacheSim sizes S as floor(0.1 * c) blocks and only admits objects smaller than
    # S: for 10 <= c < 20, S has one slot and no block is ever cached (below 10 it
    # aborts: "Invalid cache size configuration"). Our engine must admit every missed
    # block: S keeps its one slot, 1 is hit three times, then 2 and 3 go to M (S is
    # full before the first eviction) and 1 is hit again.
    t, _ = single([1, 1, 1, 1, 2, 3, 1])
    assert lcs_hits(t, "s3fifo", 10, tmp_path) == 0
    assert replay(t, "s3fifo", 10)[1] == 4


# ------------------------------------------------------------------------ LIRS
def test_lirs_hir_block_switches_to_lir(tmp_path):
    # c = 3, hir_ratio 0.34: L_hirs = 1, L_lirs = 2.  S shown top first.
    # A, B: LIR (warm-up).  C: HIR, S = [C B A], Q = [C].
    # D: miss: Q's front C is evicted but stays in S as a non-resident HIR entry;
    #    D is HIR: S = [D C B A], Q = [D].
    # C: miss: Q's front D is evicted (non-resident in S). C was in S: its reuse came
    #    sooner than the recency of the oldest LIR block A, so C becomes LIR and A is
    #    demoted to HIR at the end of Q: S = [C D B], Q = [A].
    seq = [A, B, C, D, C]
    t, ids = single(seq)
    st, hits = replay(t, "lirs", 3, hir_ratio=0.34)
    status = st.lk[lirs.STATUS]
    assert hits == 0
    assert (status[ids[C]], status[ids[B]], status[ids[A]], status[ids[D]]) == (
        lirs.LIR, lirs.LIR, lirs.HIR_R, lirs.HIR_N)
    # A: resident HIR not in S: hit, stays HIR (2b), S = [A C D B].
    # B: LIR hit: to the top, pruning drops D then stops at C: S = [B A C].
    # E: miss: A (Q's front) evicted, non-resident in S; E HIR: S = [E B A C], Q = [E].
    # E: resident HIR in S: becomes LIR (2a); the bottom LIR C goes to Q; pruning drops A.
    seq += [A, B, E, E]
    t, ids = single(seq)
    st, hits = replay(t, "lirs", 3, hir_ratio=0.34)
    status = st.lk[lirs.STATUS]
    assert hits == 3  # A, B, E (LRU: 2)
    assert (status[ids[E]], status[ids[B]], status[ids[C]], status[ids[A]], status[ids[D]]) == (
        lirs.LIR, lirs.LIR, lirs.HIR_R, lirs.NONE, lirs.NONE)
    assert st.lk[lirs.META, lirs.S_LEN] == 2 and replay(t, "lru", 3)[1] == 2


def test_lirs_libcachesim_demotes_lir_on_hir_hits_outside_s(tmp_path):
    # c = 200 (libCacheSim's 1%: L_hirs = 2, L_lirs = 198).  1..198 become LIR, 199 and
    # 200 HIR (Q = [199 200] front first).  Re-accessing 2..198 then 1 moves every LIR
    # block above 199 and 200, so pruning drops both from S (still resident in Q).
    # 199: resident HIR outside S -> the paper: hit, 199 stays HIR.  libCacheSim also
    # demotes the bottom LIR block into the full Q, which evicts Q's front 200 - on a hit.
    # 200: hit in the paper, a miss in libCacheSim.
    seq = list(range(1, 201)) + list(range(2, 199)) + [1, 199, 200]
    t, _ = single(seq)
    theirs = lcs_hits(t, "lirs", 200, tmp_path)
    assert theirs == 197 + 1 + 1
    assert replay(t, "lirs", 200)[1] == 197 + 1 + 2
    st, hits = replay(t, "lirs", 200, libcachesim_compat=True)
    # compat: 200 is a zombie (evicted for LIRS, resident for the engine); its access is
    # libCacheSim's miss, counted by the engine as a hit and recorded in REHITS
    assert st.lk[lirs.META, lirs.REHITS] == 1 and hits - 1 == theirs


def zipf_trace(n_blocks, alpha, n, seed):
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, n_blocks + 1) ** alpha
    return single(rng.choice(n_blocks, size=n, p=p / p.sum()).tolist())[0]


@pytest.mark.parametrize("n_blocks,alpha,seed", [(400, 0.8, 0), (300, 0.6, 1)])
def test_lirs_compat_equals_libcachesim_where_case_2b_occurs(n_blocks, alpha, seed, tmp_path):
    # The session and Mooncake traces never hit a resident HIR block outside S while the
    # LIR set is full, so there the paper and libCacheSim agree. Zipf reuse does.
    t = zipf_trace(n_blocks, alpha, 20000, seed)
    differ = False
    for cap in (200, 256):
        theirs = lcs_hits(t, "lirs", cap, tmp_path)
        st, hits = replay(t, "lirs", cap, libcachesim_compat=True)
        assert hits - st.lk[lirs.META, lirs.REHITS] == theirs
        differ |= replay(t, "lirs", cap)[1] != theirs
    assert differ


def test_lirs_compat_small_caches_within_tolerance(tmp_path):
    # L_hirs = 1 (capacity < 200): libCacheSim evicts the block being hit and keeps it as
    # an uncounted resident entry, i.e. briefly caches c + 1 blocks; we do not, so it
    # gains a few hits. Tolerance: 0.5 points of hit ratio (observed <= 0.15).
    t = zipf_trace(200, 0.8, 20000, 2)
    for cap in (50, 100, 150):
        theirs = lcs_hits(t, "lirs", cap, tmp_path)
        for compat in (False, True):
            assert abs(replay(t, "lirs", cap, libcachesim_compat=compat)[1] - theirs) <= 0.005 * t.n_accesses


# ---------------------------------------------------------------------- S4-FIFO
def test_s4fifo_skip_window(tmp_path):
    # c = 10, small_ratio 0.5: |S| = 5, |M| = 5; skip_ratio 0.4 -> hits on a block among
    # the 2 newest insertions into S do not count.
    # 1: S.  1: hit, 0 insertions after it -> not counted.  2, 3: S.  1: hit, counted
    # (freq 1).  4, 5 fill S; 6..10 go to M.  11: S's oldest, 1, has freq 1 < 2 ->
    # demoted to the ghost.  1: ghost hit -> M, but a miss.  Hits: 2.
    seq = [1, 1, 2, 3, 1, 4, 5, 6, 7, 8, 9, 10, 11, 1]
    t, ids = single(seq)
    st, hits = replay(t, "s4fifo", 10, small_ratio=0.5, skip_ratio=0.4)
    assert hits == 2 and st.lk[s4fifo.WHERE, ids[1]] == s4fifo.IN_M
    # without the window both hits count (freq 2): 11 moves 1 to M, 1 is a hit: 3 hits,
    # exactly S3-FIFO
    assert replay(t, "s4fifo", 10, small_ratio=0.5)[1] == 3 == replay(t, "s3fifo", 10, small_ratio=0.5)[1]
    assert lcs_hits(t, "s3fifo", 10, tmp_path, small_size_ratio=0.5) == 3


def test_s4fifo_ghost_threshold_counts_ghost_hits():
    # c = 10, small_ratio 0.5.  1..5 in S, 6..10 in M.  11: 1 (never hit) -> ghost.
    # 1: first ghost hit.  tau_G = 0: straight to M.  tau_G = 1 (carry): 1 ghost hit is
    #    not > 1 -> back to S carrying the count 1 (2 is demoted).
    # 12..15 demote 3, 4, 5, 11; 16 demotes 1 again, its ghost entry keeps the count 1.
    # 1: second ghost hit, count 2 > 1 -> M.
    first = list(range(1, 12)) + [1]
    second = first + [12, 13, 14, 15, 16, 1]
    t1, ids = single(first)
    t2, _ = single(second)
    where = s4fifo.WHERE
    assert replay(t1, "s4fifo", 10, small_ratio=0.5)[0].lk[where, ids[1]] == s4fifo.IN_M
    st, _ = replay(t1, "s4fifo", 10, small_ratio=0.5, ghost_to_main_threshold=1)
    assert st.lk[where, ids[1]] == s4fifo.IN_S and st.lk[s4fifo.GHOST, ids[1]] == 1
    st, _ = replay(t2, "s4fifo", 10, small_ratio=0.5, ghost_to_main_threshold=1)
    assert st.lk[where, ids[1]] == s4fifo.IN_M
    # artifact mode: the ghost entry is re-set to the hits taken in S (0) at each
    # demotion, so a block never hit in S is sent back to S on every ghost hit ...
    st, _ = replay(t2, "s4fifo", 10, small_ratio=0.5, ghost_to_main_threshold=1, ghost_mode="artifact")
    assert st.lk[where, ids[1]] == s4fifo.IN_S
    # ... while one hit in S (freq 1 < tau_S = 2) before its demotion is enough
    t3, _ = single(first + [1, 12, 13, 14, 15, 16, 1])
    st, hits = replay(t3, "s4fifo", 10, small_ratio=0.5, ghost_to_main_threshold=1, ghost_mode="artifact")
    assert st.lk[where, ids[1]] == s4fifo.IN_M and hits == 1


def test_s4fifo_presets_and_validation():
    t = session_trace(n_sessions=60, seed=2)
    explicit = dict(small_ratio=0.10, move_to_main_threshold=2, ghost_to_main_threshold=1,
                    ghost_ratio=3.0, skip_ratio=0.25)
    for mode in ("block", "request"):
        a = [r.hits for r in simulate(t, "s4fifo", [20, 80, 300], mode=mode, params={'preset': 5})]
        b = [r.hits for r in simulate(t, "s4fifo", [20, 80, 300], mode=mode, params=explicit)]
        assert a == b
    with pytest.raises(ValueError, match="preset"):
        simulate(t, "s4fifo", 50, params={'preset': 18})
    with pytest.raises(ValueError, match="ghost_mode"):
        simulate(t, "s4fifo", 50, params={'ghost_mode': "linger"})
    with pytest.raises(ValueError, match="small_ratio"):
        simulate(t, "s3fifo", 50, params={'small_ratio': 1.0})


@pytest.mark.parametrize("mode", ["block", "request"])
def test_s4fifo_defaults_are_s3fifo(mode):
    t = session_trace(n_sessions=120, seed=4)
    caps = [5, 30, 100, 400]
    want = [r.hits for r in simulate(t, "s3fifo", caps, mode=mode)]
    for ghost_mode in ("carry", "artifact"):
        got = [r.hits for r in simulate(t, "s4fifo", caps, mode=mode, params={'ghost_mode': ghost_mode})]
        assert got == want


# ------------------------------------------------------------------ invariants
VARIANTS = [("arc", {}), ("sieve", {}), ("s3fifo", {}), ("s3fifo", {"move_to_main_threshold": 1}),
            ("lirs", {}), ("lirs", {"libcachesim_compat": True}), ("s4fifo", {"preset": 9}),
            ("s4fifo", {"ghost_mode": "artifact", "ghost_to_main_threshold": 1, "skip_ratio": 0.25})]


@pytest.mark.parametrize("policy,params", VARIANTS)
def test_invariants_and_belady_bound(policy, params):
    for seed in (0, 7):
        t = session_trace(n_sessions=40, seed=seed)
        caps = [1, 3, 8, 25, 90, 400]
        for mode in ("block", "request"):
            opt = [r.hits for r in simulate(t, "belady", caps, mode=mode)]
            blk = simulate(t, policy, caps, mode=mode, params=params)
            pre = simulate(t, policy, caps, mode=mode, hits="prefix", params=params)
            for cap, o, b, p in zip(caps, opt, blk, pre):
                assert b.max_resident_blocks <= cap
                assert p.hits <= b.hits <= o, (policy, params, mode, cap)
        big = simulate(t, policy, t.n_unique, params=params)[0]
        assert big.hits == t.n_accesses - t.n_unique and big.evictions == 0


def test_request_mode_with_requests_as_large_as_the_cache():
    # every request of r that is pinned while the cache is (nearly) all r: the policies
    # must find the few unpinned victims (LIRS falls back to LIR blocks, S3/S4-FIFO
    # pass over pinned blocks in S and rotate them in M)
    t = session_trace(n_sessions=60, seed=9)
    cap = t.max_request_blocks + 1
    for policy, params in VARIANTS:
        r = simulate(t, policy, cap, mode="request", params=params)[0]
        assert r.max_resident_blocks <= cap


# ------------------------------------------------------------------ libCacheSim
LCS = [("arc", {}, {}), ("sieve", {}, {}), ("s3fifo", {}, {}), ("lirs", {}, {}),
       ("lirs", {"libcachesim_compat": True}, {}), ("s4fifo", {}, {}),
       ("s3fifo", {"small_ratio": 0.25, "ghost_ratio": 0.5, "move_to_main_threshold": 1},
        {"small_size_ratio": 0.25, "ghost_size_ratio": 0.5, "move_to_main_threshold": 1})]


def _lcs_name(policy):
    return "s3fifo" if policy == "s4fifo" else policy


def _check_equal(t, caps, policy, params, lcs_kwargs, tmp_path):
    lcs = libcachesim()
    from sim_core.replay.reference import LCS_NAMES, write_oracle_general

    path = write_oracle_general(t, tmp_path / "t.oracleGeneral")
    ours = [r.hits for r in simulate(t, policy, caps, mode="block", params=params)]
    theirs = []
    for cap in caps:
        reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
        cache = getattr(lcs, LCS_NAMES[_lcs_name(policy)])(cache_size=cap, **lcs_kwargs)
        theirs.append(round((1.0 - cache.process_trace(reader)[0]) * t.n_accesses))
    assert ours == theirs, (policy, params, caps)


@pytest.mark.parametrize("policy,params,lcs_kwargs", LCS)
def test_block_mode_equals_libcachesim_on_sessions(policy, params, lcs_kwargs, tmp_path):
    _check_equal(session_trace(n_sessions=400, seed=11), [50, 200, 800, 3000], policy, params, lcs_kwargs,
                 tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("policy,params,lcs_kwargs", LCS)
def test_block_mode_equals_libcachesim_on_mooncake(policy, params, lcs_kwargs, tmp_path):
    _check_equal(mooncake_trace(), [100, 1000, 5000, 20000], policy, params, lcs_kwargs, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("policy,params,lcs_kwargs", LCS)
def test_block_mode_equals_libcachesim_more_traces(policy, params, lcs_kwargs, tmp_path):
    for seed in (1, 2, 3):
        t = session_trace(n_sessions=300, seed=seed, single_share=0.7)
        _check_equal(t, [20, 64, 256, 1024, 4096], policy, params, lcs_kwargs, tmp_path)
