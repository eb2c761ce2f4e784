"""Where results are recorded: tracking URIs, the first contact with a store, and the
MLflow client settings a sweep needs (short timeouts, no minutes of retries)."""
from __future__ import annotations

import contextlib
import logging
import os
import time
import urllib.error
import urllib.request
from pathlib import Path


class TrackingUnavailable(RuntimeError):
    """The tracking server does not answer."""


def default_uri(cwd: str | os.PathLike | None = None) -> str:
    """sqlite:///<abs cwd>/mlflow.db (the user's directory, never Hydra's)."""
    return "sqlite:///" + str(Path(cwd or os.getcwd()).resolve() / "mlflow.db")


def sqlite_path(uri: str) -> Path | None:
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///"):])
    return None


def ui_command(uri: str) -> str:
    if sqlite_path(uri) is not None:
        return f"mlflow ui --backend-store-uri {uri}"
    return f"open {uri} in a browser"


def experiment_url(uri: str, experiment_id: str) -> str:
    """The experiment's runs page. MLflow 3's UI opens in its GenAI mode (traces,
    evaluations) unless told `workflowType=machine_learning`, the "Model training" switch."""
    base = "http://127.0.0.1:5000" if sqlite_path(uri) is not None else uri.rstrip("/")
    return f"{base}/#/experiments/{experiment_id}?workflowType=machine_learning"


def quiet_mlflow() -> None:
    """Before importing mlflow: its own handler would print INFO (database migrations),
    and its HTTP client would retry a dead server for minutes (the sweep's delivery
    thread retries instead, with the results safe in the journal)."""
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    for name in ("mlflow", "alembic", "sqlalchemy", "urllib3", "git"):
        logging.getLogger(name).setLevel(logging.WARNING)
    os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "15")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


def check_reachable(uri: str, timeout: float = 4.0, tries: int = 2) -> None:
    """A tracking server must answer /health; raises TrackingUnavailable within about
    tries x timeout seconds. Stores that are files (sqlite, file:) always pass."""
    if not uri.startswith(("http://", "https://")):
        return
    err = None
    for i in range(tries):
        try:
            with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout) as r:
                if r.status == 200:
                    return
                err = f"HTTP {r.status}"
        except (urllib.error.URLError, OSError) as e:
            err = str(getattr(e, "reason", e))
        if i + 1 < tries:
            time.sleep(0.5)
    raise TrackingUnavailable(f"tracking server {uri} does not answer ({err}); start it, or run "
                              f"offline into the journal with tracking.offline=true")


@contextlib.contextmanager
def store_lock(uri: str):
    """Serialise first use of a SQLite store: two sweeps creating one fresh mlflow.db
    race in MLflow's schema migration (table ... already exists)."""
    db = sqlite_path(uri)
    if db is None:
        yield
        return
    import fcntl

    db.parent.mkdir(parents=True, exist_ok=True)
    with open(str(db) + ".lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
