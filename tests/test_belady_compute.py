"""BeladyCompute (paper sec. 5.2): exact against a brute-force argmax, Belady under the
uniform cost, a hand-computed case where it beats Belady on compute savings, and the
hooks never hand out a pinned block."""
from __future__ import annotations

import hashlib
from fractions import Fraction

import numpy as np
import pytest

from sim_core import Trace, simulate
from sim_core.traces import synth
from sim_core.catalog.cost import cost_per_depth
from sim_core.replay.engine import EVICTIONS, FAILED, new_engine_state, replay_range
from sim_core.policies import PolicyContext, get_policy
from sim_core.policies import belady_compute as bc
from sim_core.structures.kinetic import advance, clear_leaf, drop_leaf, flush, new_tree, put_leaf, set_leaf, top, tree_words
from sim_core.replay.units import depth_totals

MODELS = ["linear", "qwen3_coder_30b"]


# ------------------------------------------------------------------ traces
def random_trace(rng, n_ids=25, n_req=(5, 50), max_len=7):
    """Random block ids (repeats inside a request allowed): depths change per access."""
    reqs = [list(rng.integers(0, n_ids, size=int(rng.integers(1, max_len + 1))))
            for _ in range(int(rng.integers(*n_req)))]
    return Trace.from_requests(reqs)


def prefix_trace(rng, n_sessions=8, max_turns=6, max_new=4):
    """Growing-prefix sessions interleaved at random, with a shared system prompt."""
    nid = [100]

    def fresh(k):
        out = list(range(nid[0], nid[0] + k))
        nid[0] += k
        return out

    system = fresh(2)
    events = []
    for s in range(n_sessions):
        t = float(rng.uniform(0, 50))
        ctx = list(system) if rng.random() < 0.5 else []
        for _ in range(int(rng.integers(1, max_turns + 1))):
            ctx = ctx + fresh(int(rng.integers(1, max_new + 1)))
            events.append((t, list(ctx)))
            t += float(rng.exponential(5.0))
    events.sort(key=lambda e: e[0])
    return Trace.from_requests([e[1] for e in events])


# ------------------------------------------------------------- brute force
def brute_force(trace, cap, mode, costs, hits="block", horizon=0, score="time_per_cost", order="forward"):
    """Plain-Python replay (the engine's semantics) with an O(cache) exact argmax.

    Returns (hit_by_depth, evictions). Scores are exact rationals; ties: never-reused
    blocks first (cheapest first, then smaller id), then highest score, then smaller id.
    """
    blocks = [int(b) for b in trace.blocks]
    offs = [int(o) for o in trace.req_offsets]
    R = len(offs) - 1
    nxt = [None] * len(blocks)
    last = {}
    for r in range(R - 1, -1, -1):
        # request mode: a request larger than the cache is not a use (as in belady)
        skip = mode == "request" and offs[r + 1] - offs[r] > cap
        for j in range(offs[r + 1] - 1, offs[r] - 1, -1):
            nxt[j] = last.get(blocks[j])
            if not skip:
                last[blocks[j]] = j
    hbd = np.zeros(max(1, trace.max_request_blocks), np.int64)
    state = {}  # resident block -> (cost, next use or None)
    pin = {}
    evictions = 0

    def touch(b, j, d):
        nu = nxt[j]
        if nu is not None and horizon and nu - j > horizon:
            nu = None
        state[b] = (float(costs[d]), nu)

    def victim(now, r):
        cands = [b for b in state if pin.get(b, -1) != r]
        never = [b for b in cands if state[b][1] is None]
        if never:
            return min(never, key=lambda b: (state[b][0], b))

        def sc(b):
            c, n = state[b]
            if score == "time_per_cost":
                return Fraction(n - now) / Fraction(c)
            return Fraction(c) * (n - now)
        return max(cands, key=lambda b: (sc(b), -b))

    for r in range(R):
        s, e = offs[r], offs[r + 1]
        if e == s:
            continue
        if mode == "request":
            if e - s > cap:
                continue
            missing = 0
            for j in range(s, e):
                if pin.get(blocks[j], -1) != r:
                    pin[blocks[j]] = r
                    missing += blocks[j] not in state
            while len(state) + missing > cap:
                del state[victim(s, r)]
                evictions += 1
        broken = False
        # request mode: the walk order (tail_first: deepest block first) is the recency
        # order; prefix reuse stops at the shallowest block missing on arrival
        first_miss = min([j - s for j in range(s, e) if blocks[j] not in state], default=e - s)
        for j in (range(e - 1, s - 1, -1) if order == "tail_first" else range(s, e)):
            b, d = blocks[j], j - s
            hit = b in state
            if mode == "request":
                broken = d > first_miss
            if not hit and mode == "block" and len(state) >= cap:
                del state[victim(j, -2)]
                evictions += 1
            touch(b, j, d)
            if hit and not (hits == "prefix" and broken):
                hbd[d] += 1
            else:
                broken = True
    return hbd, evictions


