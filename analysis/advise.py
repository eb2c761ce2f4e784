"""`python -m analysis advise trace=...`: the paper's section 5.4 as a procedure on your trace.

Replays LRU, S3-FIFO, Belady, BeladyCompute, PartialNode and session-level LRU at your
capacities (default: the paper's headline capacities below the trace's saturation),
then reports the one-hit share, the Belady-BeladyCompute compute-savings gap, the gain
from quick demotion (S3-FIFO - LRU), the loss from session granularity (LRU - LRU-session)
and a recommendation for each, with the numbers behind it. Results: report.md,
report.json and figures/ in `analysis.out`, and one MLflow run (tag kvsweep.kind=advice)
in the trace's experiment.

The decision rules are the paper's (sec. 5.1-5.4), in percentage points:
* compute-awareness: the Belady-BeladyCompute gap bounds what it can gain. More than
  PAYS_POINTS (paper: +12.6 on FreeInference) means it pays; at most NEGLIGIBLE_POINTS
  (paper: <= 1.1 on the five other traces) means hit-optimal eviction is good enough.
* quick demotion: enable it where S3-FIFO gains more than NEGLIGIBLE_POINTS over LRU.
* granularity: session-level eviction is acceptable at pool capacities (above 120 GiB)
  where it loses at most NEGLIGIBLE_POINTS against block level (hit ratio and compute
  savings); elsewhere evict blocks (in HBM blocks are the native unit anyway).

Sessions are the loaded trace's (trace.sessions): on a trace without session ids they
are inferred from prefix chains (sim_core/traces/sessions.py) and the report says so; with
trace.sessions=given such a trace has none, and lru_session and the granularity step are
left out, with the reason in the report's notes.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np

from sim_core import saturation_capacity, simulate
from sim_core.replay.options import resolve_order
from sim_core.traces.sample import auto_rate
from sim_core.traces.sessions import INFERRED_NOTE, sessions_source
from sweep.config import ConfigError
from sweep.fleet import with_tier_links
from sweep.plan import Capacity, oversized_warnings, resolve_capacities
from sweep.report.sizing import axes
from sweep.report.plots import plot_cost_model
from sweep.report.tierplot import plot_tiers
from sweep.spec import capacity_sizes

from . import config, pools, record, serving
from .stored import Stored
from .units import one_cache
from .underload import reconcile
from .workload import has_sessions, session_index


log = logging.getLogger("analysis")

SUMMARY = """\
The paper's section 5.4 on your trace: replays LRU, S3-FIFO, Belady, BeladyCompute,
PartialNode and session-level LRU at your capacities (default: the paper's headline
capacities 24, 48, 96 GiB and 1 TiB that are below the trace's saturation), reports the
one-hit share, the Belady-BeladyCompute compute-savings gap (more than 10 points:
compute-aware eviction pays; about 1 point: it does not), the gain from quick demotion
(S3-FIFO vs LRU) and the loss from session-level eviction (LRU-session vs LRU), and
recommends a course of action with the numbers behind each step. Sessions are the
trace's, inferred from prefix chains where it has none (trace.sessions=auto); without
any (trace.sessions=given on Mooncake) the session step is left out. Sampled replay:
sim.sample_rate=0.01 (policies and capacities where sampling is inaccurate stay exact).
Writes report.md, report.json and figures/ (analysis.out) and logs them as an MLflow run
in the trace's experiment (tracking.offline=true: files only)."""
EXAMPLES = ["trace=freeinference", "trace=mooncake_conversation capacity=custom capacity.sizes=[24GiB,96GiB]",
            "trace=file trace.path=/data/my.jsonl trace.scale=1 sim.sample_rate=0.01",
            "trace=mooncake_conversation fleet=dynamo fleet.arrival_speedup=2 fleet.slo_ttft=2s  # KV cache under load"]

POLICIES = ("lru", "s3fifo", "belady", "belady_compute", "partial_node", "lru_session")
PAYS_POINTS = 10.0  # sec. 5.2: a +12.6-point gap "justifies the design effort"
NEGLIGIBLE_POINTS = 1.1  # sec. 5.2: "<= 1.1 points ... hit-optimal eviction is good enough"
HBM_MAX_GIB = 120.0  # sec. 3.1: per-replica HBM 24-120 GiB; DRAM/SSD pool 0.25-12 TiB
FALLBACK_FRACTIONS = (1 / 32, 1 / 8, 1 / 2)  # of the saturation capacity, when no given capacity is below it
SESSION_POLICIES = ("lru_session",)
NO_SESSIONS = ("the trace has no session ids (trace.sessions=given on a trace without them, as Mooncake's): "
               "session-level LRU (lru_session) is not replayed and the granularity step is left out, since every "
               "request would be a session of its own; trace.sessions=auto infers sessions from prefix chains "
               "(sim_core/traces/sessions.py)")


def sessions_of(trace) -> tuple[str, str]:
    """(where the trace's sessions came from: given | inferred | none, the text that says
    so in the report: "" for given ones)."""
    src = sessions_source(trace)
    inferred = (f"{INFERRED_NOTE} (trace.sessions=auto on a trace without session ids, or trace.sessions=inferred):"
                f" session-level LRU and the single-turn share rest on them; `python -m benchmarks.sessions` measures "
                f"the heuristic on generated traces")
    return src, {"inferred": inferred, "none": NO_SESSIONS}.get(src, "")


def policies_for(trace) -> tuple[str, ...]:
    """POLICIES, without the session-level ones on a trace without sessions."""
    if sessions_of(trace)[0] == "none":
        return tuple(p for p in POLICIES if p not in SESSION_POLICIES)
    return POLICIES


def _pts(x: float) -> float:
    return round(100.0 * float(x), 2)


def primary_cost_model(cost_models: list[str], model_name: str) -> str:
    """The cost model compute-awareness is judged under: the model's own FLOPs (paper sec.
    5.2), else linear (appendix C), else what was selected."""
    for m in (model_name, "linear"):
        if m in cost_models:
            return m
    return cost_models[-1]


def choose_capacities(inv, trace, model) -> tuple[list, list[str]]:
    """The capacities to advise at (sweep.plan.Capacity, below saturation) and notes."""
    sat = saturation_capacity(trace)
    per_block = model.kv_bytes_per_block(trace.block_tokens)
    given = any(o.split("=")[0].lstrip("+~").split(".")[0] == "capacity" for o in inv.overrides)
    caps, _ = resolve_capacities(capacity_sizes(inv.cfg), model, trace.block_tokens)
    what = "the given capacities" if given else "the paper's headline capacities (capacity=paper4)"
    notes = []
    below = [c for c in caps if c.blocks < sat]
    dropped = [c for c in caps if c.blocks >= sat]
    if dropped:
        notes.append(f"{', '.join(c.label for c in dropped)} of {what} hold(s) the whole trace (saturation at "
                     f"{sat:,} blocks, {sat * per_block / 2**30:.3g} GiB): no policy evicts there, so they tell "
                     f"nothing apart and are left out")
    if not below:
        lo = trace.max_request_blocks
        blocks = sorted({max(lo, int(sat * f)) for f in FALLBACK_FRACTIONS if max(lo, int(sat * f)) < sat})
        if not blocks:
            raise ValueError(f"trace {trace.name!r}: its largest request ({lo:,} blocks) is its saturation capacity; "
                             f"there is no capacity at which policies differ")
        notes.append(f"no capacity of {what} is below saturation: advising at "
                     f"{', '.join(f'{b:,}' for b in blocks)} blocks (1/32, 1/8 and 1/2 of the saturation capacity, "
                     f"at least the largest request) instead; give your own with capacity=custom "
                     f"capacity.sizes=[...]")
        below = [Capacity(index=i, label=str(b), blocks=b, gib=b * per_block / 2**30) for i, b in enumerate(blocks)]
    return below, notes


def run_policies(trace, caps_blocks: list[int], *, cost_models, model, sim, policies=POLICIES) -> dict:
    """policy -> list of sim_core.Result (one per capacity), from sim_core.simulate."""
    out = {}
    for p in policies:
        t0 = time.perf_counter()
        out[p] = simulate(trace, p, caps_blocks, cost_models=cost_models, model=model, **config.replay_kwargs(sim))
        log.info("%s: %d capacities in %.1fs", p, len(caps_blocks), time.perf_counter() - t0)
    return out


def workload(trace) -> dict:
    counts = np.bincount(trace.blocks, minlength=trace.n_unique)
    w = {"one_hit_block_share": float((counts == 1).mean()),
         "one_hit_access_share": float((counts == 1).sum() / trace.n_accesses),
         "compulsory_miss_ratio": trace.n_unique / trace.n_accesses}
    if has_sessions(trace):
        sess, per_sess = session_index(trace)
        w["single_turn_request_share"] = float((per_sess[sess] < 2).mean())
    return w


def diagnostics(caps, results: dict, primary: str) -> list[dict]:
    """Per capacity: the four numbers of sec. 5.4 (in points) and what they rest on."""
    rows = []
    names = [p for p in POLICIES if p in results]  # lru_session is left out on a trace without sessions
    for i, c in enumerate(caps):
        r = {p: results[p][i] for p in names}
        hit = {p: r[p].hit_ratio for p in names}
        sav = {p: r[p].compute_savings[primary] for p in names}
        rows.append({
            "capacity": c.label, "capacity_blocks": c.blocks, "capacity_gib": c.gib,
            "regime": "HBM" if c.gib <= HBM_MAX_GIB else "pool",
            "compute_gap_points": _pts(sav["belady_compute"] - sav["belady"]),
            "partial_node_gain_points": _pts(sav["partial_node"] - sav["lru"]),
            "quick_demotion_gain_points": {"hit_ratio": _pts(hit["s3fifo"] - hit["lru"]),
                                           "compute_savings": _pts(sav["s3fifo"] - sav["lru"])},
            **({"session_loss_points": {"hit_ratio": _pts(hit["lru"] - hit["lru_session"]),
                                        "compute_savings": _pts(sav["lru"] - sav["lru_session"])}}
               if "lru_session" in hit else {}),
            "belady_headroom_points": _pts(hit["belady"] - max(hit["lru"], hit["s3fifo"])),
            "holes_per_request_mean": {p: r[p].holes_per_request_mean for p in ("lru", "partial_node")},
            "hit_ratio": hit, "compute_savings": sav,
            "sample_rate": {p: r[p].sample_rate for p in names},
        })
    return rows


def recommend(diag: list[dict], work: dict, primary: str, sessions: str = "given") -> list[dict]:
    """The course of action, one entry per question of sec. 5.4, each with its numbers.
    sessions: where the trace's sessions came from (:func:`sessions_of`); the granularity
    step needs session_loss_points (a trace without sessions has none)."""
    inferred = f", by {INFERRED_NOTE}" if sessions == "inferred" else ""
    at = one_cache

    recs = []
    lru = [(at(d), round(d["hit_ratio"]["lru"], 4)) for d in diag]
    head = max(diag, key=lambda d: d["belady_headroom_points"])
    recs.append({"topic": "baseline", "verdict": "LRU",
                 "action": "Keep LRU (recency) as the baseline eviction policy; the steps below add to it.",
                 "because": f"LRU's hit ratio: {', '.join(f'{v:.4f} at {c}' for c, v in lru)}. The offline ceiling "
                            f"(Belady) is at most {head['belady_headroom_points']:.2f} points above the better of LRU and "
                            f"S3-FIFO (at {at(head)}).",
                 "numbers": {"lru_hit_ratio": dict(lru), "max_belady_headroom_points": head["belady_headroom_points"]}})

    g = max(diag, key=lambda d: d["compute_gap_points"])
    gap, pn = g["compute_gap_points"], g["partial_node_gain_points"]
    holes = g["holes_per_request_mean"]
    holes_text = (f"; holes per request: PartialNode {holes['partial_node']:.2f}, LRU {holes['lru']:.2f}"
                  if np.isfinite(holes["partial_node"]) and np.isfinite(holes["lru"]) else "")
    because = (f"BeladyCompute's compute savings exceed Belady's by {gap:.2f} points at {at(g)} under cost model "
               f"{primary} (the largest gap over the capacities); online, PartialNode's minus LRU's: {pn:+.2f} points "
               f"there{holes_text}.")
    online = "" if pn > NEGLIGIBLE_POINTS else (f" But PartialNode gains only {pn:+.2f} points over LRU there: the "
                                                f"headroom exists, this online policy does not capture it here.")
    if primary == "uniform":
        verdict, action = "not measured", ("Compute-awareness cannot be judged under the uniform cost model (every "
                                           "block costs the same): add cost=linear or the model's cost model.")
    elif gap > PAYS_POINTS:
        verdict, action = "pays", ("Use compute-aware eviction with partial-node granularity (PartialNode): it keeps "
                                   "the expensive deep blocks without fragmenting requests into many holes." + online)
    elif gap <= NEGLIGIBLE_POINTS:
        verdict, action = "does not pay", ("Stay with hit-oriented eviction: compute-aware eviction cannot gain more "
                                           "than the oracle gap, which is negligible here.")
    else:
        verdict, action = "marginal", (f"Compute-aware eviction may pay: the oracle gap is between "
                                       f"{NEGLIGIBLE_POINTS} and {PAYS_POINTS} points; adopt it only if the gain is "
                                       f"worth the complexity." + online)
    recs.append({"topic": "compute_awareness", "verdict": verdict, "action": action, "because": because,
                 "numbers": {"cost_model": primary, "max_gap_points": gap, "at": g["capacity"],
                             "partial_node_gain_points": pn,
                             "gap_points": {d["capacity"]: d["compute_gap_points"] for d in diag}}})

    qd = {d["capacity"]: d["quick_demotion_gain_points"]["hit_ratio"] for d in diag}
    gains = [at(d) for d in diag if qd[d["capacity"]] > NEGLIGIBLE_POINTS]
    losses = [at(d) for d in diag if qd[d["capacity"]] < -NEGLIGIBLE_POINTS]
    one_hit = (f"One-hit blocks are {work['one_hit_block_share']:.1%} of distinct blocks and "
               f"{work['one_hit_access_share']:.1%} of accesses")
    if "single_turn_request_share" in work:
        one_hit += f"; single-turn requests are {work['single_turn_request_share']:.1%} of requests{inferred}"
    listed = ", ".join(f"{qd[d['capacity']]:+.2f} at {at(d)}" for d in diag)
    if gains:
        verdict = "enable"
        action = (f"Enable quick demotion (S3-FIFO) at {', '.join(gains)}"
                  + (f"; not at {', '.join(losses)}, where it loses to LRU" if losses else "") + ".")
    elif losses:
        verdict, action = "avoid", f"Do not enable quick demotion: S3-FIFO loses to LRU at {', '.join(losses)}."
    else:
        verdict, action = "no effect", "Quick demotion is not needed: it changes the hit ratio by a negligible amount."
    if gains and recs[1]["verdict"] == "pays":
        action += (" With compute-aware eviction, apply compute-awareness only to S3-FIFO's main queue "
                   "(policy s3fifo_compute), so the admission queue does not evict shallow blocks early.")
    recs.append({"topic": "quick_demotion", "verdict": verdict, "action": action,
                 "because": f"S3-FIFO minus LRU, hit ratio in points: {listed}. {one_hit}.",
                 "numbers": {"gain_points": qd, **work}})

    if any("session_loss_points" not in d for d in diag):
        return recs  # no sessions: nothing to measure session granularity by (build's notes say so)
    loss = {d["capacity"]: max(d["session_loss_points"]["hit_ratio"], d["session_loss_points"]["compute_savings"])
            for d in diag}
    block_only = [at(d) for d in diag if loss[d["capacity"]] > NEGLIGIBLE_POINTS]
    hbm_ok = [at(d) for d in diag if loss[d["capacity"]] <= NEGLIGIBLE_POINTS and d["regime"] == "HBM"]
    pool_ok = [at(d) for d in diag if loss[d["capacity"]] <= NEGLIGIBLE_POINTS and d["regime"] == "pool"]
    detail = ", ".join(f"{d['session_loss_points']['hit_ratio']:+.2f} hit ratio / "
                       f"{d['session_loss_points']['compute_savings']:+.2f} compute savings at {at(d)}" for d in diag)
    parts = []
    if block_only:
        parts.append(f"Evict blocks at {', '.join(block_only)}: session-level eviction loses more than "
                     f"{NEGLIGIBLE_POINTS} points there.")
    if hbm_ok:
        parts.append(f"At {', '.join(hbm_ok)} session-level eviction would cost little, but blocks are HBM's native "
                     f"unit (sec. 5.3): keep block-level eviction.")
    if pool_ok:
        parts.append(f"At {', '.join(pool_ok)} block- or session-level eviction: session-level costs a "
                     f"negligible amount and needs far less metadata.")
    verdict = "session-level acceptable in the pool" if pool_ok else "block-level"
    recs.append({"topic": "granularity", "verdict": verdict, "action": " ".join(parts),
                 "because": f"LRU minus session-level LRU, in points: {detail}." + (
                     f" Sessions: {INFERRED_NOTE}; the heuristic's errors move these numbers "
                     f"(docs/traces.md#sessions-tracesessions)." if inferred else ""),
                 "numbers": {"loss_points": loss}})
    return recs


# ------------------------------------------------------------------ report
def build(trace, caps, results: dict, cost_models: list[str], primary: str, notes: list[str], sim) -> dict:
    diag = diagnostics(caps, results, primary)
    work = workload(trace)
    sessions, session_note = sessions_of(trace)
    if session_note:
        notes = notes + [session_note]
    rate = sim.get("sample_rate")
    if rate:
        notes = notes + [f"sampled replay at r={rate:g}: the results are estimates (docs/sampling.md gives "
                         f"the measured error per policy and rate); each value shows the rate it ran at, a higher "
                         f"one where the scaled cache would be too small, none where it was replayed exactly"]
    return {
        "trace": {"name": trace.name, "source": trace.source, "requests": trace.n_requests,
                  "block_accesses": trace.n_accesses, "unique_blocks": trace.n_unique,
                  "block_tokens": trace.block_tokens, "sessions": sessions},
        "capacities": [{"label": c.label, "blocks": c.blocks, "gib": c.gib} for c in caps],
        "cost_models": cost_models, "primary_cost_model": primary,
        "engine": {"mode": str(sim.mode), "hits": str(sim.hits),
                   "order": str(resolve_order(str(sim.mode), sim.get("order"))), "sample_rate": rate},
        "workload": work,
        "results": {p: {"hit_ratio": [r.hit_ratio for r in rs],
                        "compute_savings": {m: [r.compute_savings[m] for r in rs] for m in cost_models},
                        "sample_rate": [r.sample_rate for r in rs]} for p, rs in results.items()},
        "diagnostics": diag,
        "recommendations": recommend(diag, work, primary, sessions),
        "notes": notes,
    }


def markdown(report: dict, figure_paths: dict[str, Path], out: Path) -> str:
    caps = report["capacities"]
    heads = [c["label"] for c in caps]
    lines = [f"# Eviction advice: {report['trace']['name']}", "",
             f"The paper's section 5.4 as a procedure (`python -m analysis advise`): {report['trace']['requests']:,} "
             f"requests, {report['trace']['block_accesses']:,} block accesses; {report['engine']['mode']} mode, "
             f"{report['engine']['hits']} hits; compute savings judged under cost model "
             f"`{report['primary_cost_model']}`. Differences are in percentage points." + _sessions_line(report),
             "", "## Recommendations", ""]
    for i, r in enumerate(report["recommendations"], 1):
        lines += [f"{i}. **{r['topic'].replace('_', ' ')}: {r['verdict']}.** {r['action']}", f"   {r['because']}"]
    with_sessions = all("session_loss_points" in d for d in report["diagnostics"])
    lines += ["", "## The numbers per capacity", "",
              "| capacity | regime | BeladyCompute - Belady | PartialNode - LRU | S3-FIFO - LRU (hit) | "
              + ("LRU - LRU-session (hit / savings) | " if with_sessions else "") + "Belady headroom (hit) |",
              "| --- | --- | ---: | ---: | ---: |" + (" ---: |" if with_sessions else "") + " ---: |"]
    for d in report["diagnostics"]:
        s = d.get("session_loss_points")
        lines.append(f"| {d['capacity']} ({d['capacity_blocks']:,} blocks) | {d['regime']} | "
                     f"{d['compute_gap_points']:+.2f} | {d['partial_node_gain_points']:+.2f} | "
                     f"{d['quick_demotion_gain_points']['hit_ratio']:+.2f} | "
                     + (f"{s['hit_ratio']:+.2f} / {s['compute_savings']:+.2f} | " if s else "")
                     + f"{d['belady_headroom_points']:+.2f} |")
    w = report["workload"]
    lines += ["", "## Workload", "", "| measure | value |", "| --- | --- |"]
    lines += [f"| {k} | {v:.4f} |" for k, v in w.items()]
    for m in ["uniform"] + [m for m in report["cost_models"] if m != "uniform"]:
        key = "hit ratio" if m == "uniform" else f"compute savings, cost model `{m}`"
        lines += ["", f"## Results: {key}", "", "| policy | " + " | ".join(heads) + " |",
                  "| --- |" + " ---: |" * len(heads)]
        for p, res in report["results"].items():
            vals = res["hit_ratio"] if m == "uniform" else res["compute_savings"][m]
            rates = res["sample_rate"]
            lines.append(f"| {p} | " + " | ".join(f"{v:.4f}" + ("" if r == 1.0 else f" (r={r:g})")
                                                   for v, r in zip(vals, rates)) + " |")
        if m in figure_paths:
            lines += ["", f"![{m}]({figure_paths[m].relative_to(out)})"]
    lines += pools.markdown(report.get("pool_sizing", []), report.get("tier", "")) + serving.markdown(
        report.get("serving"))
    if "tiers" in figure_paths:
        lines += ["", f"![pool sizing]({figure_paths['tiers'].relative_to(out)})"]
    if report["notes"]:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in report["notes"]]
    return "\n".join(lines) + "\n"


