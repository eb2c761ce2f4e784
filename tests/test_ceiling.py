"""The fleet ceiling (sim_core.serving.ceiling): Belady with bypass against an exhaustive
search of every cache schedule, hand-computed sequences, and serve() runs that must not
reuse more than the ceiling, with the two engine settings under which they can
(docs/fleet.md, "The fleet ceiling")."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim_core import ROUTERS, Trace, serve
from sim_core.serving import engine_blocks, served_lengths
from sim_core.serving.ceiling import fleet_ceiling
from sim_core.serving.engines import as_engine


def flat(reqs, full=None, arrival=None):
    """A stand-in for engine_blocks' output: requests of dense ids."""
    offs = np.zeros(len(reqs) + 1, np.int64)
    np.cumsum([len(r) for r in reqs], out=offs[1:])
    blocks = np.array([b for r in reqs for b in r], np.int32)
    ext = SimpleNamespace(req_offsets=offs, blocks=blocks,
                          arrival_s=np.arange(len(reqs), dtype=float) if arrival is None else np.asarray(arrival, float))
    return ext, np.diff(offs) if full is None else np.asarray(full, np.int64)


def belady(seq: str, k: int):
    """fleet_ceiling of one request whose blocks are the letters of `seq`."""
    return fleet_ceiling(*flat([[ord(c) - ord("a") for c in seq]]), k)


def exhaustive(seq, k):
    """The most hits of any schedule: after each access the cache becomes any subset of
    (what it held + the block accessed) of at most k blocks (keep, evict any, bypass)."""
    states = {frozenset(): 0}
    for b in seq:
        nxt: dict = {}
        for s, h in states.items():
            h2 = h + (b in s)
            cand = sorted(s | {b})
            for mask in range(1 << len(cand)):
                sub = frozenset(c for i, c in enumerate(cand) if mask >> i & 1)
                if len(sub) <= k and nxt.get(sub, -1) < h2:
                    nxt[sub] = h2
        states = nxt
    return max(states.values())


# ---------------------------------------------------------------- exhaustive search
@settings(max_examples=150, deadline=None)
@given(reqs=st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=4), min_size=1, max_size=4),
       cut=st.data())
def test_belady_with_bypass_is_the_most_any_schedule_hits(reqs, cut):
    full = [cut.draw(st.integers(0, len(r))) for r in reqs]
    seq = [b for r, f in zip(reqs, full) for b in r[:f]]
    ext, f = flat(reqs, full)
    for k in (1, 2, 3):
        assert fleet_ceiling(ext, f, k)[0] == exhaustive(seq, k), (seq, k)


# ---------------------------------------------------------------- by hand
def test_hand_computed_sequences():
    # a b a b, one block: a is kept (next use 2), b bypassed (its next use 3 is later);
    # a hits, b misses: 1. Infinite: 4 accesses - 2 blocks = 2.
    assert belady("abab", 1) == (1, 2)
    # a b c a b c, two blocks: a, b kept; c bypassed (next use 5 > 4 = b's); a and b hit: 2
    # (LRU would hit 0). Infinite: 6 - 3 = 3. Three blocks hold everything: 3.
    assert belady("abcabc", 2) == (2, 3)
    assert belady("abcabc", 3) == (3, 3)
    # nothing is kept at capacity 0
    assert belady("abcabc", 0) == (0, 3)
    # a block twice inside one request counts like any access: a a a, one block: 2 hits
    assert fleet_ceiling(*flat([[0, 0, 0]]), 1) == (2, 2)
    # only the full prompt blocks are accesses: [a b c] with 1 full block, then [a b c]
    # with 3: the sequence is a | a b c, one hit
    assert fleet_ceiling(*flat([[0, 1, 2], [0, 1, 2]], full=[1, 3]), 1) == (1, 1)
    # requests in arrival order, not trace order: [a] [b] [a] [b] arriving at 0, 1, 0.5,
    # 1.5 is a a b b: one block hits twice (in trace order, a b a b, it would hit once)
    assert fleet_ceiling(*flat([[0], [1], [0], [1]], arrival=[0, 1, 0.5, 1.5]), 1) == (2, 2)
    ext, full = flat([[0], [1], [0], [1]], arrival=[0, 1, 0.5, 1.5])
    assert fleet_ceiling(ext, full, 1, order=[0, 1, 2, 3]) == (1, 2)
    # W [a1 a2 a3], X [x c1 c2 c3 c4], Y [a1 a2 a3], Z [c1 c2 c3 c4]: all 7 reuses
    # (3 a's, 4 c's) must be held at once right after X's c4, so 6 blocks give 6 hits
    # and 7 give 7; infinite = 15 accesses - 8 blocks = 7
    wxyz = [[1, 2, 3], [9, 4, 5, 6, 7], [1, 2, 3], [4, 5, 6, 7]]
    assert fleet_ceiling(*flat(wxyz), 6) == (6, 7)
    assert fleet_ceiling(*flat(wxyz), 7) == (7, 7)


