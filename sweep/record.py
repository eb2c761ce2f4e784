"""The record step of a sweep (docs/concepts.md: configure -> load -> plan -> run -> record): the
MLflow runs a sweep opens before its jobs run, and how it ends them. Functions over one
`sweep.study.Study`; every result reaches MLflow through sweep.delivery, after the journal.
"""
from __future__ import annotations

import datetime as _dt
import logging
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from omegaconf import OmegaConf

from sim_core import get_policy, saturation_capacity

from . import partial, traces
from .config import ConfigError
from .curves import SweepFacts, curves_by_model
from .delivery import Delivery
from .keys import sweep_key
from .metrics import MAX_TAG
from .plan import counted, pool_count
from .report.families import pool_parts
from .report.sizing import BOUND, tier_table
from .report.tables import serving_table, summary_table
from .serving import SERVE
from .report.windows import ranking, ranking_text, window_rows
from .store import experiment_url
from .tracking import Tracker
from .views import COLOUR_TAG, curve_colours

log = logging.getLogger("sweep")

NOTE = "mlflow.note.content"  # MLflow shows this tag as the run's Description

REPO = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------- start
def open_tracking(st) -> None:
    if st.uri is None:
        log.warning("offline: results go to the journal %s only; re-run the same command with a "
                    "tracking store to record them in MLflow (nothing is recomputed)", st.journal.path)
        return
    st.tracker = Tracker(st.uri, st.experiment, st.cfg.tracking.get("artifact_location"))
    stale = st.tracker.mark_stale()
    if stale:
        log.warning("found %d run(s) left RUNNING by a sweep whose driver is gone: marked KILLED "
                    "(their finished results are reused)", len(stale))


def start_runs(st) -> None:
    """The parent run (new, or the same sweep's earlier one) and a run per curve."""
    if st.tracker is None:
        return
    key = sweep_key([c.key for c in st.curves])
    live = st.tracker.live_sweep(key)
    if live is not None:
        raise ConfigError(f"the same sweep is running now (run {live.info.run_id}, pid "
                          f"{live.data.tags.get('kvsweep.driver_pid')} on {live.data.tags.get('kvsweep.driver_host')}); "
                          f"wait for it, or stop it first")
    params, tags, metrics, texts = _parent_record(st)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    pid, resumed = st.tracker.start_parent(run_name=sweep_name(st, stamp), sweep_key=key, params=params, tags=tags,
                                           metrics=metrics, texts=texts, capacities=st.caps)
    log.info("MLflow: experiment %r, %s run %s (%s)", st.experiment, "resumed sweep" if resumed else "sweep",
             pid, st.uri)
    pols = {p.name: p for p in st.spec.policies}
    colour = curve_colours(st.curves)
    for c in st.curves:
        p, ps = pols[c.policy], get_policy(c.policy)
        replay = st.fleet.params(c.route) if st.fleet else {"mode": str(st.spec.mode), "hits": str(st.spec.hits),
                                                     "order": str(st.spec.order),
                                                     **{f"sim.{k}": v for k, v in st.spec.counting.items()},
                                                     **({"sim.counting": st.spec.counting_preset}
                                                        if st.spec.counting_preset else {})}
        st.tracker.open_curve(c, {"trace": st.trace.name, **replay,
                                  "model": st.spec.model.name, "block_tokens": st.trace.block_tokens,
                                  "cost_aware": p.cost_aware, "offline": p.offline,
                                  **({"tier": st.spec.tier_name, "tier_rules": st.spec.tier_rules,
                                      "pool_gib": pool_gib(st, c.pool)}
                                     if c.pool else {}),
                                  **({"hardware": st.spec.hardware.get("part")}
                                     if st.spec.hardware and not st.fleet else {}),
                                  **{f"params.{k}": v for k, v in p.params.items()}},
                              {"trace_source": st.trace.source, "family": ps.family,
                               "cost_aware": str(p.cost_aware).lower(), "offline": str(p.offline).lower(),
                               "sampled": f"r={c.identity.sample[0]:g}" if c.identity.sample else "false",
                               COLOUR_TAG: colour[c.label],
                               **({"counting": st.spec.counting_preset} if st.spec.counting_preset else {}),
                               **(st.fleet.tags(c.route) if st.fleet else {})},
                              run_name=f"{c.label} | {c.cost_model}" + (f" | counting={st.spec.counting_preset}"
                                                                        if st.spec.counting_preset else ""))
    st.delivery = Delivery(st.tracker, st.journal, st.uri)
    for c in st.curves:  # known results the run lacks (journal, another capacity list)
        missing = {i: r for i, r in c.rows.items() if i not in c.stored}
        if missing or (c.status != "REUSED" and len(c.rows) == len(st.caps)):
            st.delivery.points(c, missing)


