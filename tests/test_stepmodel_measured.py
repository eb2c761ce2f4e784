"""The measured step model and the KV cache from memory, against aiconfigurator-core's own calls.

Each check asks the package directly (its compiled engine, its forward-pass estimate, its
KV capacity estimate) and holds our tables, our replay and our memory arithmetic to it.
"""
from __future__ import annotations

import logging
from collections import namedtuple

import numpy as np
import pytest

from sim_core import Trace, serve
from tests.helpers import aiconfigurator

aicore = aiconfigurator(module=True)

from sim_core.serving.measured import aic, tables as measured  # noqa: E402  (after the skip: both need the package)
from sim_core.serving.measured.step import OUT_PREFILL, OUT_TOKENS, measured_seconds, pack  # noqa: E402

MODEL, GPU = "Qwen/Qwen3-30B-A3B", "h100_sxm"
ENGINE = {"preset": "vllm", "step_model": "measured"}
Reqs = namedtuple("Reqs", "comp gen ntok")
Queues = namedtuple("Queues", "ns sr sn")


@pytest.fixture(scope="module")
def engine():
    return aic.build_engine(aic.resolve_model(MODEL), GPU, "vllm", 1, 1, 1)


@pytest.fixture(scope="module")
def tables():
    t, _, _ = measured.tables(measured.configure(MODEL, GPU, "vllm", 1))
    return t


@pytest.fixture(scope="module")
def fpm():
    from aiconfigurator_core.sdk.rust_engine_step import RustForwardPassPerfModel

    with aic.quiet():
        return RustForwardPassPerfModel.best_available(
            {"schema_version": 1, "model_name": MODEL, "system_name": GPU, "backend": "vllm",
             "backend_version": aic.data_version(GPU, "vllm"), "tp_size": 1, "pp_size": 1, "extra": {}})


def step_ms(p, chunks, decodes):
    """Our compiled step time (ms, flags) for prefill chunks [(new, cached)] and decodes [context]."""
    comp = [c for _, c in chunks] + [L - 1 for L in decodes]
    gen = [0] * len(chunks) + [1] * len(decodes)
    ntok = [n + c + 7 for n, c in chunks] + list(decodes)
    sn = [n for n, _ in chunks] + [1] * len(decodes)
    m = len(sn)
    reqs = Reqs(np.array(comp, np.int64), np.array(gen, np.int64), np.array(ntok, np.int64))
    queues = Queues(np.array([m], np.int64), np.arange(m, dtype=np.int32)[None, :], np.array(sn, np.int64)[None, :])
    s, flags = measured_seconds(p, reqs, queues, 0)
    return s * 1e3, flags