def engine_run(trace, cap, mode, cost_model, hits="block", **params):
    """(hit_by_depth, evictions, costs) of the real policy in the real engine."""
    spec = get_policy("belady_compute")
    totals = depth_totals(trace)
    costs = cost_per_depth(cost_model, len(totals), trace.block_tokens)
    ctx = PolicyContext(trace=trace, capacity=cap, mode=mode, cost_per_depth=costs,
                        params={**spec.defaults, **params})
    st = spec.make_state(ctx)
    es = new_engine_state(trace.n_unique, trace.n_requests, len(totals), cap)
    replay_range(trace.req_offsets, trace.blocks, np.zeros(0, np.int32), np.int64(cap), mode == "request",
                 hits == "prefix", st, es, 0, trace.n_requests)
    assert not es.counters[FAILED], "invalid victim"
    return es.hit_by_depth.copy(), int(es.counters[EVICTIONS]), costs


def _check_equal(trace, caps, mode, models, hits="block", **params):
    totals = depth_totals(trace)
    recs = simulate(trace, "belady_compute", caps, mode=mode, hits=hits, order="forward", cost_models=models,
                    params=params)
    for cap, rec in zip(caps, recs):
        for i, m in enumerate(models):
            hbd, ev, costs = engine_run(trace, cap, mode, m, hits, **params)
            ref, ref_ev = brute_force(trace, cap, mode, costs, hits, **params)
            assert np.array_equal(hbd, ref), (cap, mode, m, hbd, ref)
            assert ev == ref_ev
            want = float((ref * costs).sum() / (totals * costs).sum())
            assert rec.compute_savings[m] == want
            if i == 0:  # hit counts are reported for the first cost model's pass
                assert rec.hits == ref.sum() and rec.evictions == ref_ev


# ------------------------------------------------------------------ tests
@pytest.mark.parametrize("mode", ["block", "request"])
def test_matches_brute_force_on_random_traces(mode):
    rng = np.random.default_rng(7 if mode == "block" else 8)
    for _ in range(30):
        t = random_trace(rng)
        _check_equal(t, [2, 3, 5, 9], mode, MODELS)