def _parent_record(st) -> tuple[dict, dict, dict, dict]:
    summary, summary_text = traces.summarize(st.trace)
    sha, dirty = _git_commit(REPO)
    tags = {"trace_source": st.trace.source, "trace": st.trace.name, "mlflow.source.name": "python -m sweep",
            "sampled": "false" if st.spec.sample_rate is None else f"r={st.spec.sample_rate:g}",
            "overrides": " ".join(st.overrides) or "(defaults)",
            **{f"version.{k}": v for k, v in _versions().items()}}
    if sha:
        tags.update({"git_commit": sha, "mlflow.source.git.commit": sha, "git_dirty": str(dirty).lower()})
    if st.cap_notes:
        tags["capacity_dedup"] = "; ".join(st.cap_notes)[:5000]
    if st.spec.counting_preset:  # sim.counting: the runs are this preset's own
        tags["counting"] = st.spec.counting_preset
    if st.fleet is not None:  # the report names the engine (sweep.report.sweeps reads it back)
        tags["kvsweep.fleet"] = f"fleet={st.fleet.name}: {st.fleet.describe()}"
    if st.spec.tiers:  # the report names the tiers' rules (sweep.report.sweeps reads it back)
        tags["kvsweep.tier_rules"] = tier_rules(st)
    tags["kvsweep.setup"] = setup(st)  # the report's header (sweep.report.sweeps reads it back)
    if st.warnings:
        tags["kvsweep.warnings"] = "\n".join(st.warnings)[:5000]
    tags[NOTE] = description(st)
    resolved = OmegaConf.to_container(st.cfg, resolve=True, enum_to_str=True)
    params = traces.flatten(resolved)
    params.update({"capacities_blocks": [c.blocks for c in st.caps],
                   "capacities_gib": [round(c.gib, 6) for c in st.caps],
                   "n_capacities": len(st.caps), "policies": [p.name for p in st.spec.policies],
                   "cost_models": st.spec.cost_models})
    params.update({f"trace_summary.{k}": v for k, v in summary.items() if not isinstance(v, (int, float))})
    metrics = {f"trace.{k}": v for k, v in summary.items() if isinstance(v, (int, float))}
    metrics["saturation_blocks"] = saturation_capacity(st.trace)  # the report zooms below it
    texts = {"config.yaml": OmegaConf.to_yaml(resolved)}
    if summary_text:
        texts["trace_summary.txt"] = summary_text
    return params, tags, metrics, texts


# ---------------------------------------------------------------------- end
def finish(st, status: str, wait_s: float) -> str:
    """End every run with `status` (incomplete curves: KILLED/FAILED), waiting up to
    `wait_s` for MLflow to take what is queued. Returns the final status."""
    if st.delivery is None:  # stopped before results could flow (while the runs were being opened)
        if status == "KILLED":
            partial.drop_empty(st)
            partial.close_open(st)
        return status
    for c in st.curves:
        if len(c.rows) < len(st.caps):
            st.delivery.finish(c, "KILLED" if status in ("KILLED", "FINISHED") else status)
    if st.delivery.backlog:
        log.info("waiting for MLflow to take %d queued update(s) (up to %.0fs)", st.delivery.backlog, wait_s)
    left = st.delivery.drain(wait_s)
    st.delivery.stop()
    if left:
        log.error("MLflow did not take %d result batch(es) in %.0fs: they are safe in %s; "
                  "`python -m sweep.sync` sends them (or re-run the same command)", left, wait_s, st.journal.path)
        status = "FAILED" if status == "FINISHED" else status

    if status == "KILLED" and partial.drop_empty(st) and st.tracker.parent_id is None:
        return status  # nothing ran: the sweep run went too
    if partial.summary(st):
        st.tracker.set_parent_tag(partial.TAG, partial.summary(st))
    if st.work:
        st.tracker.log_parent_metrics({f"work.{k}": v for k, v in st.work.items()})
    rows, rank = [], []
    if st.spec.counting.get("window") is not None:
        rows = window_rows(st.curves, st.caps)
        rank = ranking(rows)
        st.tracker.log_parent_rows({"windows.csv": rows, "window_ranking.csv": rank})
    # report.html draws both (and plots/tiers.png for a tiered sweep) from these
    text, work = summary_text(st), work_line(st)
    st.tracker.log_parent_text("summary.txt", text + (f"\n\n{work}" if work else "") + "\n")
    st.views = st.tracker.write_views(st.curves, experiment_url(st.uri, st.tracker.experiment_id))
    here = {m: "#" + u.split("#", 1)[1] for m, u in st.views.items()}  # whatever host and port the UI has
    st.tracker.set_parent_tag(NOTE, description(st, text, work, here))
    st.tracker.close_parent(status, st.curves, SweepFacts(
        trace_source=st.trace.source, saturation_blocks=saturation_capacity(st.trace),
        sample_rate=st.spec.sample_rate, cost_models=st.spec.cost_models, references=st.references,
        windows=rows, window_ranking=rank,
        fleet=f"fleet={st.fleet.name}: {st.fleet.describe()}" if st.fleet else "", tier_rules=tier_rules(st),
        setup=setup(st), warnings=tuple(st.warnings), partial=partial.summary(st)))
    return status