def _sessions_line(report: dict) -> str:
    src = report["trace"].get("sessions", "given")
    if src == "inferred":
        return " Session-level LRU replays sessions inferred from prefix chains (sim_core/traces/sessions.py)."
    if src == "none":
        return " The trace has no session ids: session-level eviction is not assessed (see the notes)."
    return ""


def draw(report: dict, out: Path, series: dict | None = None) -> dict[str, Path]:
    drawn = {}
    if series:  # advise with tiers: served ratio and TTFT over the pool size
        sizes, modes = axes({pool for _, pool in series})
        drawn["tiers"] = plot_tiers(series, {i: c["label"] for i, c in enumerate(report["capacities"])}, sizes,
                                    modes, list(range(len(report["capacities"]))), out / record.FIGURES / "tiers.png",
                                    f"{report['trace']['name']}: pool sizing")
    caps = report["capacities"]
    for m in report["cost_models"]:
        curves = {p: [{"capacity_gib": c["gib"], "capacity_blocks": c["blocks"], "hit_ratio": h, "compute_savings": s}
                      for c, h, s in zip(caps, res["hit_ratio"], res["compute_savings"][m])]
                  for p, res in report["results"].items()}
        drawn[m] = plot_cost_model(curves, out / record.FIGURES / f"curves_{m}.png",
                                   title=f"{report['trace']['name']} - cost model {m}", cost_model=m)
    return drawn


