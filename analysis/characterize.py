"""`python -m analysis characterize trace=...`: the paper's section 4 measurements on any trace.

Block lifetimes and the one-hit share (4.1), reuse intervals and intra-session gaps (4.2),
frequency against reuse (4.3), request lengths (4.4), session footprints: CCDF and Lorenz
curve (4.5), block categories (4.1), compulsory misses (4.6), sessions and concurrency
(4.3, appendix B). Results: report.md, report.json and figures/ in `analysis.out`, and
one MLflow run (tag kvsweep.kind=characterization) in the trace's experiment.

Sessions are the loaded trace's (trace.sessions): a trace without session ids (Mooncake)
gets them inferred from prefix chains (sim_core/traces/sessions.py), and the report says so
wherever a measurement rests on them. With trace.sessions=given such a trace gets every
measurement that needs no sessions; the others are reported as skipped, with the reason.
"""
from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np

from sim_core.traces.sessions import INFERRED_NOTE, sessions_source

from . import config, figures, record
from .workload import (HISTORY, SINGLE_TURN, SYSTEM, active_sessions, block_reuse, characterize, frequency_profile,
    further_reuse, has_sessions, infer_block_category, lorenz, session_footprints, session_index, session_times,
    window_overlap)

log = logging.getLogger("analysis")

SUMMARY = """\
Measure a trace as the paper's section 4 does: block lifetimes and the one-hit share,
reuse intervals and intra-session gaps, frequency against reuse, request lengths,
session footprints (CCDF, Lorenz curve), block categories, compulsory misses and
session concurrency. Writes report.md, report.json and figures/ (analysis.out) and logs
them as an MLflow run in the trace's experiment (tracking.offline=true: files only).
Traces without session ids (Mooncake) get sessions inferred from prefix chains
(trace.sessions=auto; the report says so); trace.sessions=given skips those measurements.
It reads the trace, model (KV bytes: footprints in GiB), tracking and analysis keys; the
capacity, cost and sim keys of the shared config are advise's."""
EXAMPLES = ["trace=freeinference", "trace=mooncake_conversation",
            "trace=file trace.path=/data/my.jsonl trace.format=auto analysis.out=./my_trace"]

NO_SESSIONS = ("skipped: the trace has no session ids (every request's session is -1: trace.sessions=given on "
               "a trace without them, as Mooncake's; trace.sessions=auto infers them from prefix chains), and this "
               "measurement needs to know which requests belong to one session")
GAP_WINDOW_S = 1_320.0  # the paper's 22-minute reuse window (sec. 4.2)
LIFETIME_WINDOW_S = 1_800.0  # "most reused blocks live under 30 minutes" (sec. 4.1)
CATEGORIES = ((SYSTEM, "system"), (HISTORY, "history"), (SINGLE_TURN, "single_turn"))


def _pcts(x: np.ndarray, qs=(50, 90, 99)) -> dict[str, float]:
    x = np.asarray(x)  # in its own dtype: a float64 copy of a full-scale week's reuse intervals is 5 GB
    v = np.percentile(x, qs) if len(x) else [math.nan] * len(qs)
    out = {("median" if q == 50 else f"p{q}"): float(p) for q, p in zip(qs, v)}
    out["max"] = float(x.max()) if len(x) else math.nan
    return out


def _section(title: str, paper: str, values: dict | None = None, *, tables: dict | None = None,
             skipped: str | None = None, partial: str | None = None, note: str | None = None) -> dict:
    """status "skipped" (why: `skipped`), "partial" (what is missing: `partial`) or "measured"."""
    status = "skipped" if skipped else "partial" if partial else "measured"
    return {"title": title, "paper": paper, "status": status, "values": values or {}, "tables": tables or {},
            "note": skipped or partial or note}


