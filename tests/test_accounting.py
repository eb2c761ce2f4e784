"""Counting as engines count (sim_core.replay.accounting): reused tokens over prompt tokens,
partial last blocks, the warm-up and windows of trace time. Expected values are worked
out by hand, or come from replays of shorter traces (a replay is causal: the first k
requests of a trace meet the cache the first k requests of a longer one meet)."""
from __future__ import annotations

import numpy as np
import pytest

from sim_core import Trace, simulate
from sim_core.traces.loaders import bundled_path, load_trace


def mooncake():
    return load_trace(bundled_path("mooncake_conversation"))


def test_token_hit_ratio_by_hand():
    # 16-token blocks. [A B] with 20 tokens: B holds 4. Then [A B] again (both hit: 16 + 4
    # tokens reused of 20), then [A C] with 30 tokens (A hits: 16 of 30).
    t = Trace.from_requests([[1, 2], [1, 2], [1, 3]], input_tokens=[20, 20, 30])
    r = simulate(t, "lru", [10])[0]
    assert (r.prompt_tokens, r.reused_tokens) == (70, 36)
    assert r.token_hit_ratio == pytest.approx(36 / 70)
    assert r.hit_ratio == pytest.approx(3 / 6)


def test_partial_blocks_skip_by_hand():
    # skip: B (4 tokens) is never cached, so the second [A B] reuses A only; B still
    # counts as an access, recomputed.
    t = Trace.from_requests([[1, 2], [1, 2], [1, 3]], input_tokens=[20, 20, 30])
    for one_pass in (True, False):
        r = simulate(t, "lru", [10], partial_blocks="skip", one_pass=one_pass)[0]
        assert (r.accesses, r.hits, r.recomputed_blocks) == (6, 2, 4)
        assert (r.prompt_tokens, r.reused_tokens) == (70, 32)
    # a full last block is cached either way
    full = Trace.from_requests([[1, 2], [1, 2]], input_tokens=[32, 32])
    assert simulate(full, "lru", [10], partial_blocks="skip")[0].hits == 2


def test_partial_blocks_skip_frees_the_space():
    # capacity 2, [A X] [B Y] [A Z] [B W], X..W partial: cached, each request evicts the
    # other prefix (no hit); skipped, A and B both fit and hit once each
    t = Trace.from_requests([[1, 5], [2, 6], [1, 7], [2, 8]], input_tokens=[20] * 4)
    assert simulate(t, "fifo", [2], partial_blocks="skip")[0].hits == 2
    assert simulate(t, "fifo", [2])[0].hits == 0


def test_compute_savings_count_the_skipped_blocks_cost():
    t = Trace.from_requests([[1, 2], [1, 2]], input_tokens=[20, 20])
    r = simulate(t, "lru", [10], partial_blocks="skip", cost_models=["linear"])[0]
    # linear cost: depth 0 costs 1, depth 1 costs 2; saved: the second request's A
    assert r.compute_savings["linear"] == pytest.approx(1 / 6)


@pytest.mark.parametrize("policy", ["lru", "fifo"])
@pytest.mark.parametrize("one_pass", [True, False])
def test_warmup_is_the_full_replay_minus_the_warmup_part(policy, one_pass):
    t = mooncake()
    k = t.n_requests // 2
    caps = [2000, 8000, 30000]
    full = simulate(t, policy, caps, one_pass=one_pass, cost_models=["uniform", "linear"])
    head = simulate(t.subset(k), policy, caps, one_pass=one_pass, cost_models=["uniform", "linear"])
    warm = simulate(t, policy, caps, one_pass=one_pass, warmup=0.5, cost_models=["uniform", "linear"])
    for f, h, w in zip(full, head, warm):
        assert w.warmup_requests == k
        assert w.accesses == f.accesses - h.accesses
        assert w.hits == f.hits - h.hits
        assert w.reused_tokens == f.reused_tokens - h.reused_tokens
        assert w.prompt_tokens == f.prompt_tokens - h.prompt_tokens
        saved_lin = f.compute_savings["linear"] * _total(t, "linear") - h.compute_savings["linear"] * _total(
            t.subset(k), "linear")
        assert w.compute_savings["linear"] == pytest.approx(saved_lin / (_total(t, "linear") - _total(t.subset(k),
                                                                                                    "linear")))


def _total(t, model):
    d = t.depths().astype(np.float64)
    return float(d.sum() + len(d)) if model == "linear" else float(len(d))


def test_warmup_as_a_duration():
    t = mooncake()
    k = int(np.searchsorted(t.arrival_s, t.arrival_s[0] + 600.0))
    a = simulate(t, "lru", [4000], warmup="10m")[0]
    b = simulate(t, "lru", [4000], warmup=k / t.n_requests)[0]
    assert a.warmup_requests == k and a.hits == b.hits


def test_warmup_with_an_oracle_counts_only_after_it():
    import dataclasses

    t = mooncake()
    t = dataclasses.replace(t, arrival_s=np.arange(t.n_requests, dtype=np.float64))  # request r arrives at r s
    full = simulate(t, "belady", [4000], window=1)[0]  # a window per request
    warm = simulate(t, "belady", [4000], warmup=0.5)[0]
    assert warm.hits == int(np.asarray(full.windows["hits"])[t.n_requests // 2:].sum())


def test_warmup_under_sampling():
    from sim_core.traces.synth import generate

    t = generate("freeinference", seed=3)
    exact = simulate(t, "lru", [4000, 16000], warmup=0.5)
    s = simulate(t, "lru", [4000, 16000], warmup=0.5, sample_rate=0.1)
    for e, x in zip(exact, s):
        assert x.sample_rate < 1 and x.accesses == e.accesses and x.warmup_requests > 0
        assert abs(x.hit_ratio - e.hit_ratio) < 0.02


@pytest.mark.parametrize("policy", ["lru", "s3fifo", "belady_compute"])
def test_windows_sum_to_the_whole(policy):
    t = mooncake()
    r = simulate(t, policy, [3000], window="10m", cost_models=["uniform", "qwen3_coder_30b"])[0]
    w = r.windows
    assert sum(w["accesses"]) == r.accesses and sum(w["hits"]) == r.hits
    assert sum(w["reused_tokens"]) == r.reused_tokens and sum(w["prompt_tokens"]) == r.prompt_tokens
    span = t.arrival_s[-1] - t.arrival_s[0]
    assert len(w["start_s"]) == int(span // 600) + 1
    cm = "qwen3_coder_30b"
    # savings per window, weighted by each window's cost, give the whole
    from sim_core.catalog.cost import cost_per_depth

    cost = cost_per_depth(cm, t.max_request_blocks, t.block_tokens)
    d = t.depths()
    req = np.repeat(np.arange(t.n_requests), t.request_lengths)
    win = np.floor((t.arrival_s[req] - t.arrival_s[0]) / 600).astype(int)
    per_window_cost = np.bincount(win, weights=cost[d])
    assert np.dot(w["compute_savings"][cm], per_window_cost) / per_window_cost.sum() == pytest.approx(
        r.compute_savings[cm], rel=1e-9)


@pytest.mark.parametrize("bad,words", [({"warmup": 1.0}, "warmup"), ({"warmup": -0.1}, "warmup"),
                                       ({"warmup": "forever"}, "warmup"), ({"warmup": "30d"}, "whole trace"),
                                       ({"window": 0}, "window"), ({"window": "soon"}, "window"),
                                       ({"partial_blocks": "drop"}, "partial_blocks")])
def test_bad_counting_options_name_the_field(bad, words):
    with pytest.raises(ValueError, match=words):
        simulate(mooncake(), "lru", [1000], **bad)
