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

from .config import ConfigError, check_int, check_number

log = logging.getLogger("sweep")

# sim_core.loaders.FORMATS, spelled out: that module is optional (see _load_file)
FORMATS = ("auto", "mooncake", "qwen_bailian", "freeinference", "native")
_ARRAYS = ("req_offsets", "blocks", "arrival_s", "session", "input_tokens", "output_tokens")


def check_trace_config(tc: DictConfig, choice: str) -> None:
    """Checks that need no I/O beyond a stat: run before any work."""
    if OmegaConf.is_missing(tc, "path"):
        raise ConfigError(f"trace={choice} needs a file: trace.path=/path/to/trace "
                          f"(format {tc.get('format', 'auto')})")
    path = tc.get("path")
    if OmegaConf.is_config(path) or isinstance(path, (list, dict)):
        # e.g. trace.path=/data/a,b.jsonl parses as a list; quoting keeps it one string
        raise ConfigError(f"trace.path must be one file path, got {path!r}; quote a path with "
                          f"special characters: \"trace.path='/data/a,b.jsonl'\"")
    if path:
        p = Path(str(path)).expanduser()
        if not p.exists():
            raise ConfigError(f"trace.path {str(p)!r} does not exist"
                              + (" (unset trace.path to use the synthetic profile)" if tc.get("profile") else ""))
        if p.is_dir():
            raise ConfigError(f"trace.path {str(p)!r} is a directory; give a trace file (.jsonl or .npz)")
        fmt = tc.get("format") or "auto"
        if fmt not in FORMATS:
            raise ConfigError(f"unknown trace.format {fmt!r}; valid: {', '.join(FORMATS)}")
    elif not tc.get("bundled") and not tc.get("profile"):
        raise ConfigError(f"trace={choice} sets none of path, bundled or profile")
    check_int(tc.get("max_requests"), "trace.max_requests", 1, allow_none=True, none_means="all requests")
    # 0 would otherwise fall back to the default window (`or` below): reject it instead
    check_int(tc.get("context_tokens"), "trace.context_tokens", 1, allow_none=True,
              none_means="the default context window")
    if tc.get("profile") and not path:  # the synthetic generator's knobs
        check_number(tc.get("scale"), "trace.scale", allow_none=True,
                     none_means="the default size; 1.0 = the full trace")
        check_int(tc.get("seed"), "trace.seed", 0, allow_none=True, none_means="0")
        check_number(tc.get("concurrency"), "trace.concurrency", allow_none=True,
                     none_means="the profile's default")
    check_int(tc.get("weeks"), "trace.weeks", 1, allow_none=True, none_means="1")
    if weeks(tc) > 1:
        if path or tc.get("bundled") or not tc.get("profile"):
            raise ConfigError(f"trace.weeks={weeks(tc)} needs a synthetic profile (independent weeks are generated); "
                              f"trace={choice} reads a file: set trace.weeks=1")
        if tc.get("max_requests") is not None:
            raise ConfigError("trace.max_requests cannot be combined with trace.weeks > 1: set trace.weeks=1, or "
                              "trace.scale for a smaller trace")


def _head(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(64)


def _load_native(path: Path, fmt: str, name: str | None):
    """Trace.load, not loaders.load_native: its errors already name the file and the bad
    field, and the loaders' context_tokens/cache_dir do not apply (the file is replayed
    as saved)."""
    from sim_core.trace import Trace

    if fmt not in ("auto", "native"):
        log.info("%s is an .npz archive: reading it as a native trace (trace.format=%s ignored)", path, fmt)
    try:
        t = Trace.load(path)
    except ValueError as e:
        looks_json = _head(path).lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"{", b"[")
        hint = "; read it with trace.format=mooncake, qwen_bailian or freeinference" if looks_json else ""
        raise ConfigError(f"{e}{hint}") from None
    if name:
        t.name = name
    return t


def _load_file(path: Path, fmt: str, tc: DictConfig, name: str | None):
    # a zip archive is never JSONL: read it as native whatever the trace group's format says
    if fmt == "native" or (fmt == "auto" and path.suffix == ".npz") or _head(path).startswith(b"PK\x03\x04"):
        return _load_native(path, fmt, name)
    from sim_core.loaders import load_trace

    kwargs = {"context_tokens": int(tc.context_tokens)} if tc.get("context_tokens") else {}
    if tc.get("cache_dir"):
        kwargs["cache_dir"] = str(tc.cache_dir)
    return load_trace(str(path), fmt, name=name, **kwargs)