def test_bad_input_is_refused():
    ext, full = flat([[0, 1], [1]])
    with pytest.raises(ValueError, match="full\\[1\\] = 2"):
        fleet_ceiling(ext, [2, 2], 3)
    with pytest.raises(ValueError, match="one count per request"):
        fleet_ceiling(ext, [2], 3)
    with pytest.raises(ValueError, match="capacity_blocks"):
        fleet_ceiling(ext, full, -1)
    with pytest.raises(ValueError, match="permutation"):
        fleet_ceiling(ext, full, 1, order=[0, 0])


# ---------------------------------------------------------------- properties
@settings(max_examples=100, deadline=None)
@given(reqs=st.lists(st.lists(st.integers(0, 12), min_size=0, max_size=8), min_size=1, max_size=12))
def test_infinite_bounds_belady_which_grows_with_capacity(reqs):
    ext, full = flat(reqs)
    distinct = len({b for r in reqs for b in r})
    prev = -1
    for k in range(0, distinct + 2):
        hits, inf = fleet_ceiling(ext, full, k)
        assert inf == sum(map(len, reqs)) - distinct
        assert prev <= hits <= inf
        prev = hits
        if k >= distinct:
            assert hits == inf


def test_a_million_random_accesses_at_a_large_capacity():
    """About a million accesses, capacity a third of the distinct blocks: some but not all
    reuse is kept, and the infinite-cache count is accesses minus distinct blocks. (Its
    speed, about a second, is a benchmark: python -m benchmarks.fleet --ceiling.)"""
    rng = np.random.default_rng(0)
    n = 50_000
    lens = rng.integers(1, 40, n)
    offs = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=offs[1:])
    ext = SimpleNamespace(req_offsets=offs, blocks=rng.integers(0, 300_000, int(offs[-1])).astype(np.int32),
                          arrival_s=np.zeros(n))
    hits, inf = fleet_ceiling(ext, lens, 100_000)
    assert 0 < hits < inf == len(ext.blocks) - len(np.unique(ext.blocks))


