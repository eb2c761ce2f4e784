"""W-TinyLFU (frequency), LHD (analytic) and LeCaR (simple learned): hand-computed traces,
white-box checks of their models, invariants in both modes, and libCacheSim cross-checks."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim_core import Trace, simulate
from sim_core.replay.engine import new_engine_state, replay_range
from sim_core.policies import PolicyContext, get_policy
from sim_core.policies import lecar, lhd, wtinylfu
from sim_core.replay.units import depth_totals
from tests.helpers import chained_sessions, engine_kw, mooncake_trace, session_trace

POLICIES = ["wtinylfu", "lecar", "lhd"]
A, B, C, D = 1, 2, 3, 4


def singles(seq):
    """One single-block request per access (block and request mode then coincide)."""
    return Trace.from_requests([[x] for x in seq])


def hits(trace, policy, cap, **kw):
    return simulate(trace, policy, cap, mode="block", **engine_kw(kw))[0].hits


def replay_state(trace, policy, cap, mode="block", seed=0, **params):
    """Replay and return the policy state (for white-box assertions)."""
    spec = get_policy(policy)
    ctx = PolicyContext(trace=trace, capacity=cap, mode=mode, cost_per_depth=None,
                        params={**spec.defaults, **params}, seed=seed)
    st = spec.make_state(ctx)
    es = new_engine_state(trace.n_unique, trace.n_requests, len(depth_totals(trace)), cap)
    replay_range(trace.req_offsets, trace.blocks, np.zeros(0, np.int32), np.int64(cap), mode == "request", False, st, es,
                 0, trace.n_requests)
    return st, int(es.hit_by_depth.sum())


def new_state(policy, trace, cap, **params):
    spec = get_policy(policy)
    return spec.make_state(PolicyContext(trace=trace, capacity=cap, mode="block", cost_per_depth=None,
                                         params={**spec.defaults, **params}))


# ===================================================================== W-TinyLFU
# capacity 3 with window 1/3 and protected 1/2: window 1 block, probation and protected
# 1 block each; a wide sketch so that the few blocks never collide.
SMALL = dict(window=1 / 3, protected=0.5, sketch_width=4096)


def test_wtinylfu_rejects_cold_window_victim_against_hot_main_victim():
    # A A A: A counted 3 times in the window. B pushes A to probation, C pushes B there.
    # D: the window victim C (count 1) duels the probation victim A (count 3) and loses,
    # so A survives (LRU would have evicted A) and C is gone (LRU keeps C).
    keep_a = singles([A, A, A, B, C, D, A])
    assert hits(keep_a, "wtinylfu", 3, **SMALL) == 3
    assert hits(keep_a, "lru", 3) == 2
    lose_c = singles([A, A, A, B, C, D, C])
    assert hits(lose_c, "wtinylfu", 3, **SMALL) == 2
    assert hits(lose_c, "lru", 3) == 3


def test_wtinylfu_admits_hot_window_victim_over_cold_main_victim():
    # B, C go to probation; A is hit twice in the window (count 3). D: candidate A beats
    # the probation LRU block B (count 1): B is evicted, A enters probation. B: candidate
    # D (1) loses to C (1, ties keep the resident): D goes. C then hits (LRU lost C).
    t = singles([B, C, A, A, A, D, B, C])
    assert hits(t, "wtinylfu", 3, **SMALL) == 3
    assert hits(t, "lru", 3) == 2


def test_wtinylfu_sketch_saturates_ages_and_doorkeeper():
    t = singles(range(8))
    st = new_state("wtinylfu", t, 10, sample_factor=100.0)
    for _ in range(20):
        wtinylfu._record(st, 0)
    assert wtinylfu._estimate(st, 0) == 15  # 4-bit counters
    assert wtinylfu._estimate(st, 1) == 0
    # reset: after sample_factor * capacity = 10 additions every counter is halved
    st = new_state("wtinylfu", t, 10, sample_factor=1.0)
    for _ in range(9):
        wtinylfu._record(st, 0)
    assert wtinylfu._estimate(st, 0) == 9
    wtinylfu._record(st, 0)
    assert wtinylfu._estimate(st, 0) == 5 and st.cnt[wtinylfu.ADDS] == 5
    # doorkeeper: a first access only sets the doorkeeper bits (estimate 1, sketch 0)
    st = new_state("wtinylfu", t, 10, doorkeeper=True, sample_factor=1.0)
    wtinylfu._record(st, 3)
    assert wtinylfu._estimate(st, 3) == 1 and st.sketch.sum() == 0
    wtinylfu._record(st, 3)
    assert wtinylfu._estimate(st, 3) == 2
    for _ in range(8):  # the 10th addition resets: counts halve, the doorkeeper clears
        wtinylfu._record(st, 3)
    assert wtinylfu._estimate(st, 3) == 4 and not st.door.any()


# ---- the default mode, access by access: the published W-TinyLFU (Einziger et al.,
# ToS 2017) and Caffeine's static configuration: an LRU window, a segmented-LRU main
# cache (probation / protected), and a count-min sketch that counts every access
# (hits included), saturates at 15, halves after a sample of accesses (optionally behind
# a doorkeeper) and admits a window victim only if it is strictly more frequent than the
# main cache's victim. (Caffeine also sizes its window by hill climbing and admits a warm
# candidate (frequency >= 6) that lost the duel with probability 1/128 against hash
# flooding; both are left out here, as in the paper.) A wide sketch (4096 counters a
# row) keeps these few blocks apart. E, F = 5, 6.
E, F = 5, 6
NAMES = {A: "A", B: "B", C: "C", D: "D", E: "E", F: "F"}
NO_AGING = dict(sample_factor=100.0, sketch_width=4096)


def hit_sequence(seq, cap, policy="wtinylfu", **params):
    """(hit or miss of each access of seq, final state, trace): one block a request."""
    t = singles(seq)
    spec = get_policy(policy)
    st = spec.make_state(PolicyContext(trace=t, capacity=cap, mode="block", cost_per_depth=None,
                                       params={**spec.defaults, **params}))
    es = new_engine_state(t.n_unique, t.n_requests, len(depth_totals(t)), cap)
    seen = []
    for r in range(t.n_requests):
        before = int(es.hit_by_depth.sum())
        replay_range(t.req_offsets, t.blocks, np.zeros(0, np.int32), np.int64(cap), False, False, st, es, r, r + 1)
        seen.append(int(es.hit_by_depth.sum()) - before)
    return seen, st, t


def tinylfu_lists(st, t):
    """Window, probation and protected as strings of block names, MRU first."""
    U = st.where.shape[0]
    out = []
    for k in (wtinylfu.WIN, wtinylfu.PROB, wtinylfu.PROT):
        names, b = "", st.nxt[U + k]
        while b != U + k:
            names += NAMES[int(t.source_ids[b])]
            b = st.nxt[b]
        out.append(names)
    return tuple(out)


def tinylfu_estimates(st, t):
    return {NAMES[int(t.source_ids[b])]: int(wtinylfu._estimate(st, b)) for b in range(t.n_unique)}


def test_wtinylfu_segmented_main_promotes_on_probation_hit_and_demotes_protected_overflow():
    # capacity 5, window 0.2: W = 1, main M = 4 of which protected int(0.5 * 4) = 2.
    # A..E: while the main cache has room a block leaving the window goes straight to
    #   probation, no duel, even past probation's 2-slot share (protected is empty):
    #   window [E], probation [D C B A] (MRU first).
    # A, B hit in probation: promoted to protected's MRU end -> protected [B A].
    # C hits: protected [C B A] overflows, its LRU block A is demoted to probation's
    #   MRU end -> probation [A D], protected [C B].
    seen, st, t = hit_sequence([A, B, C, D, E, A, B, C], 5, window=0.2, protected=0.5, **NO_AGING)
    assert seen == [0, 0, 0, 0, 0, 1, 1, 1]
    assert tinylfu_lists(st, t) == ("E", "AD", "CB")
    # F: candidate E (count 1) duels probation's LRU block D (count 1); a tie keeps the
    #   resident, so E is evicted -> window [F].
    # D hits in probation: promoted, protected [D C B] overflows and B is demoted.
    # E misses (rejected above); its eviction duels candidate F (1) with probation's LRU
    #   block, now A (count 2): F is evicted.
    seen, st, t = hit_sequence([A, B, C, D, E, A, B, C, F, D, E], 5, window=0.2, protected=0.5, **NO_AGING)
    assert seen == [0, 0, 0, 0, 0, 1, 1, 1, 0, 1, 0]
    assert tinylfu_lists(st, t) == ("E", "BA", "DC")
    assert tinylfu_estimates(st, t) == dict(A=2, B=2, C=2, D=2, E=2, F=1)


def test_wtinylfu_window_is_lru_and_every_access_counts():
    # capacity 4, window 0.5: W = 2, main 2 (probation 1 + protected 1 at steady state).
    # A B C D: A and B pass to probation -> window [D C], probation [B A].
    # C hits in the window: moved to the window's MRU end (and counted: C = 2).
    # E: the candidate is the window's LRU block, now D (1), against A (1): tie, D goes.
    #   (Had the window been FIFO the candidate would be C (2) and A would have gone.)
    # A hits in probation -> protected [A], probation [B].
    # D misses: candidate C (2, its window hit counted) beats B (1): B is evicted, C
    #   enters probation.
    seen, st, t = hit_sequence([A, B, C, D, C, E, A, D], 4, window=0.5, protected=0.5, **NO_AGING)
    assert seen == [0, 0, 0, 0, 1, 0, 1, 0]
    assert tinylfu_lists(st, t) == ("DE", "C", "A")


AGING_TRACE = [A, A, A, B, C, D, C, D, C, D, C, A]


def test_wtinylfu_aging_halves_counts_and_lets_a_new_block_displace_an_old_hot_one():
    # capacity 3 (SMALL: window 1, probation 1, protected 1); sample_factor 3: the sketch
    # halves after round(3 * 3) = 9 recorded accesses (and the count of additions: 9 -> 4).
    # 1-3 A A A: A = 3.  4 B, 5 C: A then B pass to probation -> probation [B A].
    # 6 D, 7 C, 8 D, 9 C: each miss duels the window's block (1, 1, 2, 2) against A (3)
    #   and loses. After access 9 (C = 3, D = 2, B = 1, A = 3) the sketch halves:
    #   A = 1, B = 0, C = 1, D = 1.
    # 10 D: candidate C (1) vs A (1): tie, C goes; D = 2.
    # 11 C: candidate D (2) beats A (1): A is evicted, D enters probation [D B]; C = 2.
    # 12 A misses: candidate C (2) beats B (0): probation [C D], A in the window (A = 2).
    seen, st, t = hit_sequence(AGING_TRACE, 3, sample_factor=3.0, **SMALL)
    assert seen == [0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    assert tinylfu_lists(st, t) == ("A", "CD", "")
    assert tinylfu_estimates(st, t) == dict(A=2, B=0, C=2, D=2) and st.cnt[wtinylfu.ADDS] == 7
    # the sketch state right after the reset (access 9)
    _, st9, t9 = hit_sequence(AGING_TRACE[:9], 3, sample_factor=3.0, **SMALL)
    assert tinylfu_estimates(st9, t9) == dict(A=1, B=0, C=1, D=1) and st9.cnt[wtinylfu.ADDS] == 4
    # never aged, A (3) keeps winning every duel and hits at the end; C ended up counted
    # 4 times against A's 4 (at 12 nothing is evicted: A is a hit)
    seen, st, t = hit_sequence(AGING_TRACE, 3, sample_factor=100.0, **SMALL)
    assert seen == [0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1]
    assert tinylfu_estimates(st, t) == dict(A=4, B=1, C=4, D=3)


def test_wtinylfu_doorkeeper_absorbs_first_accesses_and_is_cleared_by_the_reset():
    # Same trace and reset as above with a doorkeeper: a block's first access only sets
    # its doorkeeper bits; the estimate is the sketch's count + 1 for a doorkeeper member.
    # Up to access 9 the estimates are those above, but the sketch held one count less:
    # A 2, C 2, D 1 -> halved A 1, C 1, D 0, and the reset clears the doorkeeper:
    # estimates A 1, B 0, C 1, D 0.
    # 10 D: candidate C (1) vs A (1): tie, C goes. D is new to the cleared doorkeeper:
    #   its access only sets the bits: D = 0 + 1 = 1 (2 without the doorkeeper).
    # 11 C: candidate D (1) vs A (1): tie again, D goes: A survives and 12 A hits.
    _, st9, t9 = hit_sequence(AGING_TRACE[:9], 3, sample_factor=3.0, doorkeeper=True, **SMALL)
    assert tinylfu_estimates(st9, t9) == dict(A=1, B=0, C=1, D=0) and not st9.door.any()
    _, st10, t10 = hit_sequence(AGING_TRACE[:10], 3, sample_factor=3.0, doorkeeper=True, **SMALL)
    assert tinylfu_estimates(st10, t10)["D"] == 1
    seen, st, t = hit_sequence(AGING_TRACE, 3, sample_factor=3.0, doorkeeper=True, **SMALL)
    assert seen == [0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1]
    assert tinylfu_lists(st, t) == ("C", "B", "A")


def test_wtinylfu_count_min_takes_the_row_minimum_and_conservative_update():
    # White-box: block 1 shares its row-0 counter with block 0, nothing else. Recording
    # block 0 three times puts 3 in that counter, yet block 1's estimate is the minimum
    # over its rows: 0. Recording block 1 once: the plain update increments all its
    # counters (shared one 3 -> 4); the conservative (minimal-increment) update only its
    # smallest ones (rows 1-3: 0 -> 1), leaving the shared counter at 3.
    t = singles(range(8))
    for conservative, shared_after in ((False, 4), (True, 3)):
        st = new_state("wtinylfu", t, 10, sample_factor=100.0, sketch_width=64, conservative=conservative)
        st.pos[0] = [0, 64, 128, 192]
        st.pos[1] = [0, 64 + 1, 128 + 1, 192 + 1]
        for _ in range(3):
            wtinylfu._record(st, 0)
        assert wtinylfu._estimate(st, 0) == 3 and wtinylfu._estimate(st, 1) == 0
        wtinylfu._record(st, 1)
        assert wtinylfu._estimate(st, 1) == 1 and st.sketch[0] == shared_after
        assert wtinylfu._estimate(st, 0) == 3


# ---- libCacheSim's WTinyLFU: each deviation from the paper on a hand-computed trace
def lcs_hits(trace, policy, cap, tmp_path, **kw):
    from sim_core.replay.reference import libcachesim_hit_ratio, write_oracle_general

    path = write_oracle_general(trace, tmp_path / f"{policy}_{cap}.oracleGeneral")
    return round(libcachesim_hit_ratio(path, policy, cap, **kw) * trace.n_accesses)


def test_libcachesim_wtinylfu_caches_nothing_below_100_blocks(tmp_path, lcs):
    # its window is floor(0.01 * capacity) = 0 blocks and can_insert refuses everything
    t = singles([A, A, A, B, B])
    assert lcs_hits(t, "wtinylfu", 50, tmp_path) == 0
    assert hits(t, "wtinylfu", 50) == 3
    assert hits(t, "wtinylfu", 50, libcachesim=True) == 3  # not reproducible: we keep W >= 1


def test_libcachesim_wtinylfu_does_not_count_window_hits(tmp_path, lcs):
    # capacity 500: window 5, main 495 (probation 99, protected 396).
    # libCacheSim: X1..X500 all wait in the window until the first miss (Y1) moves
    # X1..X495 to the main cache (+1 each: count 2); X496 (count 1) loses its duel with
    # X1. X497 is then hit 10 times in the window - not counted - and after Y2..Y5 have
    # evicted X498, X499, X500 and Y1 it duels X1 with count 1 and loses: X497 misses.
    # Paper: every access counts, X497 (count 11) beats X1 (count 1) and hits again.
    xs = [10 + i for i in range(500)]
    x497 = xs[496]
    t = singles(xs + [1] + [x497] * 10 + [2, 3, 4, 5, 6] + [x497])
    assert lcs_hits(t, "wtinylfu", 500, tmp_path) == 10
    assert hits(t, "wtinylfu", 500, libcachesim=True) == 10
    assert hits(t, "wtinylfu", 500, sketch_width=1 << 16) == 11


def test_libcachesim_wtinylfu_evicts_during_a_hit(tmp_path, lcs):
    # capacity 100: window 1, main 99 but SLRU segments floor(19.8) + floor(79.2) = 98.
    # Y1's eviction moves X1..X99 into the main cache: 19 to probation, 79 to protected,
    # X99 overfills probation (20). A hit on X2 promotes it, protected overflows and
    # cools its LRU block into probation, which overflows and evicts X1 *inside the hit*.
    # So X1 then misses in libCacheSim. Our engine cannot drop a block on a hit: X1
    # stays resident as a zombie (the next victim) and its hit is counted and tracked.
    xs = [10 + i for i in range(100)]
    t = singles(xs + [1, xs[1], xs[0]])
    assert lcs_hits(t, "wtinylfu", 100, tmp_path) == 1
    st, n = replay_state(t, "wtinylfu", 100, libcachesim=True)
    assert n == 2 and st.cnt[wtinylfu.ZHITS] == 1  # hits - zombie hits == libCacheSim
    assert hits(t, "wtinylfu", 100) == 2  # paper: X1 is simply still in probation


LCS_EXACT_CAPS = {"mooncake": (500, 1000, 5000, 20000), "sessions": (500, 1000, 2000, 3000)}


@pytest.fixture(scope="module")
def traces():
    return {"mooncake": mooncake_trace(), "sessions": session_trace(n_sessions=400, seed=11)}


def _lcs_compare_exact(trace, caps, tmp_path):
    from sim_core.replay.reference import libcachesim_hit_ratio, write_oracle_general

    path = write_oracle_general(trace, tmp_path / "t.oracleGeneral")
    for cap in caps:
        st, ours = replay_state(trace, "wtinylfu", cap, libcachesim=True)
        theirs = round(libcachesim_hit_ratio(path, "wtinylfu", cap) * trace.n_accesses)
        assert ours - st.cnt[wtinylfu.ZHITS] == theirs, (trace.name, cap, ours, theirs)
        if cap % 500 == 0:  # SLRU segments add up to the main size: no zombies at all
            assert st.cnt[wtinylfu.ZHITS] == 0 and ours == theirs


@pytest.mark.parametrize("name", ["mooncake", "sessions"])
def test_wtinylfu_libcachesim_mode_equals_libcachesim_fast(name, traces, tmp_path, lcs):
    _lcs_compare_exact(traces[name], LCS_EXACT_CAPS[name][1:3], tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mooncake", "sessions"])
def test_wtinylfu_libcachesim_mode_equals_libcachesim(name, traces, tmp_path, lcs):
    # the four exact capacities, plus capacities whose SLRU segments lose a slot
    extra = {"mooncake": (100, 800), "sessions": (200, 800)}[name]
    _lcs_compare_exact(traces[name], LCS_EXACT_CAPS[name] + extra, tmp_path)


# A held-out workload: interleaved prefix-chained sessions whose block ids are their
# own (session * 10^6 + position + 1), not the dense ids + 1. libCacheSim's sketch hashes
# the 8-byte object id; our libcachesim mode used to hash dense id + 1 whatever ids
# libCacheSim was given, which only agreed through sim_core.replay.reference. Given the
# workload's own ids, libCacheSim then had 13,584 hits at 2,000 blocks (0.2497) and our
# mode 11,083 (0.2037, what libCacheSim has on dense id + 1): a 4.6-point gap from hash
# collisions alone. On chained_sessions(seed=2) the first duel that differed (access
# 18,517) had the probation victim at estimate 2 under one set of ids and 4 under the
# other (the candidate had 3): the sketch, sized for the main cache's M blocks, counts
# every block ever inserted and is never aged at these hit counts, so collisions
# decide close duels, and at 2,000 blocks one duel changes which sessions stay cached.
HELD_OUT = dict(n_sessions=147, concurrent=13, turns=(2, 10), new_blocks=(1, 33), seed=468851)


def _oracle_of_ids(requests, path):
    """An oracleGeneral file of the requests' own block ids, written independently of
    sim_core.replay.reference."""
    from sim_core.replay.reference import ORACLE_DTYPE

    ids = np.concatenate([np.asarray(r, np.uint64) for r in requests])
    rec = np.zeros(len(ids), dtype=ORACLE_DTYPE)
    rec["t"] = np.repeat(np.arange(len(requests), dtype=np.uint32), [len(r) for r in requests])
    rec["id"], rec["size"], rec["next"] = ids, 1, -1
    rec.tofile(path)
    return path


def test_wtinylfu_libcachesim_mode_equals_libcachesim_on_the_workloads_own_ids(tmp_path, lcs):
    from sim_core.replay.reference import libcachesim_hit_ratio

    requests, t = chained_sessions(**HELD_OUT)
    assert t.n_accesses == 54404
    path = _oracle_of_ids(requests, tmp_path / "own_ids.oracleGeneral")
    for cap, expect in ((150, 2564), (1000, 6815), (2000, 13584), (2048, 18084), (8000, 34176), (32000, 40691)):
        theirs = round(libcachesim_hit_ratio(path, "wtinylfu", cap) * t.n_accesses)
        st, ours = replay_state(t, "wtinylfu", cap, libcachesim=True)
        zombies = int(st.cnt[wtinylfu.ZHITS])
        assert ours - zombies == theirs == expect, (cap, ours, zombies, theirs)
        if cap % 500 == 0:  # SLRU segments add up to the main size: no zombies
            assert zombies == 0
    # the same trace through sim_core.replay.reference (which writes these ids) agrees too; on
    # dense id + 1 libCacheSim itself lands 4.6 points lower at 2,000 blocks
    assert lcs_hits(t, "wtinylfu", 2000, tmp_path) == 13584
    dense = Trace(t.req_offsets, t.blocks, t.arrival_s, t.session, t.input_tokens, t.output_tokens)
    assert dense.source_ids is None
    assert lcs_hits(dense, "wtinylfu", 2000, tmp_path) == 11083
    assert replay_state(dense, "wtinylfu", 2000, libcachesim=True)[1] == 11083


def test_wtinylfu_libcachesim_mode_is_libcachesim_hit_for_hit(tmp_path, lcs):
    # every access of the held-out workload at 2,000 blocks, fed one by one
    requests, _ = chained_sessions(**HELD_OUT)
    ids = [x for r in requests for x in r]
    cache = lcs.WTinyLFU(cache_size=2000)
    req = lcs.Request()
    req.obj_size = 1
    theirs = []
    for i, x in enumerate(ids):
        req.obj_id, req.clock_time = x, i
        theirs.append(int(cache.get(req)))
    ours, _, _ = hit_sequence(ids, 2000, libcachesim=True)
    assert sum(theirs) == 13584
    assert ours == theirs


_M64 = (1 << 64) - 1


def _xxh64_u64(key: int, seed: int) -> int:
    """XXH64 of one 8-byte little-endian integer, from the xxHash specification (inputs
    shorter than 32 bytes: one 8-byte lane, then the avalanche), in plain Python."""
    p1, p2, p3, p4, p5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x85EBCA77C2B2AE63,
                          0x27D4EB2F165667C5)

    def rotl(x, r):
        return ((x << r) | (x >> (64 - r))) & _M64

    acc = (seed + p5 + 8) & _M64
    acc ^= rotl((key * p2) & _M64, 31) * p1 & _M64
    acc = (rotl(acc, 27) * p1 + p4) & _M64
    acc = (acc ^ (acc >> 33)) * p2 & _M64
    acc = (acc ^ (acc >> 29)) * p3 & _M64
    return acc ^ (acc >> 32)


def test_the_reference_hash_is_xxh64():
    # digests from the xxhash package (Python bindings of the reference C library), 4.1.0
    assert _xxh64_u64(1, 0) == 0x9F29CB17A2A49995 and _xxh64_u64(1, 1) == 0x8AFB45D6A8B39709
    assert _xxh64_u64(12345, 0) == 0xF641F64AB4EBB803 and _xxh64_u64(2**63 + 5, 1) == 0x132166FF747E6494


def reference_wtinylfu(accesses, capacity, window=0.01, protected=0.8, depth=4, width=0, counter_max=15,
                       sample_factor=10.0) -> int:
    """Block hits of the published W-TinyLFU as sim_core/policies/wtinylfu.py documents
    its default mode, written from that description alone: an LRU window of
    round(window * C) blocks, an SLRU main cache (protected share of it protected), a
    count-min sketch of `depth` rows of `width` counters (0: the next power of two >= C, at
    least 16),
    row i hashing dense id + 1 to ((a + i b) mod 2^32) mod width with a, b the low 32 bits
    of XXH64 seeds 0 and 1; every access recorded (counters saturate at counter_max, 0 =
    never), all counters and the count of additions halved after sample_factor * C
    additions; a full cache evicts by a duel of the window's LRU block against the
    probation LRU block (protected LRU if probation is empty), the candidate admitted only
    if its estimate is strictly higher. `accesses`: dense block ids in order."""
    from collections import OrderedDict

    win_cap = min(capacity, max(1, round(window * capacity)))
    main_cap = capacity - win_cap
    prot_cap = int(protected * main_cap)
    width = width or 1 << max(4, (capacity - 1).bit_length())
    sample = max(1, round(sample_factor * capacity))
    sketch = [0] * (depth * width)
    rows: dict = {}

    def positions(b):
        got = rows.get(b)
        if got is None:
            a, h = _xxh64_u64(b + 1, 0) & 0xFFFFFFFF, _xxh64_u64(b + 1, 1) & 0xFFFFFFFF
            got = rows[b] = [((a + i * h) & 0xFFFFFFFF) % width + i * width for i in range(depth)]
        return got

    adds = 0

    def record(b):
        nonlocal adds, sketch
        for q in positions(b):
            if counter_max == 0 or sketch[q] < counter_max:
                sketch[q] += 1
        adds += 1
        if adds >= sample:
            sketch = [c >> 1 for c in sketch]
            adds >>= 1

    def estimate(b):
        return min(sketch[q] for q in positions(b))

    win, prob, prot = OrderedDict(), OrderedDict(), OrderedDict()  # first = LRU end
    hits = 0
    for b in accesses:
        if b in win:
            hits += 1
            win.move_to_end(b)
        elif b in prot:
            hits += 1
            prot.move_to_end(b)
        elif b in prob:
            hits += 1
            del prob[b]
            prot[b] = None
            while len(prot) > prot_cap:
                prob[prot.popitem(last=False)[0]] = None
        else:
            if len(win) + len(prob) + len(prot) == capacity:
                while True:
                    cand = next(iter(win), None)
                    if cand is None:  # an empty window: the main cache's victim goes
                        (prob or prot).popitem(last=False)
                        break
                    del win[cand]
                    if len(prob) + len(prot) < main_cap:  # room in main: the candidate only moves
                        prob[cand] = None
                        continue
                    victims = prob or prot
                    v = next(iter(victims))
                    if estimate(cand) > estimate(v):
                        del victims[v]
                        prob[cand] = None
                    break
            win[b] = None
            while len(win) > win_cap and len(prob) + len(prot) < main_cap:
                prob[win.popitem(last=False)[0]] = None
        record(b)
    return hits


def test_the_reference_wtinylfu_keeps_the_hand_computed_aging_trace():
    # the hand-computed access-by-access story of test_wtinylfu_aging_halves_counts...:
    # three hits (the 12th access is a miss after the reset, a hit without it)
    dense = [x - 1 for x in AGING_TRACE]
    assert reference_wtinylfu(dense, 3, window=1 / 3, protected=0.5, width=4096, sample_factor=3.0) == 2
    assert reference_wtinylfu(dense, 3, window=1 / 3, protected=0.5, width=4096, sample_factor=100.0) == 3


def test_wtinylfu_default_differs_from_libcachesim_by_its_aging(lcs, tmp_path):
    # Why the default mode is ~30 points above libCacheSim at small capacities on
    # prefix-chained sessions (0.535 against 0.226 at 2,000 blocks here): the paper
    # halves its sketch every 10 * C recorded accesses (20,000 here: a dozen times over
    # the trace), libCacheSim only after 32 * M main-cache hits (63,360), which this
    # trace never reaches: its counts only grow, so blocks of sessions that ended long
    # ago but were read many times keep beating the live sessions' blocks in the duel.
    # Ageing the paper's sketch as rarely brings it down to libCacheSim's level; never
    # ageing it sinks it below (libCacheSim's unsaturated counters then still tell the
    # hottest blocks apart, the paper's 4-bit ones all stop at 15).
    # The figures (quoted in docs/performance.md and sim_core/policies/wtinylfu.py) come
    # from libCacheSim itself and from reference_wtinylfu above, not from the engine.
    _, t = chained_sessions(seed=0)
    n = t.n_accesses
    assert n == 240897

    def ours(**params):
        return simulate(t, "wtinylfu", 2000, mode="block", params=params)[0].hits

    theirs = lcs_hits(t, "wtinylfu", 2000, tmp_path)  # 2,000 = 4 x 500: no zombie hits
    assert ours(libcachesim=True) == theirs and round(theirs / n, 3) == 0.226
    accesses = t.blocks.tolist()
    for params, documented in (({}, 0.535),
                               ({"sample_factor": 32.0}, 0.253),  # halving every 32 * C accesses
                               ({"sample_factor": 1e9}, 0.090),  # never
                               ({"counter_max": 0}, 0.475)):  # unsaturated counters alone: a smaller part
        want = reference_wtinylfu(accesses, 2000, **params)
        assert ours(**params) == want, params
        assert round(want / n, 3) == documented, (params, want / n)
    st, hits = replay_state(t, "wtinylfu", 2000, libcachesim=True)
    assert hits < st.cnt[wtinylfu.AGE_EVERY] == 32 * 1980  # so libCacheSim never halved


# ========================================================================= LeCaR
def test_lecar_weight_moves_away_from_the_expert_whose_ghost_is_hit():
    # capacity 2: A A B C. At C the LRU expert picks A (least recent), the LFU expert B
    # (count 1 < 2): the draw decides, and the victim goes to that expert's history.
    # Requesting the victim t accesses after its eviction is a regret for that expert:
    # w_e <- (w_e * exp(-0.45 * d^t) + 1e-10) / s with d = 0.005^(1/2) and the other
    # weight renormalised the same way (libCacheSim's arithmetic). C C in between make
    # t = 3: an older mistake costs less.
    d = 0.005 ** 0.5
    seen = set()
    for seed in range(64):
        if len(seen) == 2 and seed >= 4:
            break
        st, _ = replay_state(singles([A, A, B, C]), "lecar", 2, seed=seed)
        ghost = {int(g) for g in st.ghost} - {0}
        assert len(ghost) == 1
        e = ghost.pop()
        seen.add(e)
        victim = A if e == lecar.GLRU else B
        k = 0 if e == lecar.GLRU else 1
        for filler, t in (([], 1), ([C, C], 3)):
            st, _ = replay_state(singles([A, A, B, C] + filler + [victim]), "lecar", 2, seed=seed)
            wu = 0.5 * math.exp(-0.45 * d**t) + 1e-10
            s = wu + 0.5 + 2e-10
            assert st.w[k] == pytest.approx(wu / s, rel=1e-12)
            assert st.w[1 - k] == pytest.approx((0.5 + 1e-10) / s, rel=1e-12)
            assert st.w[k] < 0.5 < st.w[1 - k]
            assert st.meta[lecar.NH1 if k == 0 else lecar.NH2] == 1
    assert seen == {lecar.GLRU, lecar.GLFU}  # both branches were exercised


@pytest.mark.parametrize("w", [0.0, 1.0])
def test_lecar_fixed_experts_equal_libcachesim(w, traces, tmp_path, lcs):
    # with fixed weights 1 (always LRU) or 0 (always LFU) LeCaR is deterministic:
    # our LRU/LFU structures, ties and histories must match libCacheSim exactly
    from sim_core.replay.reference import libcachesim_hit_ratio, write_oracle_general

    t = traces["sessions"]
    path = write_oracle_general(t, tmp_path / "s.oracleGeneral")
    for cap in (200, 800, 3000):
        ours = hits(t, "lecar", cap, update_weight=False, lru_weight=w)
        theirs = libcachesim_hit_ratio(path, "lecar", cap, update_weight=False, lru_weight=w)
        assert ours == round(theirs * t.n_accesses), (w, cap)


# =========================================================================== LHD
def test_lhd_hit_age_classes():
    assert lhd.hit_age_class(0) == 15
    assert lhd.hit_age_class(1) == 15  # 15 doublings at most
    assert lhd.hit_age_class(5000) == 2  # 5000 -> 10000 -> 20000
    assert lhd.hit_age_class(19999) == 1
    assert lhd.hit_age_class(lhd.MAX_AGE) == 0  # a new block (hit ages 0 + MAX_AGE)


def test_lhd_hit_density_model_hand_computed():
    # class 3: 10 hits at age 2 and 10 evictions at age 5 (0.9 decay -> 9 and 9).
    # Hit density at age a = expected hits / expected remaining lifetime:
    #   a = 2: (0.5 * 1) / (0.5 * 1 + 0.5 * 4) = 0.2; a = 1: 0.5 / 3.5; a = 0: 0.5 / 4.5
    #   a = 3..5: no hits left -> 0
    st = new_state("lhd", singles([A]), 10)
    st.hits[3, 2] = 10
    st.evs[3, 5] = 10
    lhd.reconfigure(st)
    np.testing.assert_allclose(st.dens[3, :7], [1 / 9, 1 / 7, 0.2, 0, 0, 0, 0], rtol=1e-6)
    assert not st.dens[3, 7:-1].any()


def lhd_two_populations(steps=4000, n_reused=15):
    """x_i x_i y_(i mod 15): x blocks are hit once, immediately, then never again; the y
    blocks come back every 45 accesses with 29 distinct blocks in between."""
    reqs = []
    for i in range(steps):
        reqs += [[1000 + i], [1000 + i], [i % n_reused]]
    return Trace.from_requests(reqs)


def test_lhd_learns_to_evict_the_lowest_hit_density_class():
    # At capacity 20 LRU and LHD's prior (which favours just-hit blocks) keep the dead
    # x blocks and miss every y: 1/3. Reconfiguring every 200 accesses, LHD learns
    # that the class of blocks hit at age 0 (class 15: the dead x's) has hit density 0,
    # evicts them, and gets y hits (Belady: 2/3).
    t = lhd_two_populations()
    prior = simulate(t, "lhd", 20, mode="block")[0].hit_ratio
    assert simulate(t, "lru", 20, mode="block")[0].hit_ratio == pytest.approx(1 / 3, abs=1e-3)
    assert prior < 0.36
    st, n = replay_state(t, "lhd", 20, reconfig_interval=200)
    assert n / t.n_accesses > 0.45
    assert st.meta[lhd.NRECONF] == t.n_accesses // 200
    # class 15 learned to be worthless, new blocks (class 0) to be worth keeping
    assert st.dens[15, :20].max() < 1e-3 < 0.01 < st.dens[0, :20].min()
    assert st.evs[15].sum() > 0.5 * st.evs.sum()  # and most evictions come from it


# ==================================================================== invariants
@pytest.mark.parametrize("policy,params", [("wtinylfu", {}), ("wtinylfu", {"libcachesim": True}),
                                           ("wtinylfu", {"doorkeeper": True, "conservative": True}),
                                           ("lecar", {}), ("lhd", {}),
                                           ("lhd", {"reconfig_interval": 50})])
def test_invariants_both_modes(policy, params):
    for seed in (0, 1):
        t = session_trace(n_sessions=50, seed=seed)
        caps = [3, 8, 30, 120, 400]
        for mode in ("block", "request"):
            opt = [r.hits for r in simulate(t, "belady", caps, mode=mode)]
            blk = simulate(t, policy, caps, mode=mode, params=params)
            pre = simulate(t, policy, caps, mode=mode, hits="prefix", params=params)
            for o, b, p, cap in zip(opt, blk, pre, caps):
                assert b.max_resident_blocks <= cap
                assert p.hits <= b.hits <= o, (policy, params, mode, cap)
                assert p.holes_per_request_max <= 1
        big = simulate(t, policy, t.n_unique, params=params)[0]
        assert big.hits == t.n_accesses - t.n_unique and big.evictions == 0


@pytest.mark.parametrize("policy", ["lecar", "lhd"])
def test_randomised_policies_are_seeded(policy):
    t = session_trace(n_sessions=60, seed=2)
    a = simulate(t, policy, 40, seed=3)[0].hits
    assert a == simulate(t, policy, 40, seed=3)[0].hits
    assert len({simulate(t, policy, 40, seed=s)[0].hits for s in range(6)}) > 1


# ======================================================= libCacheSim, within 1 point
def _mean_hit_ratio_gap(policy, trace, cap, tmp_path, runs):
    from sim_core.replay.reference import libcachesim_hit_ratio, write_oracle_general

    path = write_oracle_general(trace, tmp_path / f"{policy}.oracleGeneral")
    ours = np.mean([simulate(trace, policy, cap, mode="block", seed=s)[0].hit_ratio for s in range(runs)])
    # libCacheSim's generator is a process-wide state: consecutive runs differ
    theirs = np.mean([libcachesim_hit_ratio(path, policy, cap) for _ in range(runs)])
    return abs(ours - theirs)


@pytest.mark.parametrize("policy", ["lecar", "lhd"])
@pytest.mark.parametrize("name,cap", [("mooncake", 5000), ("sessions", 3000)])
def test_randomised_policies_within_one_point_of_libcachesim_fast(policy, name, cap, traces, tmp_path, lcs):
    assert _mean_hit_ratio_gap(policy, traces[name], cap, tmp_path, runs=1) < 0.01


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["lecar", "lhd"])
@pytest.mark.parametrize("name", ["mooncake", "sessions"])
def test_randomised_policies_within_one_point_of_libcachesim(policy, name, traces, tmp_path, lcs):
    caps = {"mooncake": (100, 1000, 5000, 20000), "sessions": (50, 200, 800, 3000)}[name]
    for cap in caps:
        assert _mean_hit_ratio_gap(policy, traces[name], cap, tmp_path, runs=3) < 0.01, cap
