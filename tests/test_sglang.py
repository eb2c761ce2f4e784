"""SGLang's scheduler in the serving replay (sim_core/serving/sched_sglang.py): hand-computed
tiny traces, and NVIDIA Dynamo 1.6.1's own SGLang replay of the bundled Mooncake trace."""
from __future__ import annotations

import numpy as np
import pytest

import sim_core.serving as serving
from sim_core import Trace, serve
from sim_core.traces.loaders import load_trace
from tests.helpers import SHARED_MOONCAKE

RATIO_DECAY = (0.7 - 0.7 * 0.14) / 600  # new_token_ratio's step per decode pass (conservativeness 1)


def prefill_ms(T):  # Dynamo's polynomial (stepmodel.DYNAMO_POLY)
    return 4.209989e-7 * T * T + 1.518344e-2 * T + 16.50142


def decode_ms(u):
    return max(1.0, -25.74 * u * u + 54.01 * u + 5.74)


def trace(reqs, inputs, outputs, arrivals, bt=4):
    return Trace.from_requests(reqs, arrivals, block_tokens=bt, input_tokens=inputs, output_tokens=outputs)


@pytest.fixture
def spy(monkeypatch):
    """Each request's final state (sim_core.serving.state.Reqs) after a replay."""
    got = {}
    run = serving.run_serve

    def keep(*args):
        t = run(*args)
        got["reqs"] = args[3]
        return t

    monkeypatch.setattr(serving, "run_serve", keep)
    return got


# ---------------------------------------------------------------- hand-computed
def test_a_prefill_pass_carries_no_decodes():
    # A (512 tokens, 4 outputs) prefills alone and decodes once; B (1024 tokens, 3 outputs)
    # arrives during that decode. The next pass prefills B alone: A does not decode in it
    # and the pass costs P(1024), no decode term. Then A and B decode together until A ends.
    K = 100 * 512  # KV tokens: the decode term's denominator
    t1 = prefill_ms(512) / 1e3
    d1 = decode_ms(513 / K) / 1e3
    arr_b = t1 + d1 / 2
    t2 = t1 + d1 + prefill_ms(1024) / 1e3  # B's first token
    t3 = t2 + decode_ms((514 + 1025) / K) / 1e3
    t4 = t3 + decode_ms((515 + 1026) / K) / 1e3  # A's 4th and B's 3rd token
    r = serve(trace([[1], [2, 3]], [512, 1024], [4, 3], [0.0, arr_b], bt=512), "lru", 100, engine="sglang")
    assert r.ttft_p99_s == pytest.approx(t2 - arr_b) and r.ttft_mean_s == pytest.approx((t1 + t2 - arr_b) / 2)
    assert r.makespan_s == pytest.approx(t4) and r.steps == 5
    mixed = serve(trace([[1], [2, 3]], [512, 1024], [4, 3], [0.0, arr_b], bt=512), "lru", 100, engine="dynamo")
    assert mixed.ttft_p99_s > r.ttft_p99_s  # vLLM's step carries A's decode beside B's prefill


def test_the_reserved_output_room_holds_back_an_admission():
    # 4-token blocks, 20 of them (80 tokens). A (8 tokens, 40 outputs) runs; B (24 tokens,
    # 20 outputs) arrives during A's first decode. At the next pass A holds 3 blocks, so 68
    # tokens are free, but A's output room is (40 - 2) x new_token_ratio (0.7 less one decode
    # step's decay) = 26.56 tokens: B needs 24 + 20 = 44 >= 68 - 26.56 = 41.44 and waits until
    # A finishes. With conservativeness 0.01 (ratio 0.007) it is admitted at once.
    t1 = prefill_ms(8) / 1e3
    d = [decode_ms((8 + k) / 80) / 1e3 for k in range(1, 40)]  # A's 39 decodes alone
    arr_b = t1 + d[0] / 2
    room = 68 - (40 - 2) * (0.7 - RATIO_DECAY)
    assert 24 + 20 >= room > 24  # B's prompt alone would fit
    t = trace([[1, 2], [3, 4, 5, 6, 7, 8]], [8, 24], [40, 20], [0.0, arr_b])
    held = serve(t, "lru", 20, engine="sglang")
    assert held.ttft_p99_s == pytest.approx(t1 + sum(d) + prefill_ms(24) / 1e3 - arr_b)
    eager = serve(t, "lru", 20, engine={"preset": "sglang", "schedule_conservativeness": 0.01})
    assert eager.ttft_p99_s == pytest.approx(t1 + d[0] + prefill_ms(24) / 1e3 - arr_b)