def load(tc: DictConfig, choice: str):
    """The Trace selected by the `trace` config group (name and source set)."""
    check_trace_config(tc, choice)
    name = tc.get("name")
    name = str(name) if name not in (None, "") else None  # trace.name=2024 arrives as an int
    path = tc.get("path")
    if path:
        p = Path(str(path)).expanduser()
        trace = _load_file(p, str(tc.get("format") or "auto"), tc, name or p.stem.split(".")[0])
    elif tc.get("bundled"):
        from sim_core.loaders import bundled_path

        trace = _load_file(Path(bundled_path(str(tc.bundled))), str(tc.get("format") or "auto"), tc,
                           name or choice)
    else:
        trace = week_maker(tc)(0)
    mr = tc.get("max_requests")
    if mr is not None and int(mr) < trace.n_requests:
        trace = trace.subset(int(mr))
    if trace.n_accesses == 0:
        raise ConfigError(f"trace {trace.name!r} is empty (no block accesses)")
    return trace


def weeks(tc: DictConfig) -> int:
    """trace.weeks: how many independent weeks of the synthetic profile (sweep/weeks.py)."""
    return int(tc.get("weeks") or 1)


def week_maker(tc: DictConfig):
    """week -> that week of the synthetic trace `tc` configures (week 0: the seed's own)."""
    from sim_core import synth

    kwargs = {"seed": int(tc.get("seed") or 0)}
    if tc.get("scale") is not None:
        kwargs["scale"] = tc.scale
    if tc.get("concurrency") is not None:
        kwargs["concurrency"] = int(tc.concurrency)
    name = tc.get("name")

    def make(week: int):
        n = weeks(tc)
        log.info("generating a synthetic %s trace (%s%s)", tc.profile, ", ".join(f"{k}={v}" for k, v in kwargs.items()),
                 f", week {week + 1} of {n}" if n > 1 else "")
        trace = synth.generate(str(tc.profile), week=week, **kwargs)
        if name not in (None, ""):
            trace.name = str(name)
        return trace

    return make


def experiment_name(trace, override: str | None = None) -> str:
    if override:
        return str(override)
    return trace.name if trace.source == "real" else f"{trace.name}-synthetic"


# --------------------------------------------------------------- Ray transport
def to_payload(trace) -> dict:
    """Plain dict for ray.put: numpy arrays become zero-copy read-only views in workers.
    A sim_core.sample.SampleSet travels as its samples."""
    from sim_core.sample import SampleSet

    if isinstance(trace, SampleSet):
        return {"kind": "samples", "name": trace.name, "source": trace.source, "block_tokens": trace.block_tokens,
                "n_accesses": trace.n_accesses,
                "samples": [(list(k), to_payload(t)) for k, t in trace._samples.items()]}
    d = {k: getattr(trace, k) for k in _ARRAYS}
    d.update(block_tokens=trace.block_tokens, name=trace.name, source=trace.source,
             dropped_requests=trace.dropped_requests, meta=dict(trace.meta), depth=trace.depth,
             source_ids=trace.source_ids)
    return d


def from_payload(d: dict):
    from sim_core.sample import SampleSet
    from sim_core.trace import Trace

    if d.get("kind") == "samples":
        return SampleSet(d["name"], d["source"], d["block_tokens"], d["n_accesses"],
                         {tuple(k): from_payload(p) for k, p in d["samples"]})
    arrays = {k: d[k] for k in _ARRAYS}
    for k, a in arrays.items():
        if not isinstance(a, np.ndarray):
            raise TypeError(f"trace payload field {k} is {type(a)}")
    return Trace(**arrays, block_tokens=d["block_tokens"], name=d["name"], source=d["source"],
                 dropped_requests=d["dropped_requests"], meta=d["meta"], depth=d.get("depth"),
                 source_ids=d.get("source_ids"))


def payload_bytes(d: dict) -> int:
    if d.get("kind") == "samples":
        return sum(payload_bytes(p) for _, p in d["samples"])
    return sum(getattr(v, "nbytes", 0) for v in d.values())


def summarize(trace) -> tuple[dict, str]:
    """(flat summary dict, formatted text): sim_core.summary plus the request-size and
    reuse numbers it lacks. Weeks held as samples (sweep.weeks) give their first week's."""
    from sim_core.summary import format_summary, summary

    if getattr(trace, "summary", None) is not None:
        return trace.summary

    full = summary(trace)
    lengths = trace.request_lengths
    out = {"max_request_blocks": trace.max_request_blocks,
           "mean_request_blocks": float(lengths.mean()) if len(lengths) else 0.0,
           "reuse_ratio": 1.0 - trace.n_unique / trace.n_accesses if trace.n_accesses else 0.0}
    out.update(flatten(full))
    return out, format_summary(full)


def flatten(d, prefix: str = "") -> dict:
    """{"a": {"b": 1}} -> {"a.b": 1} (MLflow params and metrics are flat)."""
    out = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(flatten(v, f"{prefix}{k}."))
    else:
        out[prefix[:-1]] = d
    return out