def measure(trace, model) -> tuple[dict, dict]:
    """(report, data): the report's sections (numbers and small tables, JSON-ready) and
    the arrays its figures are drawn from."""
    sessions = has_sessions(trace)
    source, inferred = _sessions_note(trace)
    category = infer_block_category(trace) if sessions else None
    stats = characterize(trace, category)
    reuse = block_reuse(trace)
    acc = reuse["accesses"]
    reused = acc >= 2
    N, U = trace.n_accesses, trace.n_unique
    gib_per_block = model.kv_bytes_per_block(trace.block_tokens) / 2**30
    data: dict = {"reuse": reuse, "category": category}
    sec: dict[str, dict] = {}

    life = reuse["lifetime_s"][reused]
    sec["lifetimes"] = _section(
        "Block lifetimes and one-hit blocks", "4.1, Fig. 3", {
            "one_hit_block_share": float((acc == 1).mean()),
            "one_hit_access_share": float((acc == 1).sum() / N),
            "reused_lifetime_s": _pcts(life),
            "reused_lifetime_share_under_30min": float((life < LIFETIME_WINDOW_S).mean()) if len(life) else math.nan,
            "window_overlap": window_overlap(trace),  # Fig. 3 (c): the working set's churn
            **({"session_duration_s": {"median": stats["session_duration_median_s"],
                                       "p90": stats["session_duration_p90_s"],
                                       "p99": stats["session_duration_p99_s"]}} if sessions else {})},
        partial=None if sessions else "session durations skipped: the trace has no session ids", note=inferred)

    gaps = session_times(trace)[0] if sessions else np.zeros(0)
    data["gaps"] = gaps
    sec["reuse"] = _section(
        "Reuse intervals and intra-session gaps", "4.2, Fig. 4", {
            "reuse_interval_s": _pcts(reuse["interval_s"]),
            **({"session_gap_s": _pcts(gaps),
                "session_gap_share_under_22min": float((gaps < GAP_WINDOW_S).mean()) if len(gaps) else math.nan}
               if sessions else {})},
        partial=None if sessions else "intra-session gaps skipped: the trace has no session ids", note=inferred)

    profile = frequency_profile(reuse)
    further = further_reuse(acc)
    sec["frequency"] = _section(
        "Frequency against reuse", "4.3, Figs. 5-6", {
            "accesses_per_block": {"median": float(np.median(acc)), "median_reused": float(np.median(acc[reused]))
                                   if reused.any() else math.nan, "max": float(acc.max())},
            **{f"p_further_reuse_after_{r['k']}": r["p_further_reuse"] for r in further[:4]}},
        tables={"by_frequency": profile, "further_reuse": further})

    itok = np.asarray(trace.input_tokens, dtype=np.float64)
    lengths = {"input_tokens": {"mean": float(itok.mean()), **_pcts(itok)},
               "blocks": {"mean": float(trace.request_lengths.mean()), **_pcts(trace.request_lengths)}}
    multi_req = None
    if sessions:
        sess, per_sess = session_index(trace)
        multi_req = per_sess[sess] >= 2
        lengths["input_tokens_multi_turn"] = {"mean": float(itok[multi_req].mean()) if multi_req.any() else math.nan,
                                              **_pcts(itok[multi_req])}
    data.update(multi_req=multi_req, itok=itok)
    sec["request_lengths"] = _section("Request lengths", "4.4, Fig. 9", lengths,
                                      partial=None if sessions else "the multi-turn subset is skipped: the trace has "
                                                                 "no session ids", note=inferred)

    if sessions:
        fp = session_footprints(trace)
        lx, ly = lorenz(fp)
        data.update(footprints=fp, lorenz=(lx, ly), gib_per_block=gib_per_block)
        sec["footprints"] = _section(
            "Session KV footprints", "4.5, Fig. 10", {
                "blocks": _pcts(fp), "gib": {k: v * gib_per_block for k, v in _pcts(fp).items()},
                "top10_share": stats["footprint_top10_share"], "top1_share": stats["footprint_top1_share"]},
            tables={"lorenz": [{"sessions_share": float(x), "bytes_share": float(y)}
                               for x, y in zip(lx, ly) if round(x * 100) in (1, 5, 10, 20, 50, 100)]},
            note=inferred)
        cat_vals = {}
        for c, name in CATEGORIES:
            in_cat = category == c
            ints = reuse["interval_s"][in_cat[reuse["interval_block"]]]
            lt = reuse["lifetime_s"][in_cat & reused]
            cat_vals[name] = {"block_share": stats[f"{name}_block_share"], "access_share": stats[f"{name}_access_share"],
                              "accesses_median": float(np.median(acc[in_cat])) if in_cat.any() else math.nan,
                              "reused_lifetime_s": _pcts(lt, (50, 99)), "reuse_interval_s": _pcts(ints, (50, 99))}
        cat_vals["single_turn"]["once_share"] = stats["single_turn_once_share"]
        sec["categories"] = _section(
            "Block categories", "4.1", cat_vals,
            note="categories are inferred from the access stream (analysis.workload.infer_block_category): a "
                 "block of a multi-turn session is 'system' when several sessions share it"
                 + (f"; {inferred}" if inferred else ""))
        times, active = active_sessions(trace)
        data["active"] = (times, active)
        sec["sessions"] = _section(
            "Sessions and concurrency", "4.3 Fig. 6b, appendix B", {
                "sessions": stats["n_sessions"], "multi_turn_sessions": stats["n_multi_turn_sessions"],
                "multi_turn_request_share": stats["multi_turn_request_share"],
                "requests_per_multi_turn_session": {"median": stats["requests_per_session_median"],
                                                    "max": stats["requests_per_session_max"]},
                "concurrency_mean": stats["concurrency_mean"],
                "concurrency_max": float(active.max()) if len(active) else 0.0}, note=inferred)
    else:
        for key, title, paper in (("footprints", "Session KV footprints", "4.5, Fig. 10"),
                                  ("categories", "Block categories", "4.1"),
                                  ("sessions", "Sessions and concurrency", "4.3 Fig. 6b, appendix B")):
            sec[key] = _section(title, paper, skipped=NO_SESSIONS)

    sec["compulsory_misses"] = _section(
        "Compulsory misses", "4.6", {"compulsory_miss_ratio": U / N, "unique_blocks": float(U),
                                     "block_accesses": float(N)})
    order = ("lifetimes", "reuse", "frequency", "request_lengths", "footprints", "categories", "compulsory_misses",
             "sessions")
    report = {
        "trace": {"name": trace.name, "source": trace.source, "requests": trace.n_requests,
                  "block_accesses": N, "unique_blocks": U, "block_tokens": trace.block_tokens,
                  "span_s": float(trace.arrival_s[-1] - trace.arrival_s[0]), "has_sessions": sessions,
                  "sessions": source,
                  "model": model.name, "kv_gib_per_block": gib_per_block},
        "sections": {k: sec[k] for k in order},
        "notes": ([f"session measurements (footprints, categories, sessions and concurrency, gaps, session "
                   f"durations, multi-turn request lengths) use {inferred}"] if inferred else [])
        if sessions else [f"session measurements (footprints, categories, sessions and concurrency, "
                          f"gaps, session durations, multi-turn request lengths) {NO_SESSIONS}"],
    }
    return report, data