def test_the_retracted_request_has_the_fewest_outputs(spy):
    # 4-token blocks, 24 of them; clip_max_new_tokens=1 keeps the output room near zero, so
    # memory runs out while decoding. A (8 tokens) decodes alone four times; B (4 tokens) and
    # C (12) arrive together and are prefilled in one pass, so when the blocks run out (after
    # about 22 more decodes) B and C have the fewest outputs, A more. SGLang retracts C (tie:
    # the longer prompt); Dynamo's model the earlier admitted, B. After one retraction the
    # other two fit to the end (12 + 11 blocks).
    t = trace([[1, 2], [3], [4, 5, 6]], [8, 4, 12], [40, 40, 40], [0.0, 0.05, 0.05])
    eng = {"preset": "sglang", "clip_max_new_tokens": 1}
    r = serve(t, "lru", 24, engine=eng)
    assert list(spy["reqs"].npre) == [0, 0, 1] and r.preemptions == 1
    r = serve(t, "lru", 24, engine={**eng, "dynamo_compat": True})
    assert list(spy["reqs"].npre) == [0, 1, 0] and r.preemptions == 1
    assert r.recomputed_tokens > 0 and r.reuse_ratio >= r.first_reuse_ratio


def _waiting_behind_a_blocker(n_filler):
    # 4-token blocks. W (blocks 1-6) runs first and caches its prompt; X holds the only
    # running slot (max_num_seqs=1) while the others queue: `n_filler` requests with no
    # cached prefix, then P2 (shares W's first 2 blocks) and P4 (its first 4).
    reqs = [[1, 2, 3, 4, 5, 6], [50, 51]] + [[100 + 3 * i, 101 + 3 * i, 102 + 3 * i] for i in range(n_filler)]
    reqs += [[1, 2, 70, 71, 72], [1, 2, 3, 4, 80]]
    n = len(reqs)
    arrive = [0.0, 1.0] + [1.001] * (n - 2)
    return trace(reqs, [4 * len(x) for x in reqs], [2, 20] + [2] * (n - 2), arrive)


def test_lpm_admits_the_longest_cached_prefix_first(spy):
    t = _waiting_behind_a_blocker(1)  # waiting: F (nothing cached), P2, P4
    eng = {"preset": "sglang", "max_num_seqs": 1}
    serve(t, "lru", 200, engine={**eng, "schedule_policy": "lpm"})
    adm = spy["reqs"].t_admit
    assert adm[4] < adm[3] < adm[2]  # P4, then P2, then F
    assert list(spy["reqs"].hit_first[2:]) == [0, 8, 16]
    serve(t, "lru", 200, engine={**eng, "schedule_policy": "fifo"})
    adm = spy["reqs"].t_admit
    assert adm[2] < adm[3] < adm[4]  # arrival order


def test_lpm_keeps_arrival_order_while_more_than_128_wait(spy):
    # 128 fillers + P2 + P4 = 130 waiting: the first two admissions are in arrival order,
    # then, 128 left, P4 and P2 jump the queue
    t = _waiting_behind_a_blocker(128)
    serve(t, "lru", 2000, engine={"preset": "sglang", "max_num_seqs": 1, "schedule_policy": "lpm"})
    adm = spy["reqs"].t_admit
    order = list(np.argsort(adm[2:], kind="stable") + 2)
    assert order[:4] == [2, 3, 130 + 1, 130]


