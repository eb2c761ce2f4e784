"""The serving replay (sim_core.serve) on hand-computed traces, against the idle TTFT
estimate, a brute-force reuse ceiling and NVIDIA Dynamo's own replay of the Mooncake trace."""
from __future__ import annotations

import json

import numpy as np
import pytest

from sim_core import Trace, serve, simulate
from sim_core.catalog.hardware import PARTS
from sim_core.traces.loaders import load_trace
from sim_core.catalog.models import QWEN3_CODER_30B
from sim_core.serving.engines import ServeEngine
from tests.helpers import SHARED_MOONCAKE


def prefill_ms(T):  # Dynamo's mocker polynomial (lib/mocker/src/common/perf_model.rs)
    return 4.209989e-7 * T * T + 1.518344e-2 * T + 16.50142


def decode_ms(u):
    return max(1.0, -25.74 * u * u + 54.01 * u + 5.74)


def trace(reqs, inputs, outputs, arrivals=None, bt=512):
    return Trace.from_requests(reqs, arrivals if arrivals is not None else [0.0] * len(reqs), block_tokens=bt,
                               input_tokens=inputs, output_tokens=outputs)


def mooncake(n=None):
    rows = [json.loads(x) for x in SHARED_MOONCAKE.open() if x.strip()][:n]
    return Trace.from_requests([r["hash_ids"] for r in rows], [r["timestamp"] / 1000 for r in rows],
                               block_tokens=512, input_tokens=[r["input_length"] for r in rows],
                               output_tokens=[r["output_length"] for r in rows], source="real")


# ---------------------------------------------------------------- hand-computed
def test_one_request_alone():
    # 1000 prompt tokens in one step, then two decode steps at lengths 1001 and 1002
    r = serve(trace([[1, 2]], [1000], [3]), "lru", 100)
    t1 = prefill_ms(1000) / 1e3
    t2 = t1 + decode_ms(1001 / (100 * 512)) / 1e3
    t3 = t2 + decode_ms(1002 / (100 * 512)) / 1e3
    assert r.ttft_mean_s == pytest.approx(t1) and r.ttft_p99_s == pytest.approx(t1)
    assert r.tpot_mean_s == pytest.approx((t3 - t1) / 2) and r.itl_mean_s == pytest.approx((t3 - t1) / 2)
    assert r.e2e_mean_s == pytest.approx(t3) and r.makespan_s == pytest.approx(t3)
    assert r.steps == 3 and r.preemptions == 0 and r.first_reuse_ratio == 0 and r.reuse_ratio == 0
    assert r.computed_tokens == 1000 + 2 and len(r.per_replica) == 1


def test_two_requests_sharing_a_prefix():
    # the second arrives after the first finished: its two shared full blocks are reused;
    # an identical third request reuses all but its last block (vLLM recomputes it)
    t = trace([[1, 2, 3], [1, 2, 4], [1, 2, 3]], [1536, 1536, 1536], [1, 1, 1], [0.0, 10.0, 20.0])
    r = serve(t, "lru", 100)
    ttft = [prefill_ms(1536), prefill_ms(512), prefill_ms(512)]
    assert r.ttft_mean_s == pytest.approx(np.mean(ttft) / 1e3)
    assert r.first_reuse_ratio == pytest.approx(2048 / 4608) and r.reuse_ratio == r.first_reuse_ratio


def test_preemption_then_the_cache_is_matched_again():
    # 4-token blocks, 6 in the cache. Two requests of 8 prompt and 8 output tokens arrive
    # together and are admitted (2 blocks each). Each takes a third block at its first
    # decode (6 used); at its 12th token each third block fills and enters the cache.
    # At the 13th token the first needs a fourth block: none is free or unpinned, so the
    # second (the most recently admitted) is preempted; its blocks go to the LRU tail
    # first (its decode-filled block oldest), the first evicts that one and runs to the
    # end. Then the second is admitted again: it finds its two prompt blocks (8 tokens),
    # recomputes its 5 generated tokens in two new blocks, one of them empty (the first's
    # private last block) and one evicted (the first's decode-filled block, its oldest).
    t = trace([[1, 2], [3, 4]], [8, 8], [8, 8], bt=4)
    r = serve(t, "lru", 6)
    assert r.preemptions == 1 and r.evictions == 2
    assert r.first_reuse_ratio == 0 and r.reuse_ratio == pytest.approx(8 / 16)
    assert r.recomputed_tokens == 12 - 8  # 12 computed before the preemption, 8 found again
    assert r.computed_tokens == (8 + 7) * 2 + r.recomputed_tokens
    assert r.ttft_p50_s == pytest.approx(prefill_ms(16) / 1e3)  # both prompts in the first step