def _sessions_note(trace) -> tuple[str, str | None]:
    """(given | inferred | none, the words a section on inferred sessions carries, else None)."""
    source = sessions_source(trace)
    return source, (f"{INFERRED_NOTE}, not given by the trace (the heuristic measured on generated traces: "
                    f"`python -m benchmarks.sessions`)" if source == "inferred" else None)


def draw(report: dict, data: dict, out: Path) -> dict[str, Path]:
    """The figures, into out/figures; name -> path."""
    name = report["trace"]["name"]
    fig_dir = out / record.FIGURES
    reuse = data["reuse"]
    acc = reuse["accesses"]
    drawn = {}
    life = {"all reused blocks": reuse["lifetime_s"][acc >= 2]}
    if data["category"] is not None:
        for c, label in CATEGORIES:
            life[label] = reuse["lifetime_s"][(data["category"] == c) & (acc >= 2)]
    drawn["lifetimes"] = figures.cdf_figure(life, fig_dir / "lifetimes.png", xlabel="block lifetime (s)",
                                            title=f"{name}: lifetimes of reused blocks (4.1)")
    series = {"reuse interval": reuse["interval_s"]}
    if len(data["gaps"]):
        series["intra-session gap"] = data["gaps"]
    drawn["reuse"] = figures.cdf_figure(series, fig_dir / "reuse.png", xlabel="seconds",
                                        title=f"{name}: reuse intervals and session gaps (4.2)")
    t = report["sections"]["frequency"]["tables"]
    drawn["frequency"] = figures.frequency_figure(t["by_frequency"], t["further_reuse"], fig_dir / "frequency.png",
                                                  title=f"{name}: frequency against reuse (4.3)")
    lens = {"all requests": data["itok"]}
    if data["multi_req"] is not None:
        lens["multi-turn requests"] = data["itok"][data["multi_req"]]
    drawn["request_lengths"] = figures.cdf_figure(lens, fig_dir / "request_lengths.png", xlabel="input tokens",
                                                  title=f"{name}: request lengths (4.4)")
    if "footprints" in data:
        lx, ly = data["lorenz"]
        drawn["footprints"] = figures.footprint_figure(data["footprints"], lx, ly, data["gib_per_block"],
                                                       fig_dir / "footprints.png",
                                                       title=f"{name}: session footprints (4.5)")
        drawn["sessions"] = figures.concurrency_figure(*data["active"], fig_dir / "concurrency.png",
                                                       title=f"{name}: active multi-turn sessions")
    return drawn


