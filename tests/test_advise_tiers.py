"""advise with tiers (tier=hbm_dram): per HBM capacity the knee of the pool size, the
write mode that wins there, the TTFT there and the gap to the bound, each equal to what
sim_core.simulate gives for the same hierarchy."""
from __future__ import annotations

import json

from sim_core import QWEN3_CODER_30B, simulate
from sim_core.traces.loaders import load_trace
from tests.test_sweep import _write_mooncake

HBM, POOLS, WRITES = [4, 8], [0, 4, 12], ["on_evict", "on_compute"]


def test_advise_sizes_the_pool_and_names_the_mode(tmp_path, capsys):
    from analysis.__main__ import main

    trace = tmp_path / "t.jsonl"
    _write_mooncake(trace)
    out = tmp_path / "out"
    assert main(["advise", "trace=file", f"trace.path={trace}", "trace.format=mooncake", "cost=uniform",
                 "capacity=custom", f"capacity.sizes=[{','.join(map(str, HBM))}]", "tier=hbm_dram",
                 f"tier.dram.capacities=[{','.join(map(str, POOLS))}]", f"tier.dram.write=[{','.join(WRITES)}]",
                 "hardware=h100_sxm", "tracking.offline=true", f"analysis.out={out}"]) == 0
    rep = json.loads((out / "report.json").read_text())
    t = load_trace(trace, "mooncake")
    rows = {(r["capacity"], r["policy"]): r for r in rep["pool_sizing"]}
    assert set(rows) == {(str(h), p) for h in HBM for p in ("lru", "s3fifo")}
    for j, h in enumerate(HBM):
        for p in ("lru", "s3fifo"):
            got = {(s, w): simulate(t, p, [h], model=QWEN3_CODER_30B, hardware="h100_sxm",
                                    tiers=[{"name": "dram", "capacity": s, "policy": "lru", "write": w}])[0]
                   for s in POOLS for w in WRITES}
            top = max(got[(POOLS[-1], w)].served_ratio for w in WRITES)
            knee = next(s for s in POOLS if max(got[(s, w)].served_ratio for w in WRITES) >= top - 0.01 - 1e-12)
            mode = max(sorted(WRITES), key=lambda w: (got[(knee, w)].served_ratio, -sorted(WRITES).index(w)))
            bound = simulate(t, "belady", [h + knee], model=QWEN3_CODER_30B)[0].served_ratio
            r = rows[(str(h), p)]
            assert (r["knee"], r["mode"]) == (f"dram={knee}", mode), (h, p)
            assert r["served_at_knee"] == round(got[(knee, mode)].served_ratio, 4)
            assert r["ttft_ms_at_knee"] == round(got[(knee, mode)].ttft_mean_s * 1e3, 1)
            assert r["bound_gap_points"] == round((bound - got[(knee, mode)].served_ratio) * 100, 2)
    rec = [x for x in rep["recommendations"] if x["topic"] == "pool_size"]
    assert len(rec) == 1 and "points below the bound" in rec[0]["because"] and "TTFT" in rec[0]["because"]
    md = (out / "report.md").read_text()
    assert "## Pool sizing (tier=hbm_dram, vllm_cpu rules)" in md and (out / "figures" / "tiers.png").is_file()
    assert "pool size:" in capsys.readouterr().out


def test_advise_without_tiers_has_no_pool_step(tmp_path):
    from analysis.__main__ import main

    trace = tmp_path / "t.jsonl"
    _write_mooncake(trace)
    assert main(["advise", "trace=file", f"trace.path={trace}", "trace.format=mooncake", "cost=uniform",
                 "capacity=custom", "capacity.sizes=[4]", "tracking.offline=true",
                 f"analysis.out={tmp_path / 'o'}"]) == 0
    rep = json.loads((tmp_path / "o" / "report.json").read_text())
    assert "pool_sizing" not in rep and all(r["topic"] != "pool_size" for r in rep["recommendations"])


def test_advise_compares_engine_hierarchies_at_the_knee(tmp_path):
    """tier.hierarchy=[...] makes the engines' hierarchies the mode axis: the one that
    serves most at the knee wins, as simulate(hierarchy=...) gives it."""
    from analysis.__main__ import main

    trace = tmp_path / "t.jsonl"
    _write_mooncake(trace)
    out = tmp_path / "out"
    names = ["vllm_cpu", "hicache_write_back", "victim"]
    assert main(["advise", "trace=file", f"trace.path={trace}", "trace.format=mooncake", "cost=uniform",
                 "capacity=custom", f"capacity.sizes=[{','.join(map(str, HBM))}]", "tier=hbm_dram",
                 f"tier.dram.capacities=[{','.join(map(str, POOLS))}]", f"tier.hierarchy=[{','.join(names)}]",
                 "hardware=h100_sxm", "tracking.offline=true", f"analysis.out={out}"]) == 0
    rep = json.loads((out / "report.json").read_text())
    t = load_trace(trace, "mooncake")
    rows = {(r["capacity"], r["policy"]): r for r in rep["pool_sizing"]}
    for h in HBM:
        got = {(s, n): simulate(t, "lru", [h], model=QWEN3_CODER_30B, hierarchy=n,
                                tiers=[{"name": "dram", "capacity": s}])[0].served_ratio
               for s in POOLS for n in names}
        top = max(got[(POOLS[-1], n)] for n in names)
        knee = next(s for s in POOLS if max(got[(s, n)] for n in names) >= top - 0.01 - 1e-12)
        best = max(got[(knee, n)] for n in names)
        r = rows[(str(h), "lru")]
        assert r["knee"] == f"dram={knee}" and r["mode"] in names
        assert r["served_at_knee"] == round(best, 4) and got[(knee, r["mode"])] == best
    assert "tier=hbm_dram, vllm_cpu,hicache_write_back,victim rules" in (out / "report.md").read_text()