def metrics(report: dict) -> dict[str, float]:
    out = record.numbers({"workload": report["workload"]})
    for d in report["diagnostics"]:
        out.update(record.numbers({k: v for k, v in d.items() if k.endswith("_points")}, f"at_{d['capacity']}."))
    return out


# ------------------------------------------------------------------ command
def _prepare(inv):
    sim = inv.cfg.sim
    auto = str(sim.get("sample_rate")).strip().lower() == "auto"
    if sim.get("sample_rate") is not None and not auto and str(sim.hits) == "prefix":
        raise ConfigError("sim.hits=prefix is not defined on a sample: use sim.hits=block or "
                          "sim.sample_rate=null")
    uri = config.tracking_uri(inv)
    model = config.model_of(inv)
    costs = config.cost_models_of(inv, model)
    trace = config.load_trace(inv)
    if auto:  # as the sweep: sampled when the trace is large (sim_core.traces.sample.auto_rate)
        sim.sample_rate = None if str(sim.hits) == "prefix" else auto_rate(trace.n_accesses)
        log.info("sim.sample_rate=auto: %s", "exact replay" if sim.sample_rate is None
                 else f"sampled replay at r={sim.sample_rate:g}")
    caps, notes = choose_capacities(inv, trace, model)
    return (uri, model, costs, trace, caps, notes, pools.axis(inv.cfg, model, trace.block_tokens),
            serving.axis(inv.cfg, model, trace))