def test_lpm_defers_a_request_sharing_an_uncached_prefix_with_an_earlier_waiter(spy):
    # 32-token blocks, nothing cached, two 64-token requests per pass. Q1 and Q2 share their
    # first block, R shares nothing. FCFS prefills Q1 and Q2 together, both computing that
    # block; LPM's in-batch check puts Q2 last, so it runs after Q1 and finds the block.
    t = trace([[1, 2], [1, 3], [9, 8]], [64, 64, 64], [2, 2, 2], [0.0, 0.0, 0.0], bt=32)
    eng = {"preset": "sglang", "chunked_prefill_size": 128}
    serve(t, "lru", 100, engine={**eng, "schedule_policy": "lpm"})
    r = spy["reqs"]
    assert r.t_admit[0] == r.t_admit[2] < r.t_admit[1] and list(r.hit_first) == [0, 32, 0]
    serve(t, "lru", 100, engine=eng)
    r = spy["reqs"]
    assert r.t_admit[0] == r.t_admit[1] < r.t_admit[2] and list(r.hit_first) == [0, 0, 0]


# ---------------------------------------------------------------- conservation
@pytest.mark.parametrize("eng", [{}, {"schedule_policy": "lpm"}, {"dynamo_compat": True},
                                 {"chunked_prefill_size": 64, "max_prefill_tokens": 96, "clip_max_new_tokens": 8}])
def test_every_request_finishes_and_tokens_are_conserved(eng, monkeypatch):
    monkeypatch.setenv("KVSWEEP_SERVE_CHECK", "1")  # the pool's counters checked after every pass
    rng = np.random.default_rng(11)
    reqs, inputs, outputs = [], [], []
    for i in range(80):
        root = int(rng.integers(0, 4))
        n = int(rng.integers(1, 12))
        reqs.append([1000 * root + k if k < 4 else 10_000 + 100 * i + k for k in range(n)])
        inputs.append(n * 16 - int(rng.integers(0, 16)))
        outputs.append(int(rng.integers(1, 60)))
    t = trace(reqs, inputs, outputs, np.sort(rng.uniform(0, 0.5, 80)), bt=16)
    for cap in (20, 60, 600):
        r = serve(t, "lru", cap, engine={"preset": "sglang", **eng}, replicas=2 if cap == 60 else 1)
        assert r.requests == 80 and r.output_tokens == sum(outputs)
        hit_first = round(r.first_reuse_ratio * r.prompt_tokens)
        assert r.computed_tokens == sum(inputs) + sum(outputs) - 80 - hit_first + r.recomputed_tokens


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("engine, match", [
    ({"preset": "sglang", "schedule_policy": "sjf"}, r"engine.schedule_policy must be one of fcfs, fifo, lpm"),
    ({"preset": "sglang", "chunked_prefill_size": 0}, "engine.chunked_prefill_size must be a positive integer"),
    ({"preset": "sglang", "max_prefill_tokens": -1}, "engine.max_prefill_tokens must be a positive integer"),
    ({"preset": "sglang", "clip_max_new_tokens": 0}, "engine.clip_max_new_tokens must be a positive integer"),
    ({"preset": "sglang", "schedule_conservativeness": 0}, "engine.schedule_conservativeness must be a number > 0"),
    ({"preset": "sglang", "schedule_conservativeness": -0.5}, "engine.schedule_conservativeness"),
    ({"preset": "sglang", "max_num_batched_tokens": 4096}, r"\['max_num_batched_tokens'\] do not apply to the sglang"),
    ({"preset": "dynamo", "schedule_policy": "lpm"}, r"\['schedule_policy'\] do not apply to the vllm"),
    ({"preset": "sglang", "scheduler": "trtllm"}, "unknown engine.scheduler 'trtllm'; valid: vllm, sglang"),
])
def test_bad_input_names_the_field(engine, match):
    with pytest.raises(ValueError, match=match):
        serve(trace([[1, 2, 3]], [12], [4], [0.0]), "lru", 100, engine=engine)


