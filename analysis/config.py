"""What `python -m analysis characterize|advise` share with each other and with the sweep.

The config is conf/analysis.yaml, composed with Hydra's compose API from the sweep's own
groups (trace, capacity, cost, model, tracking), so `trace=...` and every trace option
mean what they mean in `python -m sweep`. The trace is loaded by sweep.traces, the model
and cost models are checked by sweep.spec, capacities are converted by sweep.plan, and
the tracking URI and its reachability come from sweep.store.
"""
from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from omegaconf import DictConfig, OmegaConf, open_dict

from sweep.cli import setup_logging as sweep_logging
from sweep.config import (ConfigError, check_bool, check_int, check_number, find_conf_dir, group_options,
    precheck_overrides, register_generated)
from sweep.schema import compose_error
from sweep.spec import resolve_costs, resolve_model
from sweep.store import TrackingUnavailable, check_reachable, default_uri, ui_command
from sweep.traces import check_trace_config, experiment_name, load, weeks

from . import record


log = logging.getLogger("analysis")

EXIT_CONFIG = 2
CONFIG_NAME = "analysis"


@dataclass
class Invocation:
    """One command line: the composed config and what it was composed from."""

    command: str
    cfg: DictConfig
    overrides: list[str]
    trace_choice: str
    notes: list[str] = field(default_factory=list)


def compose(command: str, argv: list[str]) -> Invocation:
    """The config for `argv` (Hydra overrides); ConfigError on anything invalid."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    conf_dir = find_conf_dir()
    precheck_overrides(argv, conf_dir)  # unknown trace=/cost=/... options, with the valid ones
    register_generated(conf_dir)  # cost=all
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3", job_name=command):
            cfg = hydra_compose(CONFIG_NAME, overrides=list(argv), return_hydra_config=True)
    except Exception as e:  # noqa: BLE001 - Hydra/OmegaConf errors are bad overrides
        raise ConfigError(compose_error(e) or f"{type(e).__name__}: {e}".splitlines()[0]) from None
    finally:
        GlobalHydra.instance().clear()
    choice = str(cfg.hydra.runtime.choices.get("trace", "trace"))
    with open_dict(cfg):
        del cfg["hydra"]
    inv = Invocation(command=command, cfg=cfg, overrides=list(argv), trace_choice=choice)
    _check(inv)
    return inv


def _check(inv: Invocation) -> None:
    cfg = inv.cfg
    check_trace_config(cfg.trace, inv.trace_choice)
    if OmegaConf.is_missing(cfg.tracking, "uri"):
        raise ConfigError("tracking=server needs tracking.uri=http://host:5000")
    a = cfg.analysis
    check_bool(a.get("figures", True), "analysis.figures")
    check_bool(cfg.tracking.get("offline", False), "tracking.offline")
    s = cfg.sim
    check_int(s.get("seed", 0), "sim.seed", 0)
    check_int(s.get("sample_seed", 0), "sim.sample_seed", 0)
    if str(s.get("sample_rate")).strip().lower() != "auto":
        rate = check_number(s.get("sample_rate"), "sim.sample_rate", allow_none=True,
                            none_means="exact replay; or auto")
        if rate is not None and rate > 1:
            raise ConfigError(f"sim.sample_rate must be in (0, 1], null (exact replay) or auto, got {rate}")


def help_text(command: str, summary: str, examples: list[str]) -> str:
    """--help: what the command does, examples, the groups, and the default config."""
    conf_dir = find_conf_dir()
    groups = "\n".join(f"  {g:<9} {', '.join(group_options(g, conf_dir))}"
                       for g in ("trace", "capacity", "cost", "model", "tier", "hardware", "fleet", "tracking", "prices",
                                 "cluster"))
    try:
        default = OmegaConf.to_yaml(compose(command, []).cfg, resolve=False)
    except ConfigError as e:
        default = f"(cannot compose the default config: {e})\n"
    return (f"python -m analysis {command} [group=option ...] [key=value ...]\n\n{summary.strip()}\n\n"
            "Examples:\n" + "".join(f"  python -m analysis {command} {e}\n" for e in examples) +
            "\nOverrides are Hydra's, as in `python -m sweep` (see its --help for every trace option).\n"
            f"Groups (group=option):\n{groups}\n\n== Default config (conf/{CONFIG_NAME}.yaml) ==\n{default}")


def setup_logging(cfg: DictConfig) -> None:
    level = str(cfg.analysis.get("log_level", "INFO")).upper()
    sweep_logging(level)  # the trace loader logs as "sweep"
    log.setLevel(level)


def load_trace(inv: Invocation):
    t = load(inv.cfg.trace, inv.trace_choice)
    if weeks(inv.cfg.trace) > 1:  # a characterization is of one week; sweeps average the weeks
        log.info("trace.weeks=%d: the analysis reads the first week only (a sweep replays all %d back to back)",
                 weeks(inv.cfg.trace), weeks(inv.cfg.trace))
    log.info("trace %s (%s): %d requests, %d block accesses, %d unique %d-token blocks", t.name, t.source,
             t.n_requests, t.n_accesses, t.n_unique, t.block_tokens)
    return t


def replay_kwargs(sim) -> dict:
    """simulate()'s replay switches from the `sim:` of conf/analysis.yaml."""
    return dict(mode=str(sim.mode), hits=str(sim.hits), order=None if sim.get("order") is None else str(sim.order),
                seed=int(sim.get("seed", 0)), sample_rate=sim.get("sample_rate"),
                sample_seed=int(sim.get("sample_seed", 0)))


