"""The serving replay against NVIDIA Dynamo's own replay, same trace and settings, one run.

    python -m benchmarks.serving                      # the bundled Mooncake trace, both tools
    python -m benchmarks.serving --reps 5 --out bench_results/serving

For each configuration (replicas x KV blocks x router x arrival speed-up) it runs
`sim_core.serve(engine="dynamo")` and, when it is installed, Dynamo 1.6.1's
`dynamo.replay.run_trace_replay` with the same settings (engine block size = the trace's
512 tokens, its defaults otherwise), interleaved `--reps` times, and prints reuse (both
counts), TTFT mean/p50/p99, preemptions and the median wall time of each. Ours is timed
with a warm JIT cache (one untimed call first). Dynamo installs here with
`pip install --no-deps ai-dynamo==1.6.1 ai-dynamo-runtime==1.6.1 typing_extensions`;
without it only our side is printed.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from sim_core import serve
from sim_core.traces.loaders import load_trace

BUNDLED = Path(__file__).resolve().parents[1] / "sim_core" / "data" / "mooncake_conversation.jsonl"
# (replicas, KV blocks per replica, router, arrival speed-up)
CONFIGS = [(1, 1000, "round_robin", 1.0), (1, 4000, "round_robin", 1.0), (1, 16000, "round_robin", 1.0),
           (8, 16000, "round_robin", 1.0), (8, 4000, "round_robin", 4.0)]


def ours(trace, replicas: int, blocks: int, router: str, speedup: float) -> tuple[dict, float]:
    t0 = time.perf_counter()
    r = serve(trace, "lru", blocks, replicas=replicas, router=router, engine="dynamo", arrival_speedup=speedup)
    wall = time.perf_counter() - t0
    return {"reuse": r.reuse_ratio, "first_reuse": r.first_reuse_ratio, "ttft_mean_ms": r.ttft_mean_s * 1e3,
            "ttft_p50_ms": r.ttft_p50_s * 1e3, "ttft_p99_ms": r.ttft_p99_s * 1e3,
            "tpot_ms": r.tpot_mean_s * 1e3, "preemptions": r.preemptions}, wall


def replay(path: Path, engine: dict, replicas: int, router: str, speedup: float):
    """(Dynamo's run_trace_replay of a Mooncake trace (512-token blocks) under `engine`'s
    arguments, with per-request records; its wall seconds)."""
    from dynamo.replay import run_trace_replay

    t0 = time.perf_counter()
    rep = run_trace_replay([str(path)], extra_engine_args={"engine": engine}, num_workers=replicas,
                           router_mode=router, arrival_speedup_ratio=speedup, trace_block_size=512,
                           trace_format="mooncake", capture_per_request=True)
    return rep, time.perf_counter() - t0


def dynamo_replay(path: Path, replicas: int, blocks: int, router: str, speedup: float):
    """Dynamo's replay of a Mooncake-format trace (512-token blocks) with per-request
    records: (its report, wall seconds)."""
    return replay(path, {"block_size": 512, "num_gpu_blocks": blocks}, replicas, router, speedup)


def dynamo(path: Path, replicas: int, blocks: int, router: str, speedup: float) -> tuple[dict, float]:
    rep, wall = dynamo_replay(path, replicas, blocks, router, speedup)
    s = rep.summary
    # its summary has no preemption count: each preemption is one re-admission of a request
    pre = sum(int(r.get("readmission_count", 0) or 0) for r in rep.per_request or [])
    return {"reuse": s["prefix_cache_reused_ratio"], "first_reuse": s["first_admission_prefix_cache_reused_ratio"],
            "ttft_mean_ms": s["mean_ttft_ms"], "ttft_p50_ms": s["median_ttft_ms"], "ttft_p99_ms": s["p99_ttft_ms"],
            "tpot_ms": s["mean_tpot_ms"], "preemptions": pre}, wall


def have_dynamo() -> bool:
    try:
        import dynamo.replay  # noqa: F401
    except ImportError:
        return False
    return True


def run(path: Path, reps: int, configs=CONFIGS) -> list[dict]:
    return interleaved(load_trace(path), path, reps, configs, ours, dynamo)


def interleaved(trace, path: Path, reps: int, configs, ours, dynamo, fields=("replicas", "blocks", "router", "speedup"),
                warm=None, progress=None) -> list[dict]:
    """One row per (configuration, tool): `ours(trace, *cfg)` and, when installed,
    `dynamo(path, *cfg)`, each -> (metrics, wall s), run `reps` times interleaved; the
    median wall time. A row names the configuration by `fields`; `warm()` compiles ours
    before timing (default: once per replica count); `progress(row)` sees each row."""
    both = have_dynamo()
    if warm is not None:
        warm()
    else:
        for n in sorted({c[0] for c in configs}):  # JIT: compiled (or loaded) per replica count before timing
            ours(trace, n, max(c[1] for c in configs), "round_robin", 1.0)
    rows = []
    for cfg in configs:
        walls: dict[str, list] = {"ours": [], "dynamo": []}
        got: dict[str, dict] = {}
        for _ in range(reps):  # interleaved, so drift in the machine's speed hits both
            got["ours"], w = ours(trace, *cfg)
            walls["ours"].append(w)
            if both:
                got["dynamo"], w = dynamo(path, *cfg)
                walls["dynamo"].append(w)
        for tool, m in got.items():
            rows.append({**dict(zip(fields, cfg)), "tool": tool, **m, "wall_s": statistics.median(walls[tool])})
            if progress is not None:
                progress(rows[-1])
    return rows


def md_table(columns, rows) -> str:
    """A markdown table: columns are (header, row -> cell text) pairs."""
    out = ["| " + " | ".join(h for h, _ in columns) + " |", "|" + "|".join(["---"] * len(columns)) + "|"]
    out += ["| " + " | ".join(cell(r) for _, cell in columns) + " |" for r in rows]
    return "\n".join(out)


#: the columns every serving benchmark's rows start with (replicas, blocks, router, load)
SHAPE = [("replicas", lambda r: f"{r['replicas']}"), ("blocks", lambda r: f"{r['blocks']:,}"),
         ("router", lambda r: r["router"]), ("load", lambda r: f"{r['speedup']:g}x")]


def table(rows: list[dict]) -> str:
    return md_table(SHAPE + [
        ("tool", lambda r: r["tool"]), ("reuse", lambda r: f"{r['reuse']:.4f}"),
        ("first-admission reuse", lambda r: f"{r['first_reuse']:.4f}"),
        ("TTFT mean (ms)", lambda r: f"{r['ttft_mean_ms']:,.1f}"), ("p50", lambda r: f"{r['ttft_p50_ms']:,.1f}"),
        ("p99", lambda r: f"{r['ttft_p99_ms']:,.1f}"), ("preemptions", lambda r: f"{r['preemptions']}"),
        ("wall (s)", lambda r: f"{r['wall_s']:.2f}")], rows)


def replay_parser(doc: str, name: str, reps: int | None = 3,
                  reps_help: str = "timed runs of each tool per configuration (median)") -> argparse.ArgumentParser:
    """The options every replay benchmark takes: --trace, --reps (unless None), --out."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=BUNDLED, help="a Mooncake-format trace (512-token blocks)")
    if reps is not None:
        ap.add_argument("--reps", type=int, default=reps, help=reps_help)
    ap.add_argument("--out", type=Path, default=None, help=f"write {name}.json and {name}.md here")
    return ap


def main(argv=None) -> int:
    a = replay_parser(__doc__, "serving").parse_args(argv)
    rows = run(a.trace, a.reps)
    publish(table(rows), rows, a.reps, a.out, "serving")
    return 0


def publish(md: str, data, reps: int, out: Path | None, name: str) -> None:
    """Print the table with the machine's note; with `out`, write name.json and name.md there."""
    note = (f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the end; warm JIT; "
            f"median of {reps} interleaved runs")
    print(md)
    print(note)
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{name}.json").write_text(json.dumps(data, indent=1))
        (out / f"{name}.md").write_text(md + "\n\n" + note + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