def tier_rules(st) -> str:
    """Which tier config a tiered sweep ran, with whose rules ("" without tiers)."""
    return f"tier={st.spec.tier_name}, the rules of {st.spec.tier_rules}" if st.spec.tiers else ""


def pool_gib(st, pool: str) -> float:
    """The lower tiers' size of a pool label in GiB (all tiers together), a number a chart
    can plot (the label is text)."""
    tiers = next((t for label, t in st.pools if label == pool or pool_parts(label)[0] == pool), ())
    per_block = st.caps[0].gib / st.caps[0].blocks if st.caps else 0.0
    return round(sum(int(t.get("capacity", 0)) for t in tiers) * per_block, 6)


def sweep_name(st, stamp: str) -> str:
    """The sweep run's name: what it is (trace; flat, tiers or fleet; counting preset; windows;
    sampling), then when it started."""
    parts = [st.trace.name]
    if st.fleet is not None:
        parts.append(f"fleet={st.fleet.name}")
    elif st.spec.tiers:
        parts.append(f"tier={st.spec.tier_name} ({st.spec.tier_rules})")
    else:
        parts.append("flat")
    if st.spec.counting_preset:
        parts.append(f"counting={st.spec.counting_preset}")
    if st.spec.counting.get("window") is not None:
        parts.append(f"window={st.spec.counting['window']}")
    if st.spec.sample_rate is not None:
        parts.append(f"r={st.spec.sample_rate:g}")
    return " | ".join(parts + [stamp])


def setup(st) -> str:
    """One line: the counting, hierarchy and hardware a sweep replays, or the fleet it serves
    (the report's header)."""
    parts = []
    preset = st.spec.counting_preset
    if st.fleet is None:  # a serving replay counts as its engine does: no counting preset applies
        parts.append(f"counting preset sim.counting={preset} (docs/engines.md)" if preset
                     else "the paper's counting (no counting preset)")
    if st.fleet is not None:
        parts.append(f"fleet={st.fleet.name}: {st.fleet.describe()}")
    elif st.spec.tiers:
        parts.append(f"tiers: HBM above {tier_rules(st)}; {pool_count(st.pools)}")
    else:
        parts.append("one tier (HBM or one pool of the capacity swept)")
    if st.spec.hardware:
        parts.append(f"hardware={st.spec.hardware.get('part')} (TTFT: service time, no queueing)")
    return "; ".join(parts)


def _counts(st) -> str:
    pols = [p.name for p in st.spec.policies if p.name != BOUND]
    caps = f"{counted(len(st.caps), 'capacity', 'capacities')} ({st.caps[0].label}..{st.caps[-1].label})" \
        if st.caps else "no capacities"
    bound = f" (+ {BOUND} [oracle], the hierarchy's bound)" if len(pols) < len(st.spec.policies) else ""
    return f"{counted(len(pols), 'policy', 'policies')}{bound} x {caps}"


#: Room the Description keeps below MLflow's limit on a tag (MAX_TAG) for its fence and note.
NOTE_MARGIN = 200