def test_a_token_budget_splits_a_prefill_into_chunks():
    t = trace([list(range(40))], [20000], [1])
    r = serve(t, "lru", 100)
    assert r.ttft_mean_s == pytest.approx((2 * prefill_ms(8192) + prefill_ms(20000 - 2 * 8192)) / 1e3)
    assert r.steps == 3
    r = serve(t, "lru", 100, engine={"preset": "dynamo", "max_num_batched_tokens": 10000})
    assert r.ttft_mean_s == pytest.approx((prefill_ms(10000) * 2) / 1e3) and r.steps == 2


def test_max_num_seqs_queues_requests():
    # one running request at a time: the second waits for the first's last token
    t = trace([[1], [2]], [512, 512], [2, 2])
    r = serve(t, "lru", 100, engine={"preset": "dynamo", "max_num_seqs": 1})
    first = prefill_ms(512) / 1e3
    done = first + decode_ms(513 / 51200) / 1e3
    assert r.queue_peak == 2 and r.ttft_p99_s == pytest.approx(done + first)


# ---------------------------------------------------------------- against other models
def test_roofline_one_request_at_a_time_is_the_idle_ttft_estimate():
    # requests far apart, prompts compute-bound (>= 4096 tokens), no step overheads: TTFT is
    # the prefill FLOPs of the recomputed blocks at peak x MFU, as simulate's estimate
    reqs = [[1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 9, 10, 11, 12, 13], [20 + i for i in range(10)], [1, 2, 3] + [40 + i for i in range(9)]]
    eng = {"preset": "vllm", "step_params": {"step_overhead_s": 0.0, "request_overhead_s": 0.0}}
    for k in range(1, len(reqs) + 1):  # the mean over the first k requests: each request's TTFT
        head = trace(reqs[:k], [512 * len(x) for x in reqs[:k]], [4] * k, [0.0, 1e3, 2e3, 3e3][:k])
        got = serve(head, "lru", 10_000, engine=eng, hardware="h100_sxm")
        idle = simulate(head, "lru", 10_000, hardware="h100_sxm", hits="prefix")[0]
        assert got.first_reuse_ratio == pytest.approx(idle.token_hit_ratio)
        assert got.ttft_mean_s == pytest.approx(idle.ttft_mean_s, rel=1e-9)
    assert got.first_reuse_ratio > 0.1  # the later requests reuse a prefix