# ------------------------------------------------------------------ markdown
def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, (int, np.integer)) or (isinstance(v, float) and v.is_integer() and abs(v) >= 1000):
        return f"{int(v):,}"
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def _rows(values: dict, prefix: str = "") -> list[tuple[str, str]]:
    rows = []
    for k, v in values.items():
        if isinstance(v, dict):
            rows += _rows(v, f"{prefix}{k}.")
        else:
            rows.append((f"{prefix}{k}", _fmt(v)))
    return rows


def markdown(report: dict, figure_paths: dict[str, Path], out: Path) -> str:
    tr = report["trace"]
    lines = [f"# Workload characterization: {tr['name']}", "",
             "Measurements of the paper's section 4 (`python -m analysis characterize`). Times are request "
             "arrivals in seconds; a block's accesses are the requests that read it.", "",
             "| trace | value |", "| --- | --- |"]
    lines += [f"| {k} | {_fmt(v)} |" for k, v in tr.items()]
    for note in report["notes"]:
        lines += ["", f"> **Note.** {note}"]
    for key, s in report["sections"].items():
        lines += ["", f"## {s['title']} (paper {s['paper']})", ""]
        if s["status"] == "skipped":
            lines.append(f"*{s['note']}*")
            continue
        lines += ["| measure | value |", "| --- | --- |"] + [f"| {k} | {v} |" for k, v in _rows(s["values"])]
        if s["note"]:
            lines += ["", f"*{s['note']}*"]
        if key == "frequency":
            lines += ["", "| accesses per block | blocks | reuse interval median (s) | P25-P75 | lifetime median (s) |",
                      "| --- | ---: | ---: | --- | ---: |"]
            for r in s["tables"]["by_frequency"]:
                iv, lt = r["interval_s"], r["lifetime_s"]
                iqr = f"{_fmt(iv['p25'])}-{_fmt(iv['p75'])}" if r["accesses"] != "1" else "n/a"
                lines.append(f"| {r['accesses']} | {r['blocks']:,} | {_fmt(iv['median'])} | {iqr} | "
                             f"{_fmt(lt['median'])} |")
            lines += ["", "| after access k | blocks | P(accessed again) |", "| ---: | ---: | ---: |"]
            lines += [f"| {r['k']} | {r['blocks']:,} | {r['p_further_reuse']:.3f} |" for r in s["tables"]["further_reuse"]]
        if key == "footprints":
            lines += ["", "| largest sessions | share of KV bytes |", "| ---: | ---: |"]
            lines += [f"| {r['sessions_share']:.0%} | {r['bytes_share']:.3f} |" for r in s["tables"]["lorenz"]]
        if key in figure_paths:
            lines += ["", f"![{key}]({figure_paths[key].relative_to(out)})"]
    return "\n".join(lines) + "\n"


def metrics(report: dict) -> dict[str, float]:
    return record.numbers({k: s["values"] for k, s in report["sections"].items()})


# ------------------------------------------------------------------ command
def _prepare(inv):
    return config.tracking_uri(inv), config.model_of(inv), config.load_trace(inv)


def main(argv: list[str]) -> int:
    started = config.start("characterize", argv, SUMMARY, EXAMPLES, _prepare)
    if isinstance(started, int):
        return started
    inv, (uri, model, trace) = started
    report, data = measure(trace, model)
    for note in report["notes"]:
        log.warning("%s", note)
    config.publish(inv, uri, trace, report, kind="characterization", title="characterization of",
                   draw=lambda out: draw(report, data, out), markdown=markdown, metrics=metrics(report))
    return 0