def description(st, table: str | None = None, work: str | None = None, views: dict | None = None) -> str:
    """The sweep run's Description in MLflow (markdown): what the run is, links to its
    views (sweep.views: every policy's curve per cost model, ranked), where the report is;
    at the end, the tables the sweep printed, as many whole sections as fit under MLflow's
    limit (MAX_TAG), always in a closed code fence; all of them are in summary.txt."""
    what = (f"**{'Serving sweep' if st.fleet else 'Sweep'} of `{st.trace.name}`** ({st.trace.source} trace): "
            f"{_counts(st)}")
    if st.fleet is not None:
        loads = ", ".join(f"{x:g}x" for x in st.fleet.loads)
        what += (f" of KV cache per replica x loads {loads} (arrival_speedup) x routes "
                 f"{', '.join(r.label for r in st.fleet.routes)} (router x replicas).")
    else:
        what += (f" x {pool_count(st.pools)}" if st.spec.tiers else "") + \
            f" x cost models {', '.join(st.spec.cost_models)}."
    lines = [what, "", f"Setup: {setup(st)}."]
    lines += [f"**Warning:** {w}" for w in st.warnings]
    if views and st.fleet is not None:
        lines += ["", "**Views** (MLflow's Chart view, one per load: every configuration's TTFT p99 on a log axis, "
                      "reuse and goodput over the KV cache per replica, x = Step = capacity in MiB, in the report's "
                      "colours): " + " | ".join(f"[{m}]({u})" for m, u in views.items())]
    elif views:
        lines += ["", "**Views** (MLflow's Chart view, ready to read: every curve of one cost model over capacity on "
                      "a log axis, x = Step = capacity in MiB; the runs table ranked by the report's ranking, with "
                      "its columns): " + " | ".join(f"[{m}]({u})" for m, u in views.items())]
    else:
        lines += ["", "**Views**: written when the sweep ends (links here then)."]
    report = ("the answer first (per load, the cheapest fleet meeting the SLO, its p99 and margin, its reuse and gap "
              "to the ceiling there), then TTFT and goodput over the KV cache, p99 per capacity and routing"
              if st.fleet else "the curves, a ranking per regime and what they say")
    lines += ["", f"- **report.html** (Artifacts, below): {report}; "
                  "`python -m analysis report <this run id>` writes it again.",
              "- **summary.txt** (Artifacts): every table the sweep printed; **curves.csv**: every curve, one row "
              "per capacity.",
              "- **Curves**: one child run per " + ("policy, load and route" if st.fleet else
                                                    "policy" + (", pool" if st.spec.tiers else "") + " and cost model")
              + "; `curve/<metric>` with step = capacity in MiB."]
    head = "\n".join(lines)
    if not table:
        return head
    body = table + (f"\n\n{work}" if work else "")
    room = MAX_TAG - NOTE_MARGIN - len(head)
    blocks, kept = body.split("\n\n"), []
    for b in blocks:
        if sum(len(k) + 2 for k in kept) + len(b) > room:
            break
        kept.append(b)
    cut = len(kept) < len(blocks)
    return "\n".join([head, "", "As the sweep printed it" + (" (the first sections; the rest: summary.txt)" if cut
                                                             else "") + ":", "", "```", "\n\n".join(kept), "```"])


def summary_text(st) -> str:
    """Every table the sweep prints, headed by partial.note when it lacks results."""
    head = partial.note(st)
    return (head + "\n\n" if head else "") + _tables(st, bool(head))


def _tables(st, cut_short: bool) -> str:
    points = int(st.cfg.sweep.get("summary_points") or 4)
    if st.fleet is not None:
        title = (f"serving under load: {st.trace.name} ({st.trace.n_requests:,} requests, {st.trace.block_tokens}-"
                 f"token blocks), fleet={st.fleet.name}: {st.fleet.describe()}")
        return serving_table(curves_by_model(st.caps, st.curves).get(SERVE, {}), st.caps, points,
                             [p.name for p in st.spec.policies], title, partial=partial.text(st) if cut_short else "")
    text = summary_table(curves_by_model(st.caps, st.curves), st.caps, points,
                         [p.name for p in st.spec.policies], st.spec.cost_models, st.spec.sample_rate,
                         saturation_capacity(st.trace))
    if st.spec.tiers and len(st.pools) > 1:
        text += "\n\n" + tier_table(st.curves, st.caps, points)
    if st.spec.counting.get("window") is not None:
        shown = st.spec.cost_models[-1]  # the model-derived cost when swept
        text += "\n\n" + ranking_text(ranking(window_rows(st.curves, st.caps)), shown)
    return text


def work_line(st) -> str | None:
    """The work this sweep did (the same figures are on its MLflow run, work.*)."""
    w = st.work
    if not w:
        return None
    cut = w["jobs"] < w.get("jobs_planned", w["jobs"])  # stopped, or jobs failed: what ran, of what was planned
    jobs = f"{w['jobs']} of {w['jobs_planned']} jobs" if cut else f"{w['jobs']} jobs"
    stop = f" ({partial.why(st) or 'cut short'})" if cut else ""
    if st.fleet is not None:
        calls = (f"{w['replays']} of {w['replays_planned']} serve() calls" if w.get("replays_planned") is not None
                 and w["replays"] < w["replays_planned"] else f"{w.get('replays', 0)} serve() calls")
        return (f"work{stop}: {jobs} ran {calls} (policy x load x route x capacity) in {w['jobs_wall_s']:.0f}s "
                f"wall, {w['actor_cpu_s']:.0f} CPU-s in the actors")
    return (f"work{stop}: {jobs} replayed {w['accesses_replayed']:.4g} block accesses in "
            f"{w['jobs_wall_s']:.0f}s wall, {w['actor_cpu_s']:.0f} CPU-s in the actors")


# ---------------------------------------------------------------------- helpers
def _git_commit(repo: Path) -> tuple[str | None, bool]:
    try:
        sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip() != ""
        return sha or None, dirty
    except (OSError, subprocess.SubprocessError):
        return None, False


def _versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0]}
    for pkg in ("kvcache-sweep", "numpy", "numba", "ray", "mlflow", "hydra-core", "omegaconf"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out