def test_an_infinite_cache_reuses_what_a_brute_force_prefix_scan_finds():
    t = mooncake(600)
    seen: set = set()
    reused = 0
    bt = 512
    for r in range(t.n_requests):
        ids = list(t.source_ids[t.request_blocks(r)])
        full = min(len(ids), int(t.input_tokens[r]) // bt)
        h = 0
        while h < full and ids[h] in seen:
            h += 1
        reused += min(h, (int(t.input_tokens[r]) - 1) // bt) * bt
        seen.update(ids[:full])
    ceiling = reused / t.input_tokens.sum()
    sparse = t.arrival_s.copy()
    far = Trace.from_requests([list(t.source_ids[t.request_blocks(r)]) for r in range(t.n_requests)],
                              np.arange(t.n_requests) * 1e4, block_tokens=bt, input_tokens=t.input_tokens,
                              output_tokens=t.output_tokens)
    assert serve(far, "lru", 10**6).first_reuse_ratio == pytest.approx(ceiling, abs=1e-12)
    for cap in (1000, 4000):
        loaded = serve(t, "lru", cap)
        assert loaded.first_reuse_ratio <= ceiling + 1e-12
    assert np.all(np.diff(sparse) >= 0)


def test_ttft_grows_with_load():
    t = mooncake(3000)
    means = [serve(t, "lru", 4000, arrival_speedup=s).ttft_mean_s for s in (0.5, 1.0, 2.0, 4.0)]
    assert all(a < b for a, b in zip(means, means[1:])), means


@pytest.fixture(scope="module")
def bundled():
    return load_trace(SHARED_MOONCAKE)


@pytest.mark.parametrize("blocks, reuse, first, ttft_ms, p99_ms, preempted", [
    # NVIDIA Dynamo 1.6.1, dynamo.replay.run_trace_replay on this trace: one worker,
    # block_size 512 (= the trace's), real time, its defaults otherwise (docs/serving.md)
    (1000, 0.0659, 0.0467, 1_580_657, 2_971_378, 268),
    (4000, 0.0931, 0.0889, 39_042.8, 86_268.6, 71),
    (16000, 0.2703, 0.2703, 1_531.9, 5_836.3, 0),
])
def test_dynamo_preset_reproduces_dynamos_replay(bundled, blocks, reuse, first, ttft_ms, p99_ms, preempted):
    r = serve(bundled, "lru", blocks, engine="dynamo")
    assert r.reuse_ratio == pytest.approx(reuse, abs=5e-5)
    assert r.first_reuse_ratio == pytest.approx(first, abs=5e-5)
    assert r.preemptions == preempted
    # Dynamo charges a step T = n (floor(sum(done + chunk) / n) - floor(sum(done) / n)) prompt
    # tokens, an integer-division artifact we do not copy: a few ms over a run
    assert r.ttft_mean_s * 1e3 == pytest.approx(ttft_ms, rel=2e-4)
    assert r.ttft_p99_s * 1e3 == pytest.approx(p99_ms, rel=2e-4)


# ---------------------------------------------------------------- conservation, every policy
SERVING = ["lru", "fifo", "lfu", "sieve", "s3fifo", "arc", "belady", "random_compute", "lru_session"]


@pytest.mark.parametrize("policy", SERVING)
def test_every_request_finishes_and_tokens_are_conserved(policy, monkeypatch):
    monkeypatch.setenv("KVSWEEP_SERVE_CHECK", "1")  # the pool's counters checked after every step
    rng = np.random.default_rng(7)
    reqs, inputs, outputs = [], [], []
    for i in range(60):
        root = int(rng.integers(0, 4))
        n = int(rng.integers(1, 9))
        reqs.append([1000 * root + k if k < 3 else 10_000 + 100 * i + k for k in range(n)])
        inputs.append(n * 16 - int(rng.integers(0, 16)))
        outputs.append(int(rng.integers(1, 40)))
    t = trace(reqs, inputs, outputs, np.sort(rng.uniform(0, 0.3, 60)), bt=16)
    for cap in (12, 40, 400):
        r = serve(t, policy, cap, engine={"preset": "dynamo", "max_num_batched_tokens": 64})
        assert r.requests == 60 and r.output_tokens == sum(outputs)
        hit_first = round(r.first_reuse_ratio * r.prompt_tokens)
        assert r.computed_tokens == sum(inputs) + sum(outputs) - 60 - hit_first + r.recomputed_tokens
        assert r.first_reuse_ratio <= r.reuse_ratio + 1e-12
    assert r.preemptions == 0  # 400 blocks hold everything


def test_policies_that_cannot_serve_say_why():
    t = trace([[1]], [16], [1], bt=16)
    for name, why in [("ilp", "solved over the whole trace"), ("lrb", "learned"), ("tier_bound", "bound"),
                      ("lecar", "ghost hits")]:
        with pytest.raises(ValueError, match=why):
            serve(t, name, 10)


# ---------------------------------------------------------------- replicas
def test_round_robin_spreads_requests():
    t = mooncake(400)
    two = serve(t, "lru", 4000, replicas=2)
    assert [p["requests"] for p in two.per_replica] == [200, 200]
    # request i (in arrival order) on replica i mod 2
    assert [p["prompt_tokens"] for p in two.per_replica] == [int(t.input_tokens[0::2].sum()),
                                                             int(t.input_tokens[1::2].sum())]


# ---------------------------------------------------------------- goodput and bad input
def test_goodput_counts_requests_within_the_slo():
    t = trace([[1], [2]], [512, 512], [2, 2])
    r = serve(t, "lru", 100, engine={"preset": "dynamo", "max_num_seqs": 1}, slo={"ttft": "30ms"})
    assert r.goodput_ratio == 0.5 and r.slo_ttft_s == pytest.approx(0.03)
    r = serve(t, "lru", 100, slo={"ttft": "1s", "tpot": "1ms"})
    assert r.goodput_ratio == 0.0 and r.goodput_tps == 0.0


@pytest.mark.parametrize("kw, match", [
    (dict(capacity_blocks=2, engine={"preset": "dynamo", "max_num_seqs": 1}), "capacity_blocks=2 is smaller"),
    (dict(engine={"preset": "dynamo", "max_num_batched_tokens": 0}), "max_num_batched_tokens"),
    (dict(arrival_speedup=0), "arrival_speedup"),
    (dict(arrival_speedup=-2.0), "arrival_speedup"),
    (dict(slo={"ttft": 2}), "slo.ttft must be a latency with its unit"),
    (dict(slo={"ttft": "2"}), "slo.ttft"),
    (dict(slo={"p99": "2s"}), "slo has no key"),
    (dict(replicas=0), "replicas"),
    (dict(router="nearest"), "unknown router"),
    (dict(engine="trtllm"), "unknown engine"),
    (dict(engine={"preset": "dynamo", "step_model": "guess"}), "step_model"),
    (dict(engine={"preset": "vllm"}), "needs a hardware part"),
    (dict(tiers=[{"name": "dram", "capacity": 10}]), "needs a load bandwidth"),
    (dict(tiers=[{"name": "dram", "capacity": 10, "write": "sometimes", "bandwidth_bps": 1e9}]), "write"),
])
def test_bad_input_names_the_field(kw, match):
    t = trace([[1, 2, 3]], [1500], [10])
    args = {"capacity_blocks": 100, **kw}
    with pytest.raises(ValueError, match=match):
        serve(t, "lru", **args)


def test_engine_presets_are_typed():
    with pytest.raises(ValueError, match="engine.watermark"):
        ServeEngine("x", 1, 1, watermark=1.5)
    assert PARTS["h100_sxm"].hbm_bps > 1e12 and QWEN3_CODER_30B.kv_bytes_per_token == 98304


def test_closed_sessions_release_a_turn_when_the_previous_finishes():
    # session 7: turns at 0 s and 0.01 s; turn 0 takes one prefill and one decode step, so
    # closed, turn 1 is sent 0.01 s after turn 0's last token (and hits turn 0's block)
    t = Trace.from_requests([[1, 2], [1, 3], [9]], [0.0, 0.01, 0.0], session=[7, 7, -1], block_tokens=512,
                            input_tokens=[1024, 1024, 512], output_tokens=[2, 1, 1])
    op = serve(t, "lru", 100)
    cl = serve(t, "lru", 100, sessions=True)
    step1 = prefill_ms(1024 + 512) / 1e3  # turn 0 and the lone request prefill together
    done0 = step1 + decode_ms(1025 / 51200) / 1e3
    assert cl.makespan_s == pytest.approx(done0 + 0.01 + prefill_ms(512) / 1e3)
    assert cl.ttft_mean_s == pytest.approx((2 * step1 + prefill_ms(512) / 1e3) / 3)
    assert op.makespan_s < cl.makespan_s and cl.first_reuse_ratio == pytest.approx(512 / 2560)
    with pytest.raises(ValueError, match="needs session ids"):
        serve(trace([[1]], [16], [1], bt=16), "lru", 10, sessions=True)


def test_a_block_found_below_hbm_is_loaded_and_the_step_waits_for_it():
    # 4-token blocks, 3 in HBM above an exclusive pool that takes HBM's victims. The first
    # request computes A, B and leaves (B released first, so older); the second's two
    # blocks evict B into the pool. The third, [A, B, C], finds A in HBM, B in the pool
    # (loaded: one block, 1 s at a bandwidth of one block per second), computes C.
    block = QWEN3_CODER_30B.kv_bytes_per_block(4)
    t = trace([[1, 2], [3, 4], [1, 2, 5]], [8, 8, 12], [1, 1, 1], [0.0, 1.0, 2.0], bt=4)
    pool = [{"name": "dram", "capacity": 10, "write": "on_evict", "bandwidth_bps": block}]
    r = serve(t, "lru", 3, tiers=pool)
    assert r.tier_hits == {"dram": 1} and r.tier_loaded_bytes == {"dram": block}
    assert r.first_reuse_ratio == pytest.approx(8 / 28)
    assert r.ttft_p99_s == pytest.approx(1.0)  # the load overlaps the 4-token prefill
    serial = serve(t, "lru", 3, tiers=pool, overlap=False)
    assert serial.ttft_p99_s == pytest.approx(1.0 + prefill_ms(4) / 1e3)
    flat = serve(t, "lru", 3)
    assert flat.first_reuse_ratio == pytest.approx(4 / 28) and flat.tier_hits == {}
