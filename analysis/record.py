"""Where an analysis lands: report.md, report.json and figures/ in a directory, and one
MLflow run in the trace's experiment (next to its sweeps) holding the same files.

The run is told apart from sweep runs by its tag `kvsweep.kind` (`characterization` or
`advice`); its metrics are the report's numbers, flattened (`lifetimes.one_hit_block_share`).
"""
from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np
from omegaconf import OmegaConf

from sweep.traces import flatten
from sweep.metrics import param_value
from sweep.tracking import Tracker

log = logging.getLogger("analysis")

REPORT_MD, REPORT_JSON, FIGURES = "report.md", "report.json", "figures"


def plain(x: Any) -> Any:
    """JSON-safe: numpy scalars and arrays as Python values, NaN and infinities as null."""
    if isinstance(x, Mapping):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [plain(v) for v in x]
    if isinstance(x, (np.bool_, bool)):
        return bool(x)
    if isinstance(x, (np.integer, int)):
        return int(x)
    if isinstance(x, (np.floating, float)):
        return float(x) if math.isfinite(x) else None
    return x


def numbers(d: Mapping, prefix: str = "") -> dict[str, float]:
    """Finite numbers of a nested report, by dotted name (lists are left out: they are
    tables and curves, in the JSON and the figures)."""
    out: dict[str, float] = {}
    for k, v in d.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(numbers(v, name + "."))
        elif isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_)):
            if math.isfinite(float(v)):
                out[name] = float(v)
    return out


def clear_figures(out: Path) -> None:
    """Remove the PNGs of an earlier run into the same directory, so a run never shows
    (or logs to MLflow) a figure it did not draw."""
    for png in (out / FIGURES).glob("*.png"):
        png.unlink()


def write(out: Path, report: Mapping, markdown: str) -> list[Path]:
    """report.md and report.json into `out` (figures are written there by their maker)."""
    out.mkdir(parents=True, exist_ok=True)
    md = out / REPORT_MD
    md.write_text(markdown)
    js = out / REPORT_JSON
    js.write_text(json.dumps(plain(report), indent=1, allow_nan=False) + "\n")
    return [md, js]


def log_run(uri: str, experiment: str, *, kind: str, command: str, trace, cfg, overrides: list[str],
            metrics: Mapping[str, float], out: Path, artifact_location: str | None = None) -> str:
    """One FINISHED MLflow run with the resolved config (params), `metrics`, and every
    file under `out` as artifacts. Returns the run id."""
    from mlflow.entities import Metric, Param

    tracker = Tracker(uri, experiment, artifact_location)  # creates the experiment as a sweep would
    client = tracker.client
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run = client.create_run(tracker.experiment_id, run_name=f"{command}-{stamp}", tags={
        "kvsweep.kind": kind, "trace": trace.name, "trace_source": trace.source,
        "mlflow.source.name": f"python -m analysis {command}", "overrides": " ".join(overrides) or "(defaults)"})
    rid = run.info.run_id
    try:
        params = flatten(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))
        ps = [Param(k[:250], param_value(v)) for k, v in params.items()]
        for i in range(0, len(ps), 100):
            client.log_batch(rid, params=ps[i:i + 100])
        now = int(time.time() * 1000)
        ms = [Metric(k[:250], float(v), now, 0) for k, v in metrics.items()]
        for i in range(0, len(ms), 1000):
            client.log_batch(rid, metrics=ms[i:i + 1000])
        client.log_artifacts(rid, str(out))
    except BaseException:
        client.set_terminated(rid, "FAILED")
        raise
    client.set_terminated(rid, "FINISHED")
    return rid