# ---------------------------------------------------------------- serve() against the ceiling
def ceiling_of(t, capacity, engine="dynamo", order=None):
    prompt, out, _ = served_lengths(t, as_engine(engine))
    full = np.minimum(t.request_lengths, prompt // t.block_tokens)
    return fleet_ceiling(engine_blocks(t, prompt, out), full, capacity, order=order)


def first_hit_tokens(r):
    return round(r.first_reuse_ratio * r.prompt_tokens)


@st.composite
def fleets(draw, threshold=False, sessions=False):
    """A small trace over few block ids (prompts a little short of or past their blocks),
    a fleet and an engine: the dynamo or vllm preset, often with a tiny token budget
    (chunked prefill) or few sequences, at capacities from the least that runs every
    request, where preemptions are common."""
    bt = draw(st.sampled_from([1, 2, 4]))
    reqs = draw(st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=5), min_size=1, max_size=8))
    n = len(reqs)
    inputs = [max(1, len(r) * bt + draw(st.integers(-bt, bt))) for r in reqs]
    outputs = draw(st.lists(st.integers(1, 12), min_size=n, max_size=n))
    arrival = draw(st.lists(st.sampled_from([0.0, 0.005, 0.01, 0.02, 0.05]), min_size=n, max_size=n))
    session = draw(st.lists(st.integers(-1, 2), min_size=n, max_size=n))
    t = Trace.from_requests(reqs, arrival, session=session, block_tokens=bt, input_tokens=inputs,
                            output_tokens=outputs)
    eng = {"preset": draw(st.sampled_from(["dynamo", "vllm"]))}
    if draw(st.booleans()):
        eng["max_num_batched_tokens"] = draw(st.integers(1, 4 * bt))
    if draw(st.booleans()):
        eng["max_num_seqs"] = draw(st.integers(1, 3))
    if threshold and draw(st.booleans()):
        eng["long_prefill_token_threshold"] = draw(st.integers(1, 3 * bt))
    prompt, out, _ = served_lengths(t, as_engine(eng))
    cap = int((-(-(prompt + out - 1) // bt)).max()) + draw(st.integers(0, 3))
    kw = dict(replicas=draw(st.integers(1, 3)), router=draw(st.sampled_from(list(ROUTERS))), engine=eng,
              hardware="h100_sxm", seed=draw(st.integers(0, 3)))
    if sessions and max(session) >= 0:  # closed loops need session ids
        kw["sessions"] = draw(st.booleans())
    return t, draw(st.sampled_from(["lru", "belady"])), cap, kw


SERVE_PROPS = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SERVE_PROPS
@given(case=fleets())
def test_no_fleet_reuses_more_than_belady_over_the_pooled_cache(case):
    # Requests enter each replica's queue in arrival order and no per-step chunk cap
    # (long_prefill_token_threshold) is set: the assumptions of docs/fleet.md. Chunked
    # prefill, preemption and re-admission, every router, both presets are drawn.
    t, policy, cap, kw = case
    r = serve(t, policy, cap, **kw)
    hits, inf = ceiling_of(t, kw["replicas"] * cap, kw["engine"])
    assert first_hit_tokens(r) <= hits * t.block_tokens, (first_hit_tokens(r), hits * t.block_tokens)
    assert hits <= inf


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=fleets(threshold=True, sessions=True))
def test_no_fleet_reuses_more_than_an_infinite_cache(case):
    # every block's first access (in any order) misses: this holds whatever the order
    t, policy, cap, kw = case
    r = serve(t, policy, cap, **kw)
    assert first_hit_tokens(r) <= ceiling_of(t, 1)[1] * t.block_tokens


# ---------------------------------------------------------------- where the arrival order is not the engine's
def test_a_chunk_cap_lets_a_later_request_in_between_a_prefills_chunks():
    # 4-token blocks, 6 per engine, a budget of 4 tokens a step and at most 3 tokens a step
    # for a running prefill. W = [a1 a2 a3] (13 tokens) runs alone. At t=10 X = [x c1 c2 c3
    # c4] (21 tokens) is admitted with 4 tokens (x); next step X gets 3 tokens (c1's block
    # allocated) and the 1 token left admits Y = [a1 a2 a3] (13 tokens), which finds its 3
    # blocks and finishes in that step. X then computes c2..c4; Z = [c1..c4] (17 tokens,
    # t=20) finds all 4. 7 blocks reused. In arrival order W X Y Z all 7 reuses are open
    # at once after X's c4, so 6 blocks allow 6 (test_hand_computed_sequences): the engine
    # beats the arrival-order ceiling because Y's accesses came between X's chunks.
    bt = 4
    reqs = [[1, 2, 3], [9, 4, 5, 6, 7], [1, 2, 3], [4, 5, 6, 7]]
    t = Trace.from_requests(reqs, [0.0, 10.0, 10.0, 20.0], block_tokens=bt,
                            input_tokens=[len(x) * bt + 1 for x in reqs], output_tokens=[1] * 4)
    eng = {"preset": "dynamo", "max_num_batched_tokens": 4, "long_prefill_token_threshold": 3}
    r = serve(t, "lru", 6, engine=eng)
    assert r.preemptions == 0 and first_hit_tokens(r) == 7 * bt
    assert ceiling_of(t, 6, eng) == (6, 7)
    # Without the cap Y waits for X's whole prefill and the ceiling holds
    assert first_hit_tokens(serve(t, "lru", 6, engine={"preset": "dynamo", "max_num_batched_tokens": 4})) <= 6 * bt
    # The weaker statement that always holds: Belady over the engine's own access order,
    # W | x c1 | Y | c2 c3 c4 | Z (X's chunks split around Y): 7
    assert fleet_ceiling(*flat([[1, 2, 3], [9, 4], [1, 2, 3], [5, 6, 7], [4, 5, 6, 7]]), 6)[0] == 7


def test_closed_sessions_reorder_requests_after_the_trace_order():
    # 64-token blocks, 5 per engine. Z (session 7, 65 tokens, 40 outputs) runs ~40 decode
    # steps. A = [a1..a4] at 1 ms and its copy at 3 ms reuse 4 blocks; B = [b1..b4] (session
    # 7, trace time 2 ms) and its copy (4 ms) are Z's next turns: with sessions=True B is sent
    # when Z finishes (plus 2 ms), after A's copy, so the engine sees Z A A' B B' and
    # reuses all 8 blocks with 5. In trace order Z A B A' B' the 8 reuses overlap and 5
    # blocks allow 5 (4 + 4 intervals open at B's last block, keep the 5 nearest).
    bt = 64
    a, b = [1, 2, 3, 4], [11, 12, 13, 14]
    t = Trace.from_requests([[50], a, b, a, b], [0.0, 0.001, 0.002, 0.003, 0.004], session=[7, -1, 7, -1, 7],
                            block_tokens=bt, input_tokens=[bt + 1] + [4 * bt + 1] * 4, output_tokens=[40, 1, 1, 1, 1])
    r = serve(t, "lru", 5, sessions=True)
    assert first_hit_tokens(r) == 8 * bt
    assert ceiling_of(t, 5) == (5, 8)
    # over the order the requests were released in, the ceiling holds again
    assert ceiling_of(t, 5, order=[0, 1, 3, 2, 4]) == (8, 8)
    assert first_hit_tokens(serve(t, "lru", 5)) <= 5 * bt  # open loop: trace order
