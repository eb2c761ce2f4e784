"""`python -m sweep`: compose the config, load the trace, plan, run on Ray, log to MLflow."""
from __future__ import annotations

import datetime as _dt
import logging
import os
import signal
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from .config import ConfigError, find_conf_dir, precheck_overrides, register_generated

log = logging.getLogger("sweep")

EXIT_CONFIG = 2
EXIT_FAILED = 1
EXIT_KILLED = 130


def setup_logging(level: str = "INFO") -> None:
    root = logging.getLogger()
    if not any(getattr(h, "_kvsweep", False) for h in root.handlers):
        from tqdm.contrib.logging import _TqdmLoggingHandler  # writes around the progress bar

        h = _TqdmLoggingHandler()
        h.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(message)s", "%H:%M:%S"))
        h._kvsweep = True  # type: ignore[attr-defined]
        root.addHandler(h)
    root.setLevel(logging.WARNING)  # third-party INFO chatter (Ray, MLflow, numba) stays quiet
    from .tracking import quiet_mlflow

    quiet_mlflow()
    log.setLevel(str(level).upper())
    for name in ("ray", "mlflow", "alembic", "numba", "matplotlib", "urllib3", "filelock"):
        logging.getLogger(name).setLevel(logging.WARNING)


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


def _flatten(d, prefix: str = "") -> dict:
    out = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
    else:
        out[prefix[:-1]] = d
    return out


