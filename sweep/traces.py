"""Build the trace a sweep replays from the `trace` config group.

Rules, in order: `path` set -> that file (it must exist); `bundled` -> the copy shipped in
sim_core/data; `profile` -> a synthetic trace from sim_core.synth. sim_core.loaders and
sim_core.synth are imported only when needed.
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from .config import ConfigError

log = logging.getLogger("sweep")

_ARRAYS = ("req_offsets", "blocks", "arrival_s", "session", "input_tokens", "output_tokens")


def check_trace_config(tc: DictConfig, choice: str) -> None:
    """Checks that need no I/O beyond a stat: run before any work."""
    if OmegaConf.is_missing(tc, "path"):
        raise ConfigError(f"trace={choice} needs a file: trace.path=/path/to/trace "
                          f"(format {tc.get('format', 'auto')})")
    path = tc.get("path")
    if path:
        p = Path(str(path)).expanduser()
        if not p.exists():
            raise ConfigError(f"trace.path {str(p)!r} does not exist"
                              + (" (unset trace.path to use the synthetic profile)" if tc.get("profile") else ""))
    elif not tc.get("bundled") and not tc.get("profile"):
        raise ConfigError(f"trace={choice} sets none of path, bundled or profile")
    mr = tc.get("max_requests")
    if mr is not None and int(mr) < 1:
        raise ConfigError(f"trace.max_requests must be >= 1, got {mr}")


def _load_file(path: Path, fmt: str, tc: DictConfig, name: str | None):
    from sim_core.trace import Trace

    try:
        from sim_core.loaders import load_trace
    except ImportError:
        if fmt == "native" or (fmt == "auto" and path.suffix == ".npz"):
            t = Trace.load(path)
            if name:
                t.name = name
            return t
        raise ConfigError(f"cannot read {path} as {fmt!r}: sim_core.loaders is not available in "
                          f"this installation (only native .npz traces can be read)") from None
    kwargs = {"context_tokens": int(tc.context_tokens)} if tc.get("context_tokens") else {}
    if tc.get("cache_dir"):
        kwargs["cache_dir"] = str(tc.cache_dir)
    return load_trace(str(path), fmt, name=name, **kwargs)


def load(tc: DictConfig, choice: str):
    """The Trace selected by the `trace` config group (name and source set)."""
    check_trace_config(tc, choice)
    name = tc.get("name")
    path = tc.get("path")
    if path:
        p = Path(str(path)).expanduser()
        trace = _load_file(p, str(tc.get("format") or "auto"), tc, name or p.stem.split(".")[0])
    elif tc.get("bundled"):
        try:
            from sim_core.loaders import bundled_path
        except ImportError:
            raise ConfigError(f"trace={choice} needs sim_core.loaders, which is not available "
                              f"in this installation") from None
        trace = _load_file(Path(bundled_path(str(tc.bundled))), str(tc.get("format") or "auto"), tc,
                           name or choice)
    else:
        try:
            from sim_core import synth
        except ImportError:
            raise ConfigError(f"trace={choice} is synthetic but sim_core.synth is not available in "
                              f"this installation; set trace.path to a real trace instead") from None
        kwargs = {"seed": int(tc.get("seed") or 0)}
        if tc.get("scale") is not None:
            kwargs["scale"] = tc.scale
        if tc.get("concurrency") is not None:
            kwargs["concurrency"] = int(tc.concurrency)
        log.info("generating a synthetic %s trace (%s)", tc.profile,
                 ", ".join(f"{k}={v}" for k, v in kwargs.items()))
        trace = synth.generate(str(tc.profile), **kwargs)
        if name:
            trace.name = str(name)
    mr = tc.get("max_requests")
    if mr is not None and int(mr) < trace.n_requests:
        trace = trace.subset(int(mr))
    if trace.n_accesses == 0:
        raise ConfigError(f"trace {trace.name!r} is empty (no block accesses)")
    return trace


def experiment_name(trace, override: str | None = None) -> str:
    if override:
        return str(override)
    return trace.name if trace.source == "real" else f"{trace.name}-synthetic"


# --------------------------------------------------------------- Ray transport
def to_payload(trace) -> dict:
    """Plain dict for ray.put: numpy arrays become zero-copy read-only views in workers."""
    d = {k: getattr(trace, k) for k in _ARRAYS}
    d.update(block_tokens=trace.block_tokens, name=trace.name, source=trace.source,
             dropped_requests=trace.dropped_requests, meta=dict(trace.meta))
    return d


def from_payload(d: dict):
    from sim_core.trace import Trace

    arrays = {k: d[k] for k in _ARRAYS}
    for k, a in arrays.items():
        if not isinstance(a, np.ndarray):
            raise TypeError(f"trace payload field {k} is {type(a)}")
    return Trace(**arrays, block_tokens=d["block_tokens"], name=d["name"], source=d["source"],
                 dropped_requests=d["dropped_requests"], meta=d["meta"])


def basic_summary(trace) -> dict:
    """Always-available numbers; sim_core.summary adds more when present."""
    lengths = trace.request_lengths
    sessions = trace.session[trace.session >= 0]
    return {
        "requests": trace.n_requests,
        "block_accesses": trace.n_accesses,
        "unique_blocks": trace.n_unique,
        "block_tokens": trace.block_tokens,
        "max_request_blocks": trace.max_request_blocks,
        "mean_request_blocks": float(lengths.mean()) if len(lengths) else 0.0,
        "sessions": int(len(np.unique(sessions))),
        "span_s": float(trace.arrival_s[-1] - trace.arrival_s[0]) if trace.n_requests else 0.0,
        "dropped_requests": trace.dropped_requests,
        "reuse_ratio": 1.0 - trace.n_unique / trace.n_accesses if trace.n_accesses else 0.0,
    }


def summarize(trace) -> tuple[dict, str | None]:
    """(flat summary dict, formatted text or None)."""
    out = basic_summary(trace)
    text = None
    try:
        from sim_core.summary import format_summary, summary
    except ImportError:
        return out, text
    try:
        full = summary(trace)
        out.update(_flatten(full))
        text = format_summary(full)
    except Exception as e:  # noqa: BLE001 - a summary must never stop a sweep
        log.warning("trace summary failed: %s", e)
    return out, text


def _flatten(d, prefix=""):
    out = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
    else:
        out[prefix[:-1]] = d
    return out
