"""`python -m sweep`: the study pipeline (sweep.study) behind Hydra, with logging,
signals and exit codes.

Exit codes: 0 done; 1 a job failed or results could not be delivered; 2 bad input or an
unreachable tracking server (nothing was run or recorded); 128 + signal number when
SIGINT (130) or SIGTERM (143) stopped it.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

from . import record, signals, size, study
from .config import ConfigError, check_compose, find_conf_dir, precheck_overrides, register_generated
from .pool import SweepFailed
from .runner import RayCluster
from .store import TrackingUnavailable, experiment_url, quiet_mlflow, sqlite_path, ui_command

log = logging.getLogger("sweep")

EXIT_CONFIG = 2
EXIT_FAILED = 1
DELIVERY_WAIT_S = 300.0  # at the end, how long to wait for a tracking server that went away
DELIVERY_WAIT_KILLED_S = 10.0


class _ConsoleHandler(logging.Handler):
    """Log lines written through tqdm, so they land above a live progress bar."""

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm import tqdm

        try:
            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # noqa: BLE001 - logging must never raise
            self.handleError(record)


def setup_logging(level: str = "INFO") -> None:
    root = logging.getLogger()
    if not any(isinstance(h, _ConsoleHandler) for h in root.handlers):
        h = _ConsoleHandler()
        h.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(message)s", "%H:%M:%S"))
        root.addHandler(h)
    root.setLevel(logging.WARNING)  # third-party INFO chatter (Ray, MLflow, numba) stays quiet
    quiet_mlflow()
    log.setLevel(str(level).upper())
    for name in ("ray", "mlflow", "alembic", "numba", "matplotlib", "urllib3", "filelock"):
        logging.getLogger(name).setLevel(logging.WARNING)


def _policy_choice(hc) -> str:
    """What the user picked in the policy group: Hydra lists a list override such as
    policy=[lru,lhd] under no choice, so read it from the overrides."""
    for o in hc.overrides.task:
        if o.startswith("policy="):
            return o.split("=", 1)[1]
    return str(hc.runtime.choices.get("policy", "all"))


def run(cfg) -> int:
    """The sweep. Returns the process exit status."""
    from hydra.core.hydra_config import HydraConfig

    setup_logging(cfg.sweep.get("log_level", "INFO"))
    hc = HydraConfig.get()
    try:
        st = study.configure(cfg, list(hc.overrides.task), hc.runtime.choices.get("trace", "trace"),
                             _policy_choice(hc))
        study.load(st)
        signals.check()
    except (ConfigError, TrackingUnavailable, ValueError, OSError) as e:
        log.error("%s", e)
        return EXIT_CONFIG
    if cfg.sweep.get("dry_run"):
        return study.dry_run(st)

    status, code, wait = "FAILED", EXIT_FAILED, DELIVERY_WAIT_S
    try:
        record.open_tracking(st)
        study.resolve_known(st)
        line = study.known_line(st)
        if line:
            log.info("%s", line)
        if not study.todo(st) and all(c.status == "REUSED" for c in st.curves):
            print("\n" + record.summary_text(st) + "\n")  # everything is in the store already
            return 0
        if study.todo(st) and not _announce(st, cfg):
            print("not run: nothing was started or recorded (narrow the sweep, or sweep.yes=true to skip the "
                  "question)", file=sys.stderr)
            return EXIT_CONFIG
        record.start_runs(st)
        signals.check()
        if study.todo(st):
            with RayCluster(cfg.cluster) as cluster:
                study.make_jobs(st, cluster.n_actors)
                study.run_jobs(st, cluster)
        if st.n_failed:
            log.error("%d of %d jobs failed; their curves are marked FAILED, the others are kept",
                      st.n_failed, len(st.jobs))
        else:
            status, code = "FINISHED", 0
    except KeyboardInterrupt as e:
        signals.handled()
        e = signals.as_interrupted(e)
        status, code, wait = "KILLED", e.exit_code, DELIVERY_WAIT_KILLED_S
        log.warning("%s: finished curves are kept, partial ones and the sweep run are marked KILLED", e)
    except ConfigError as e:
        log.error("%s", e)
        return EXIT_CONFIG
    except SweepFailed as e:
        log.error("%s", e)
    finally:  # any other exception: runs marked FAILED, then Hydra reports it
        status = record.finish(st, status, wait)
    if status == "FAILED" and code == 0:
        code = EXIT_FAILED

    print("\n" + record.summary_text(st) + "\n")
    if record.work_line(st):
        print(record.work_line(st))
    if st.tracker is not None and st.tracker.parent_id is None:
        print(f"MLflow experiment {st.experiment!r}: nothing ran, so no run of this sweep was kept")
    elif st.tracker is not None:
        db = sqlite_path(st.uri)
        print(f"MLflow experiment {st.experiment!r}, sweep run {st.tracker.parent_id} ({status})")
        print("View the results:  " + ui_command(st.uri if db is None else "sqlite:///" + str(db.resolve())))
        print(f"  then open {experiment_url(st.uri, st.tracker.experiment_id)}")
        for m, url in st.views.items():
            print(f"  {m}: {url}")
        report = _report_path(st)
        print("Report: the sweep run's Artifacts, report.html" + (f"; here: {report}" if report else ""))
    return code


def _announce(st, cfg) -> bool:
    """Say the sweep's size and time before anything is recorded (sweep.size), and whether
    to go on (a terminal asks above sweep.size.ASK_ABOVE_S)."""
    n = size.actors(cfg.cluster)
    study.make_jobs(st, n)  # planned again once Ray says how many actors there are
    got = size.measure(st, n)
    log.info("%s", got.line())
    return size.confirm(got, cfg)


def _report_path(st) -> str:
    """report.html of the sweep run on this disk (a local store's artifacts), or ''."""
    try:
        uri = st.tracker.client.get_run(st.tracker.parent_id).info.artifact_uri
    except Exception:  # noqa: BLE001 - only a convenience
        return ""
    path = Path(uri[len("file://"):]) / "report.html" if uri.startswith("file://") else Path(uri) / "report.html"
    return str(path) if path.is_file() else ""


def main() -> None:
    """Console entry point (also `python -m sweep`)."""
    import hydra

    signals.install()
    try:
        conf_dir = find_conf_dir()
        precheck_overrides(sys.argv[1:], conf_dir)
        register_generated(conf_dir)
        check_compose(sys.argv[1:], conf_dir)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(EXIT_CONFIG)

    @hydra.main(config_path=str(conf_dir), config_name="config", version_base="1.3")
    def _task(cfg) -> None:
        try:
            code = run(cfg)
        except KeyboardInterrupt as e:  # before any run existed
            signals.handled()
            e = signals.as_interrupted(e)
            log.warning("%s: stopped before anything was recorded", e)
            code = e.exit_code
        if code:
            sys.exit(code)

    try:
        _task()
    except KeyboardInterrupt as e:  # during Hydra's own start-up
        sys.exit(signals.as_interrupted(e).exit_code)