def run(cfg) -> int:
    """The sweep. Returns the process exit status."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from sim_core import saturation_capacity

    from . import traces
    from .plan import format_plan, make_plan, oversized_warnings, resolve_capacities
    from .spec import resolve
    from .tracking import default_uri, sqlite_path, ui_command

    setup_logging(cfg.sweep.get("log_level", "INFO"))
    hc = HydraConfig.get()
    trace_choice = hc.runtime.choices.get("trace", "trace")

    # ---- everything that can be checked without work
    try:
        spec = resolve(cfg, hc.runtime.choices.get("policy", "all"))
        traces.check_trace_config(cfg.trace, trace_choice)
        if OmegaConf.is_missing(cfg.tracking, "uri"):
            raise ConfigError("tracking=server needs tracking.uri=http://host:5000")
        if OmegaConf.is_missing(cfg.cluster, "address"):
            raise ConfigError("cluster=ray needs cluster.address=ray://head:10001 (or auto on a cluster node)")
        uri = str(cfg.tracking.uri) if cfg.tracking.get("uri") else default_uri()
    except ConfigError as e:
        log.error("%s", e)
        return EXIT_CONFIG
    for note in spec.notes:
        log.info("%s", note)

    # ---- trace and capacities
    try:
        trace = traces.load(cfg.trace, trace_choice)
        caps, cap_notes = resolve_capacities(spec.capacity_sizes, spec.model, trace.block_tokens)
    except (ConfigError, ValueError, OSError) as e:
        log.error("%s", e)
        return EXIT_CONFIG
    log.info("trace %s (%s): %d requests, %d block accesses, %d unique %d-token blocks",
             trace.name, trace.source, trace.n_requests, trace.n_accesses, trace.n_unique, trace.block_tokens)
    for note in cap_notes:
        log.info("capacity dedup: %s", note)
    for w in oversized_warnings(caps, trace.request_lengths):
        log.warning("%s", w)

    sim_kwargs = {"mode": spec.mode, "hits": spec.hits, "model": spec.model, "seed": spec.seed}
    sweep_cfg = cfg.sweep
    plan_kw = dict(shards_per_worker=int(sweep_cfg.get("shards_per_worker") or 3),
                   max_capacities_per_job=sweep_cfg.get("max_capacities_per_job"),
                   max_request_blocks=trace.max_request_blocks if spec.mode == "request" else 0,
                   saturation_blocks=saturation_capacity(trace))
    n_sat = sum(1 for c in caps if c.blocks >= plan_kw["saturation_blocks"])
    if n_sat > 1:
        log.info("%d of %d capacities hold the whole trace (>= %d blocks): no policy evicts there, "
                 "so each curve replays them once", n_sat, len(caps), plan_kw["saturation_blocks"])

    if sweep_cfg.get("dry_run"):
        workers = int(cfg.cluster.get("actors") or cfg.cluster.get("num_cpus") or os.cpu_count() or 1)
        jobs = make_plan(spec.policies, spec.cost_models, caps, trace.n_accesses, workers, **plan_kw)
        print(format_plan(jobs, caps))
        print(f"dry run: {len(jobs)} jobs for {workers} worker(s); nothing was run or logged")
        return 0

    from .runner import RayRunner, SweepFailed
    from .tracking import Tracker

    exp_name = traces.experiment_name(trace, cfg.tracking.get("experiment"))
    summary, summary_text = traces.summarize(trace)
    tracker = Tracker(uri, exp_name, cfg.tracking.get("artifact_location"))
    repo = Path(__file__).resolve().parent.parent
    sha, dirty = _git_commit(repo)
    tags = {"trace_source": trace.source, "trace": trace.name, "mlflow.source.name": "python -m sweep",
            "overrides": " ".join(hc.overrides.task) or "(defaults)",
            **{f"version.{k}": v for k, v in _versions().items()}}
    if sha:
        tags.update({"git_commit": sha, "mlflow.source.git.commit": sha, "git_dirty": str(dirty).lower()})
    if cap_notes:
        tags["capacity_dedup"] = "; ".join(cap_notes)[:5000]
    resolved = OmegaConf.to_container(cfg, resolve=True)
    params = _flatten(resolved)
    params.update({"capacities_blocks": [c.blocks for c in caps],
                   "capacities_gib": [round(c.gib, 6) for c in caps],
                   "n_capacities": len(caps), "policies": [p.name for p in spec.policies],
                   "cost_models": spec.cost_models})
    params.update({f"trace_summary.{k}": v for k, v in summary.items() if not isinstance(v, (int, float))})
    metrics = {f"trace.{k}": v for k, v in summary.items() if isinstance(v, (int, float))}
    texts = {"config.yaml": OmegaConf.to_yaml(resolved)}
    if summary_text:
        texts["trace_summary.txt"] = summary_text
    child_params = {
        p.name: {"trace": trace.name, "mode": spec.mode, "hits": spec.hits, "model": spec.model.name,
                 "block_tokens": trace.block_tokens, "cost_aware": p.cost_aware, "offline": p.offline,
                 **{f"params.{k}": v for k, v in p.params.items()}}
        for p in spec.policies
    }
    status, code = "FAILED", EXIT_FAILED
    try:
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        tracker.start_parent(run_name=f"sweep-{stamp}", params=params, tags=tags, metrics=metrics, texts=texts,
                             capacities=caps, child_params=child_params,
                             child_tags={"trace_source": trace.source}, trace_name=trace.name)
        log.info("MLflow: experiment %r, parent run %s (%s)", exp_name, tracker.parent_id, uri)
        with RayRunner(cfg.cluster) as runner:
            jobs = make_plan(spec.policies, spec.cost_models, caps, trace.n_accesses, runner.n_actors, **plan_kw)
            tracker.client.log_batch(tracker.parent_id, params=_params(
                {"n_jobs": len(jobs), "n_actors": min(runner.n_actors, len(jobs))}))
            log.info("%d policies x %d cost models x %d capacities -> %d jobs on %d actor(s)",
                     len(spec.policies), len(spec.cost_models), len(caps), len(jobs),
                     min(runner.n_actors, len(jobs)))

            def on_result(job, records, secs):
                for p, m in tracker.record(job, records):
                    log.debug("curve %s / %s complete", p, m)

            fail_fast = bool(sweep_cfg.get("fail_fast", False))
            n_failed = runner.run(traces.to_payload(trace), jobs, sim_kwargs, on_result,
                                  on_error=None if fail_fast else tracker.fail)
        if n_failed:
            log.error("%d of %d jobs failed; their curves are marked FAILED, the others are kept",
                      n_failed, len(jobs))
        else:
            status, code = "FINISHED", 0
    except KeyboardInterrupt:
        status, code = "KILLED", EXIT_KILLED
        log.warning("interrupted: finished curves are kept, the sweep run is marked KILLED")
    except SweepFailed as e:
        log.error("%s", e)
    finally:  # any other exception: runs marked FAILED, then Hydra reports it
        tracker.close(status)

    print()
    print(summary_table_text(tracker, caps, spec, sweep_cfg))
    print()
    db = sqlite_path(uri)
    print(f"MLflow experiment {exp_name!r}, sweep run {tracker.parent_id} ({status})")
    print("View the results:  " + ui_command(uri if db is None else "sqlite:///" + str(db.resolve())))
    return code


def _params(d: dict):
    from mlflow.entities import Param

    from .tracking import _param_value

    return [Param(k, _param_value(v)) for k, v in d.items()]


def summary_table_text(tracker, caps, spec, sweep_cfg) -> str:
    from .report import summary_table

    return summary_table(tracker.curves(), caps, int(sweep_cfg.get("summary_points") or 4),
                         [p.name for p in spec.policies], spec.cost_models)


def _sigterm(signum, frame):  # pragma: no cover - exercised by hand
    raise KeyboardInterrupt


def main() -> None:
    """Console entry point (also `python -m sweep`)."""
    import hydra

    try:
        conf_dir = find_conf_dir()
        precheck_overrides(sys.argv[1:], conf_dir)
        register_generated(conf_dir)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(EXIT_CONFIG)
    signal.signal(signal.SIGTERM, _sigterm)

    @hydra.main(config_path=str(conf_dir), config_name="config", version_base="1.3")
    def _task(cfg) -> None:
        try:
            code = run(cfg)
        except KeyboardInterrupt:  # before any MLflow run existed
            log.warning("interrupted")
            code = EXIT_KILLED
        if code:
            sys.exit(code)

    _task()