def test_what_sglang_cannot_run_is_refused():
    t = trace([[1, 2, 3]], [12], [4], [0.0])
    with pytest.raises(ValueError, match="tiers are modelled for the vLLM scheduler only"):
        serve(t, "lru", 100, engine="sglang", tiers=[{"name": "dram", "capacity": 10, "bandwidth_bps": 1e9}])
    # 12 + 4 tokens fit 4 blocks, but SGLang admits a request only below the cache's tokens
    with pytest.raises(ValueError, match="capacity_blocks=4 .16 tokens. is too small for request 0"):
        serve(t, "lru", 4, engine="sglang")
    assert serve(t, "lru", 4, engine="dynamo").requests == 1


# ---------------------------------------------------------------- against Dynamo
@pytest.fixture(scope="module")
def bundled():
    return load_trace(SHARED_MOONCAKE)


# NVIDIA Dynamo 1.6.1, dynamo.replay.run_trace_replay on the bundled trace: one worker,
# engine {"backend": "sglang", "block_size": 512, "num_gpu_blocks": N, "sglang": {...}}
# (SGLang defaults: fifo, 16384, 8192, 4096, 1.0), real time; retractions = the summed
# readmission_count of its per-request records (benchmarks/sglang.py, docs/serving.md).
@pytest.mark.parametrize("blocks, compat, reuse, ttft_ms, p99_ms, tpot_ms, retracted, tol, tol_tpot", [
    # no eviction pressure: both rule sets give Dynamo's figures to 0.1%
    (16000, False, 0.27018, 1_385.64, 5_365.98, 54.236, 0, 0.005, 0.005),
    (16000, True, 0.27018, 1_385.64, 5_365.98, 54.236, 0, 0.005, 0.005),
    # under pressure TTFT is chaotic: arrivals 0.1% earlier or later move Dynamo's own mean
    # from 30.9 to 32.5 s (and ours as much), so 5% with Dynamo's rules; SGLang's own rules
    # queue longer (docs/serving.md), 10%. TPOT is stable: 1%, and 2.5% with SGLang's rules.
    (4000, True, 0.08915, 31_088.3, 71_460.4, 141.837, 0, 0.05, 0.01),
    (4000, False, 0.08915, 31_088.3, 71_460.4, 141.837, 0, 0.10, 0.025),
])
def test_against_dynamos_sglang_replay(bundled, blocks, compat, reuse, ttft_ms, p99_ms, tpot_ms, retracted, tol,
                                       tol_tpot):
    r = serve(bundled, "lru", blocks, engine={"preset": "sglang", "dynamo_compat": compat})
    assert r.reuse_ratio == pytest.approx(reuse, abs=1e-3)
    assert r.ttft_mean_s * 1e3 == pytest.approx(ttft_ms, rel=tol)
    assert r.ttft_p99_s * 1e3 == pytest.approx(p99_ms, rel=tol)
    assert r.tpot_mean_s * 1e3 == pytest.approx(tpot_ms, rel=tol_tpot)
    assert r.preemptions == retracted


def test_retractions_against_dynamo_at_1000_blocks(bundled):
    # Dynamo retracts 57 times (TTFT mean 1,557,718 ms); each retraction is a tie-break and a
    # timing away from another, so the count is compared loosely and the TTFT tightly
    r = serve(bundled, "lru", 1000, engine={"preset": "sglang", "dynamo_compat": True})
    assert 40 <= r.preemptions <= 75
    assert r.ttft_mean_s * 1e3 == pytest.approx(1_557_718.2, rel=0.01)