def main(argv: list[str]) -> int:
    started = config.start("advise", argv, SUMMARY, EXAMPLES, _prepare)
    if isinstance(started, int):
        return started
    inv, (uri, model, costs, trace, caps, notes, (tier_name, pool_axis, hardware), fleet) = started
    sim = inv.cfg.sim
    for n in notes:
        log.info("%s", n)
    for w in oversized_warnings(caps, trace.request_lengths, sim.mode):
        log.warning("%s", w)
    primary = primary_cost_model(costs, model.name)
    sessions, session_note = sessions_of(trace)
    if session_note:  # inferred sessions, or none at all: said before the replays start
        (log.warning if sessions == "none" else log.info)("%s", session_note)
    results = run_policies(trace, [c.blocks for c in caps], cost_models=costs, model=model, sim=sim,
                           policies=policies_for(trace))
    report = build(trace, caps, results, costs, primary, notes, sim)
    series = {}
    if pool_axis:
        series = pools.run(trace, [c.blocks for c in caps], pool_axis, sim=sim, model=model, hardware=hardware)
        report["tier"] = tier_name
        report["pool_sizing"] = pools.sizing(series, caps)
        rec = pools.recommendation(report["pool_sizing"])
        report["recommendations"] += [rec] if rec else []
    if fleet:  # fleet=...: the cheapest fleet meeting the SLO at each load, from stored results where there are
        kw = dict(model=model, seed=int(sim.get("seed", 0)))
        fl = with_tier_links(fleet[0], pool_axis, hardware)  # the tiers' links, as the sweep's
        pooled = pool_axis or [("", ())]  # tier=...: every pool under every replica
        known = Stored(inv.cfg, uri, config.experiment_of(inv, trace), trace, fl, fleet[1], serving.POLICIES,
                       pools=pooled, **kw)
        report["serving"], rec = serving.advise(trace, fl, *fleet[1:], stored=known, pools=pooled, **kw)
        report["recommendations"] = reconcile(report["recommendations"], report["serving"]) + [rec]
    print("\n".join(f"{i}. {r['topic'].replace('_', ' ')}: {r['verdict']}. {r['action']}\n   {r['because']}"
                    for i, r in enumerate(report["recommendations"], 1)) + "\n")
    if sessions == "none":
        print(f"granularity: left out: {NO_SESSIONS}.\n")
    config.publish(inv, uri, trace, report, kind="advice", title="advice for",
                   draw=lambda out: draw(report, out, series), markdown=markdown, metrics=metrics(report))
    return 0
