"""`python -m analysis plan`: the cheapest deployment that meets an SLO on the trace at its load.

Searches `plan.space` (GPU parts, tensor parallelism, prefill and decode replicas,
routers, eviction policies; measured step times with plan.step_model=measured) with
analysis.planner, replaying candidates as jobs on the sweep's runner (plan.runner=ray:
cluster=local starts Ray here, cluster=ray joins one) with the sweep's journal
(tracking.journal): every result is journaled as it arrives, and a re-run of the same
command replays nothing already journaled. Prints the answer, writes report.md, report.json
and figures/front.png to analysis.out, and logs one MLflow run (tag kvsweep.kind=plan) with
each replayed candidate as a child run.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

from omegaconf import OmegaConf

from sweep import signals
from sweep.config import ConfigError
from sweep.journal import Journal

from .. import config
from . import report
from .plan import problem, solve
from .runner import Keys, LazyRay, LocalEvaluator, journaled

log = logging.getLogger("analysis")

SUMMARY = """\
The cheapest deployment that meets your SLO on your trace at its load: searches the
candidates of plan.space (GPU parts, tensor parallelism, aggregated or disaggregated
shapes, replicas, routers, eviction policies) with sim_core.serve, replaying as few as it
takes (a prefill bound, bisection over replicas, dominance by cheaper candidates), prices
them with conf/prices/default.yaml (override: prices.gpu.<part>=...), and prints the
deployment, its cost per hour, its SLO values and margin, its reuse and gap to the fleet
ceiling, the runner-up of each other shape (each GPU, aggregated or disaggregated), and
what the SLO costs at plan.check_load x the load. Replays run on the sweep's runner and
journal: an interrupted plan resumes where it stopped. docs/planning.md explains the search."""

EXAMPLES = ["trace=mooncake_conversation",
            "trace=mooncake_conversation plan.slo.ttft_p99=1500ms plan.slo.tpot_mean=20ms",
            "trace=mooncake_conversation plan.engine=vllm 'plan.space.gpu=[h100_sxm,h200]' 'plan.space.policy=[lru,s3fifo]'",
            "trace=mooncake_conversation plan.arrival_speedup=2 prices.gpu.h100_sxm=2.1 plan.runner=local",
            "trace=mooncake_conversation 'plan.space.prefill_replicas=[0,1,2]' plan.space.replicas=1..8",
            "trace=mooncake_conversation plan.engine=vllm plan.step_model=measured plan.model=Qwen/Qwen3-30B-A3B"]

KEYS = ("slo", "arrival_speedup", "request_rate", "engine", "engine_overrides", "step_model", "backend", "model",
        "capacity_blocks", "space", "check_load", "tolerance", "runner", "seed")


def _prepare(inv: config.Invocation):
    pc = OmegaConf.to_container(inv.cfg.plan, resolve=True)
    unknown = sorted(set(pc) - set(KEYS))
    if unknown:
        raise ConfigError(f"plan has no key {unknown[0]!r}; valid: {', '.join(KEYS)}")
    if pc.get("runner") not in ("ray", "local"):
        raise ConfigError(f"plan.runner must be ray or local, got {pc.get('runner')!r}")
    if OmegaConf.is_missing(inv.cfg.cluster, "address"):
        raise ConfigError("cluster=ray needs cluster.address=<head>:6379")
    over = pc.get("engine_overrides") or {}
    if not isinstance(over, dict):
        raise ConfigError(f"plan.engine_overrides must map engine keys to values, got {over!r}")
    uri = config.tracking_uri(inv)
    trace = config.load_trace(inv)
    prices = OmegaConf.to_container(inv.cfg.prices, resolve=True)
    try:
        pb = problem(trace, pc.get("slo") or {}, pc.get("space"), pc.get("capacity_blocks"),
                     {"preset": str(pc.get("engine") or "dynamo"), **over}, arrival_speedup=pc.get("arrival_speedup"),
                     request_rate=pc.get("request_rate"), prices=prices,
                     model=pc.get("model") or inv.cfg.model.get("name"), step_model=pc.get("step_model"),
                     backend=pc.get("backend"), seed=int(pc.get("seed") or 0), check_load=pc.get("check_load"),
                     tolerance=float(pc.get("tolerance") or 0.0))
    except ValueError as e:  # the planner names the field without its config prefix: add it
        raise ConfigError(_prefixed(str(e))) from None
    return uri, trace, pb, str(pc["runner"])


def _prefixed(msg: str) -> str:
    for k in ("slo", "space", "capacity_blocks", "check_load", "tolerance", "arrival_speedup", "request_rate",
              "engine", "step_model", "backend", "model"):
        if msg.startswith(k):
            return "plan." + msg
    return msg


def main(argv: list[str]) -> int:
    started = config.start("plan", argv, SUMMARY, EXAMPLES, _prepare)
    if isinstance(started, int):
        return started
    inv, (uri, trace, pb, runner) = started
    journal = Journal(Path(str(inv.cfg.tracking.get("journal") or "kvsweep-journal.jsonl")).expanduser().resolve())
    experiment = config.experiment_of(inv, trace)
    keys = Keys(trace, pb.setting)
    cands = pb.candidates()
    known = journaled(journal, keys, pb.setting, cands, pb.loads())
    if known:
        log.info("resume: %d replays of this plan's candidates are already in the journal (%s)", len(known), journal.path)
    log.info("plan over %s at %gx load; SLO %s", pb.space.describe(), pb.load, pb.slo.text())
    signals.install()
    try:
        if runner == "ray":
            with LazyRay(inv.cfg.cluster, trace, pb.setting, cands, journal, keys, uri=uri, experiment=experiment) as ev:
                p = solve(trace, pb, ev, known)
        else:
            p = solve(trace, pb, LocalEvaluator(trace, pb.setting, journal, keys, uri=uri, experiment=experiment), known)
    except KeyboardInterrupt as e:
        sig = signals.as_interrupted(e)
        signals.handled()
        print(f"interrupted ({sig}): every finished replay is in the journal ({journal.path}); run the same "
              f"command again to resume", file=sys.stderr)
        return sig.exit_code
    print(report.text(p, trace.name) + "\n")
    rid = config.publish(inv, uri, trace, report.to_dict(p, trace.name), kind="plan", title="plan for",
                         draw=lambda out: report.draw_front(p, out),
                         markdown=lambda rep, drawn, out: report.markdown(p, trace.name, drawn),
                         metrics=report.metrics(p))
    if rid is not None:
        report.log_candidates(uri, rid, p)
    return 0