def model_of(inv: Invocation):
    return resolve_model(inv.cfg)


def cost_models_of(inv: Invocation, model) -> list[str]:
    return resolve_costs(inv.cfg, model)


def experiment_of(inv: Invocation, trace) -> str:
    """The sweep's experiment for this trace: the analysis runs sit next to its sweeps."""
    return experiment_name(trace, inv.cfg.tracking.get("experiment"))


def out_dir(inv: Invocation, experiment: str) -> Path:
    out = inv.cfg.analysis.get("out")
    path = Path(str(out)).expanduser() if out else Path("kvsweep-analysis") / experiment / inv.command
    return path.resolve()


def tracking_uri(inv: Invocation) -> str | None:
    """The MLflow store (None: tracking.offline=true). A server that does not answer
    raises sweep.store.TrackingUnavailable within seconds, before any work."""
    tc = inv.cfg.tracking
    if tc.get("offline", False):
        return None
    uri = str(tc.uri) if tc.get("uri") else default_uri()
    check_reachable(uri)
    return uri


def start(command: str, argv: list[str], summary: str, examples: list[str],
          prepare: Callable[[Invocation], Any]) -> tuple[Invocation, Any] | int:
    """The configuration part of `python -m analysis <command>`: --help, composition,
    logging, then `prepare(inv)` (the command's own checks and loading) under the same
    error handling. Returns (inv, what prepare returned), or the exit status when there
    is nothing more to do: 0 after --help, EXIT_CONFIG after a configuration error."""
    if any(a in ("-h", "--help") for a in argv):
        print(help_text(command, summary, examples))
        return 0
    try:
        inv = compose(command, argv)
        setup_logging(inv.cfg)
        return inv, prepare(inv)
    except (ConfigError, TrackingUnavailable, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_CONFIG


def publish(inv: Invocation, uri: str | None, trace, report: Mapping, *, kind: str, title: str,
            draw: Callable[[Path], dict], markdown: Callable[[Mapping, dict, Path], str],
            metrics: Mapping[str, float]) -> str | None:
    """Write a command's report (report.md, report.json and, unless analysis.figures is
    false, the figures `draw(out)` makes) into its directory, say where (`title` of the
    trace), and log it as one MLflow run unless tracking is offline (uri None). Returns the
    run's id (None offline)."""
    experiment = experiment_of(inv, trace)
    out = out_dir(inv, experiment)
    record.clear_figures(out)
    drawn = draw(out) if inv.cfg.analysis.get("figures", True) else {}
    record.write(out, report, markdown(report, drawn, out))
    print(f"{title} {trace.name}: {out / record.REPORT_MD}")
    if uri is not None:
        rid = record.log_run(uri, experiment, kind=kind, command=inv.command, trace=trace, cfg=inv.cfg,
                             overrides=inv.overrides, metrics=metrics, out=out,
                             artifact_location=inv.cfg.tracking.get("artifact_location"))
        print(f"MLflow experiment {experiment!r}, run {rid}; view it: {ui_command(uri)}")
        return rid
    return None