def one_request(prompt: int, out: int = 4) -> Trace:
    return Trace.from_requests([list(range(-(-prompt // 512)))], [0.0], block_tokens=512, input_tokens=[prompt],
                               output_tokens=[out])


@pytest.mark.parametrize("prompt", [512, 1000, 2048, 4096, 8192])
def test_one_request_alone_takes_the_packages_prefill_and_decode(prompt, engine):
    r = serve(one_request(prompt), "lru", 100, engine=ENGINE, hardware=GPU, model=MODEL)
    ttft = engine.predict_prefill_latency(1, prompt, 0) / 1e3
    # three decode steps, at contexts prompt + 1 .. prompt + 3 (decode_step_latency's s = isl + 1)
    tpot = np.mean([engine.decode_step_latency(1, prompt + i, 1) for i in range(3)]) / 1e3
    assert r.ttft_mean_s == pytest.approx(ttft, rel=0.005)
    assert r.tpot_mean_s == pytest.approx(tpot, rel=0.005)
    assert r.steps == 4 and r.extrapolated_steps == 0
    assert all(w in r.step_model for w in ("measured", MODEL, GPU, "vllm 0.24.0", "aiconfigurator-core 0.12.0"))


def test_interpolation_error_on_random_steps(tables, fpm):
    """Random steps (k equal chunks of n new after c cached, b decodes at context L) against
    the package's own per-step estimate. Found: median 0.012%, p95 0.19%, worst 1.3% over 300 steps."""
    p = pack(tables, "fused")
    rng = np.random.default_rng(7)
    errs = []
    for _ in range(300):
        k = int(rng.choice([0, 1, 1, 1, 2, 3, 5, 8, 16, 40]))
        n = int(np.exp(rng.uniform(0, np.log(8192 // max(k, 1)))))
        c = int(np.exp(rng.uniform(0, np.log(60000)))) if rng.random() < 0.7 else 0
        b = int(np.exp(rng.uniform(0, np.log(512)))) if (rng.random() < 0.7 or k == 0) else 0
        L = int(np.exp(rng.uniform(np.log(64), np.log(60000))))
        want = fpm.estimate_forward_pass_time_ms({"version": 1, "scheduled_requests": {
            "num_prefill_requests": k, "sum_prefill_tokens": k * n, "sum_prefill_kv_tokens": k * c,
            "num_decode_requests": b, "sum_decode_kv_tokens": b * L}})
        got, _ = step_ms(p, [(n, c)] * k, [L] * b)
        errs.append(abs(got / want - 1))
    errs = np.array(errs)
    print(f"interpolation error: median {np.median(errs):.4%}, p95 {np.percentile(errs, 95):.4%}, max {errs.max():.4%}")
    assert np.median(errs) < 0.002 and errs.max() < 0.02, (np.median(errs), errs.max())


def test_dynamo_composition_is_a_prefill_pass_plus_a_decode_pass(tables, engine):
    p = pack(tables, "dynamo")
    got, _ = step_ms(p, [(1000, 0), (3000, 2000)], [4000, 6000])
    prefill = engine.predict_prefill_latency(2, 2000 + 1000, 1000)  # mean chunk: 2000 new after 1000 cached
    decode = engine.decode_step_latency(2, 5000 - 1, 1)  # mean context 5000
    assert got == pytest.approx(prefill + max(decode, 1.0), rel=0.01)
    fused, _ = step_ms(pack(tables, "fused"), [(1000, 0), (3000, 2000)], [4000, 6000])
    assert fused < got  # one pass pays the weights once


def test_tables_are_cached_on_disk_by_configuration(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSWEEP_CACHE_DIR", str(tmp_path))
    cfg = measured.configure(MODEL, GPU, "vllm", 1)
    t1, path, built = measured.tables(cfg, memo=False)
    assert built and path.parent == tmp_path / "aic" and path.is_file()
    stamp = path.stat().st_mtime_ns
    monkeypatch.setattr(measured, "build", lambda cfg: pytest.fail("rebuilt a cached table"))
    t2, path2, built2 = measured.tables(cfg, memo=False)
    assert path2 == path and not built2 and path.stat().st_mtime_ns == stamp
    assert np.array_equal(t1["s_dense"], t2["s_dense"]) and np.array_equal(t1["ca"], t2["ca"])
    monkeypatch.undo()
    monkeypatch.setenv("KVSWEEP_CACHE_DIR", str(tmp_path))
    other = measured.configure(MODEL, GPU, "sglang", 1)
    t3, path3, built3 = measured.tables(other, memo=False)
    assert built3 and path3 != path and len(list((tmp_path / "aic").glob("*.npz"))) == 2
    assert not np.array_equal(t1["s_dense"], t3["s_dense"])


def test_kv_capacity_from_memory_is_within_15_percent_of_the_packages_estimate():
    from aiconfigurator_core.sdk.memory import estimate_num_gpu_blocks

    t = Trace.from_requests([[1, 2]], [0.0], block_tokens=16, input_tokens=[20], output_tokens=[2])
    r = serve(t, "lru", None, engine=ENGINE, hardware=GPU, model=MODEL)
    with aic.quiet():
        theirs = estimate_num_gpu_blocks(MODEL, GPU, "vllm", "current", scheduler_block_size=16, max_num_tokens=8192,
                                         max_batch_size=1024, memory_fraction_kind="of_total",
                                         memory_fraction_value=0.9)
    assert 110_000 < theirs * 16 < 125_000  # the brief's figure: about 118,000 tokens
    assert r.capacity_blocks == pytest.approx(theirs, rel=0.15)
    assert r.kv_budget["blocks"] == r.capacity_blocks and r.kv_budget["kv_bytes_per_token"] == 98304
    with pytest.raises(ValueError, match=r"capacity_blocks=\d+ needs .* GiB of KV cache .* holds at most"):
        serve(t, "lru", int(theirs * 1.2), engine=ENGINE, hardware=GPU, model=MODEL)
    half = serve(t, "lru", None, engine={**ENGINE, "gpu_memory_utilization": 0.8}, hardware=GPU, model=MODEL)
    assert half.capacity_blocks < r.capacity_blocks


def test_steps_beyond_the_measured_grid_are_counted_and_warned(caplog):
    t = one_request(20000, 2)
    with caplog.at_level(logging.WARNING, logger="sim_core.serving"):
        r = serve(t, "lru", 100, engine={**ENGINE, "max_num_batched_tokens": 32768}, hardware=GPU, model=MODEL)
    assert r.extrapolated_steps == 1 and r.steps == 2  # the 20,000-token prefill; the decode is measured
    assert "1 of 2 steps ran outside the data" in caplog.text and "16,384" in caplog.text


def test_a_chunk_beyond_the_attention_grid_is_flagged(tables):
    p = pack(tables, "fused")
    _, inside = step_ms(p, [(4096, 8192)], [])
    _, long_ctx = step_ms(p, [(4096, 30000)], [])
    _, many = step_ms(p, [(20000, 0)], [])
    assert inside == 0 and long_ctx == OUT_PREFILL and many == OUT_TOKENS | OUT_PREFILL


@pytest.mark.parametrize("kw, match", [
    (dict(hardware="h100_pcie"), r"unknown hardware part 'h100_pcie'.* GPUs .*: h100_sxm, h200_sxm"),
    (dict(hardware="gh200"), r"step_model=measured needs hardware= one of h100_sxm, h200_sxm, b200_sxm"),
    (dict(model="acme/not-a-model"), r"unknown model 'acme/not-a-model': neither bundled .* Bundled: "),
    (dict(model=None), r"step_model=measured needs model="),
    (dict(engine={**ENGINE, "backend": "tensorrt"}), r"unknown engine.backend 'tensorrt'; valid: vllm, sglang, trtllm"),
    (dict(engine={**ENGINE, "tp": 3}), r"engine.tp=3 cannot split .*; valid engine.tp: 1, 2, 4, 8"),
    (dict(engine={**ENGINE, "tp": 4, "moe_ep": 3}), r"engine.tp=4 cannot split"),
    (dict(engine={**ENGINE, "step_params": {"mode": "x"}}), r"step_model measured has no parameter"),
    (dict(engine={**ENGINE, "step_params": {"composition": "x"}}), r"no composition 'x'; valid: fused, dynamo"),
    (dict(engine={**ENGINE, "gpu_memory_utilization": 1.5}), r"engine.gpu_memory_utilization"),
])
def test_bad_input_names_the_field(kw, match):
    args = {"engine": ENGINE, "hardware": GPU, "model": MODEL, **kw}
    with pytest.raises(ValueError, match=match):
        serve(one_request(100, 2), "lru", 10, **args)


def test_an_unknown_model_never_reaches_the_package(monkeypatch):
    from aiconfigurator_core.sdk import engine as sdk_engine

    monkeypatch.setattr(sdk_engine, "compile_engine", lambda *a, **k: pytest.fail("the package was asked"))
    with pytest.raises(ValueError, match="unknown model"):
        measured.configure("someone/private-model", GPU, "vllm", 1)


def test_without_the_package_the_measured_model_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setattr(aic, "package_dir", lambda: None)
    with pytest.raises(ValueError, match=r"not installed: pip install 'aiconfigurator-core==0.12.0'"):
        serve(one_request(100, 2), "lru", 10, engine=ENGINE, hardware=GPU, model=MODEL)
    (tmp_path / "config.json").write_text('{"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, '
                                          '"num_key_value_heads": 2, "vocab_size": 1000, "intermediate_size": 128}')
    with pytest.raises(ValueError, match=r"needs NVIDIA's aiconfigurator-core==0\.12\.0, which is not installed"):
        serve(one_request(100, 2), "lru", 10, engine=ENGINE, hardware=GPU, model=str(tmp_path))
    # the other step models do not need it
    assert serve(one_request(100, 2), "lru", 10).steps == 2


def test_the_setup_fields_do_not_make_two_results_differ():
    """step_model and kv_budget describe the run; a result read back without them is the same."""
    import dataclasses

    r = serve(one_request(512), "lru", 100, engine=ENGINE, hardware=GPU, model=MODEL)
    assert r.kv_budget and r.step_model
    assert dataclasses.replace(r, step_model="", kv_budget={}) == r
    assert dataclasses.replace(r, extrapolated_steps=1) != r