@pytest.mark.parametrize("mode", ["block", "request"])
def test_matches_brute_force_on_prefix_traces(mode):
    rng = np.random.default_rng(17 if mode == "block" else 18)
    for _ in range(10):
        t = prefix_trace(rng)
        U = t.n_unique
        _check_equal(t, sorted({3, max(4, U // 8), max(5, U // 4), max(6, U // 2)}), mode, MODELS)


@pytest.mark.parametrize("hits", ["block", "prefix"])
def test_tail_first_matches_brute_force(hits):
    """The default request-mode order walks each request deepest block first; the
    oracle's future stays in prompt order (next uses of the forward trace)."""
    rng = np.random.default_rng(38)
    for _ in range(10):
        t = prefix_trace(rng)
        U = t.n_unique
        caps = sorted({3, max(4, U // 8), max(5, U // 4)})
        totals = depth_totals(t)
        for m in MODELS:
            costs = cost_per_depth(m, len(totals), t.block_tokens)
            recs = simulate(t, "belady_compute", caps, hits=hits, cost_models=[m])
            for cap, rec in zip(caps, recs):
                ref, ref_ev = brute_force(t, cap, "request", costs, hits, order="tail_first")
                assert rec.compute_savings[m] == float((ref * costs).sum() / (totals * costs).sum()), (cap, m)
                assert rec.hits == ref.sum() and rec.evictions == ref_ev


@pytest.mark.parametrize("mode", ["block", "request"])
def test_matches_brute_force_variants(mode):
    """Horizon, the literal cost x time score and prefix hit accounting are exact too."""
    rng = np.random.default_rng(27 if mode == "block" else 28)
    for i in range(8):
        t = random_trace(rng) if i % 2 else prefix_trace(rng)
        _check_equal(t, [3, 6], mode, ["linear"], horizon=6)
        _check_equal(t, [3, 6], mode, MODELS, score="cost_times_time")
        _check_equal(t, [3, 6], mode, ["linear"], hits="prefix")


@pytest.mark.parametrize("mode", ["block", "request"])
@pytest.mark.parametrize("hits", ["block", "prefix"])
def test_uniform_cost_is_belady(mode, hits):
    """Every field of every result is Belady's: a sweep reads BeladyCompute's uniform
    curve off Belady's replay (PolicySpec.uniform_same_as, sweep/derived.py)."""
    same_as = get_policy("belady_compute").uniform_same_as
    rng = np.random.default_rng(3)
    for i in range(25):
        t = random_trace(rng, n_ids=40, n_req=(20, 80)) if i % 2 else prefix_trace(rng, n_sessions=12)
        caps = [2, 4, 8, 16]
        for score in bc.SCORES:
            for horizon in (0, 7):
                params = {"score": score, "horizon": horizon}
                got = simulate(t, "belady_compute", caps, mode=mode, hits=hits, cost_models=["uniform"], params=params)
                name, same_params = same_as(params)
                opt = simulate(t, name, caps, mode=mode, hits=hits, params=same_params, cost_models=["uniform"])
                for g, o in zip(got, opt):
                    assert g == o, (score, horizon, g, o)


def test_keeps_the_deep_block_belady_evicts():
    # block mode, capacity 2, linear cost (depth d costs d + 1):
    #   j: 0  1  2  3  4  5  6  7
    #      A  B  C  C  C  A  D  B      requests [A,B] [C] [C] [C] [A] [D,B]
    # At j=2 (C misses) A is next used at 5, B (depth 1, cost 2) at 7.
    #   Belady evicts B (furthest); C, C, A hit; B misses at 7 -> hits 3, savings 3/10.
    #   BeladyCompute: A scores (5-2)/1 = 3 > B's (7-2)/2 = 2.5, so it evicts A.
    #   C, C hit; A misses at 5 and evicts C (never used again); D evicts A (never
    #   used again); B hits at depth 1 -> hits 3, savings (1+1+2)/10.
    A, B, C, D = 1, 2, 3, 4
    t = Trace.from_requests([[A, B], [C], [C], [C], [A], [D, B]])
    bel = simulate(t, "belady", 2, mode="block", cost_models=["linear"])[0]
    got = simulate(t, "belady_compute", 2, mode="block", cost_models=["linear"])[0]
    assert bel.hits == got.hits == 3
    assert bel.compute_savings["linear"] == pytest.approx(0.3)
    assert got.compute_savings["linear"] == pytest.approx(0.4)
    hbd, _, _ = engine_run(t, 2, "block", "linear")
    assert list(hbd) == [2, 1]  # the depth-1 hit is B's
    # the product as printed (cost x time) evicts B at j=2 (2*5 > 1*3), like Belady
    lit = simulate(t, "belady_compute", 2, mode="block", cost_models=["linear"], params={'score': "cost_times_time"})[0]
    assert lit.compute_savings["linear"] == pytest.approx(0.3)


def test_beats_belady_on_compute_savings_of_prefix_sessions():
    rng = np.random.default_rng(5)
    t = prefix_trace(rng, n_sessions=40, max_turns=10, max_new=6)
    caps = [t.n_unique // 10, t.n_unique // 5]
    for mode in ("block", "request"):
        got = simulate(t, "belady_compute", caps, mode=mode, cost_models=["linear"])
        bel = simulate(t, "belady", caps, mode=mode, cost_models=["linear"])
        for g, b in zip(got, bel):
            assert g.hits <= b.hits  # Belady is hit-optimal (block mode) ...
            assert g.compute_savings["linear"] >= b.compute_savings["linear"]
        assert any(g.compute_savings["linear"] > b.compute_savings["linear"] for g, b in zip(got, bel))


def test_request_mode_tight_capacities_never_evict_pinned():
    # the engine raises on a victim from the request being served
    rng = np.random.default_rng(11)
    for _ in range(20):
        t = random_trace(rng, n_ids=15, n_req=(20, 60), max_len=6)
        for m in ("linear", "uniform"):
            recs = simulate(t, "belady_compute", [1, 2, 3, 4, 6, 7], mode="request", cost_models=[m])
            for rec in recs:
                assert rec.max_resident_blocks <= rec.capacity_blocks


def test_hooks_skip_pinned_and_restore_them():
    # blocks 0..4 inserted by r0 = [0,1,2,3,4]; next uses: 3 -> 5, 2 -> 6, 1 -> 7,
    # 0 -> 8, 4 never. Uniform cost: eviction order 4 (never), 0, 1, 2, 3.
    t = Trace.from_requests([[0, 1, 2, 3, 4], [3], [2], [1], [0]])
    spec = get_policy("belady_compute")
    ctx = PolicyContext(trace=t, capacity=5, mode="request", cost_per_depth=np.ones(5),
                        params=dict(spec.defaults))
    st = spec.make_state(ctx)
    for b in range(5):
        bc.on_insert(st, b, b, 0, b)
    pin = np.full(5, -1, np.int64)
    pin[[4, 0]] = 9  # request 9 pins the two best victims
    assert bc.evict(st, 5, 9, pin) == 1
    assert bc.evict(st, 5, 9, pin) == 2
    # a new request: the parked blocks are back, and no longer pinned
    assert bc.evict(st, 5, 10, pin) == 4
    assert bc.evict(st, 5, 10, pin) == 0
    assert bc.evict(st, 5, 10, pin) == 3
    assert bc.evict(st, 5, 10, pin) == -1


def exact_top(items, now, inverse):
    """The slot of the highest exact score at `now` among items {slot: (c, n)} (ties: the
    smaller slot), -1 if there are none."""
    def sc(s):
        c, nn = items[s]
        return (Fraction(nn - now) / Fraction(c) if inverse else Fraction(c) * (nn - now), -s)
    return max(items, key=sc) if items else -1


def test_kinetic_tree_tracks_the_argmax_over_time():
    """Random lines, random updates and times: the tree's top equals the exact argmax."""
    rng = np.random.default_rng(1)
    for inverse in (True, False):
        n, tmax = 37, 10**6
        kt, kc = new_tree(n, inverse, tmax)
        items = {}
        t = 0
        for _ in range(3000):
            if rng.random() < 0.6:
                s = int(rng.integers(n))
                c = float(rng.choice([1.0, 2.0, 3.0, 0.1, 7.5, 1e9 + 1, 1e9]))
                nn = int(rng.integers(t - 50, t + 3000))
                set_leaf(kt, kc, s, c, nn, s)
                items[s] = (c, nn)
            else:
                t += int(rng.integers(0, 40))
                advance(kt, kc, t)
                assert top(kt) == exact_top(items, int(kt[1]), inverse)


def test_static_repairs_keep_the_exact_argmax():
    """Bursts of deferred updates repaired with flush(static=True) at one clock (winners
    only, certificates left to the next advance), then the clock moves: after every
    repair and every advance the top is the exact argmax."""
    rng = np.random.default_rng(3)
    for inverse in (True, False):
        n, tmax = 200, 10**7
        kt, kc = new_tree(n, inverse, tmax)
        items = {}
        t = 0

        for _ in range(300):
            for _ in range(int(rng.integers(1, 6))):  # repairs at one clock, as a request's victims
                for s in (int(x) for x in rng.integers(0, n, int(rng.integers(1, 4)))):
                    if rng.random() < 0.3:
                        drop_leaf(kt, s)
                        items.pop(s, None)
                    else:
                        c = float(rng.choice([1.0, 2.0, 3.0, 0.1, 7.5, 1e9 + 1, 1e9]))
                        nn = int(rng.integers(t - 50, t + 30000))
                        put_leaf(kt, kc, s, c, nn, s)
                        items[s] = (c, nn)
                flush(kt, kc, True)
                assert top(kt) == exact_top(items, t, inverse)
            t += int(rng.integers(0, 400))
            advance(kt, kc, t)
            assert top(kt) == exact_top(items, t, inverse)


def test_deferred_updates_equal_immediate_ones():
    """put_leaf / drop_leaf then flush leave the tree as set_leaf / clear_leaf do, node
    for node, on bursts of neighbouring leaves (a request's depths) and scattered ones."""
    rng = np.random.default_rng(2)
    for inverse in (True, False):
        n, tmax = 300, 10**7
        now, lazy = new_tree(n, inverse, tmax), new_tree(n, inverse, tmax)
        t = 0
        for _ in range(400):
            lo = int(rng.integers(n))
            burst = (range(lo, min(n, lo + int(rng.integers(1, 40)))) if rng.random() < 0.5
                     else rng.integers(0, n, int(rng.integers(1, 20))))
            for s in burst:
                s = int(s)
                if rng.random() < 0.15:
                    clear_leaf(*now, s)
                    drop_leaf(lazy[0], s)
                else:
                    c = float(rng.choice([1.0, 2.0, 3.0, 0.1, 7.5, 1e9 + 1, 1e9]))
                    nn = int(rng.integers(t - 50, t + 30000))
                    set_leaf(*now, s, c, nn, s)
                    put_leaf(*lazy, s, c, nn, s)
            flush(*lazy)
            P = int(now[0][0])
            tree = slice(0, tree_words(P))  # header and node records (not the scratch)
            assert np.array_equal(now[0][tree], lazy[0][tree]) and np.array_equal(now[1], lazy[1])
            t += int(rng.integers(0, 400))
            advance(*now, t)
            advance(*lazy, t)
            assert top(now[0]) == top(lazy[0])


# ------------------------------------------------- old against new (differential)
# Larger traces than brute force can take: per trace, a digest of hits by depth and
# evictions over both modes, two cost models, both scores and two capacities (16
# replays). The digests were taken from the implementation before the kinetic tree's
# node records, its static repair and the inlined hooks (commit f29de3e); any change of
# victim that changes a hit or an eviction count changes them.
GOLDEN_TRACES = {
    **{f"prefix{s}": (lambda s=s: prefix_trace(np.random.default_rng(100 + s), n_sessions=60, max_turns=12,
                                               max_new=30)) for s in range(3)},
    **{f"random{s}": (lambda s=s: random_trace(np.random.default_rng(200 + s), n_ids=400, n_req=(300, 301),
                                               max_len=40)) for s in range(3)},
    "synth": lambda: synth.generate("freeinference", scale=0.002, seed=0),
}
GOLDEN = {
    "prefix0": "1f7c3c6dc07d7f6f",
    "prefix1": "f208d66aa8e087c6",
    "prefix2": "67f6b8fb8e848c28",
    "random0": "bc681c9bb7e6bae4",
    "random1": "8f9b1085ac057738",
    "random2": "e81bc59136b177a5",
    "synth": "9677e2b62d61c1f0",
}


def decisions_digest(trace):
    h = hashlib.sha1()
    for mode in ("block", "request"):
        for model in MODELS:
            for score in bc.SCORES:
                for frac in (0.05, 0.3):
                    cap = max(trace.max_request_blocks + 1, int(frac * trace.n_unique))
                    hbd, ev, _ = engine_run(trace, cap, mode, model, score=score)
                    h.update(hbd.tobytes() + str(ev).encode())
    return h.hexdigest()[:16]


@pytest.mark.parametrize("name", sorted(GOLDEN_TRACES))
def test_decisions_unchanged_from_the_previous_implementation(name):
    assert decisions_digest(GOLDEN_TRACES[name]()) == GOLDEN[name]


def test_bad_params():
    t = Trace.from_requests([[1, 2], [1]])
    with pytest.raises(ValueError, match="horizon"):
        simulate(t, "belady_compute", 1, params={'horizon': -1})
    with pytest.raises(ValueError, match="score"):
        simulate(t, "belady_compute", 1, params={'score': "cost"})
