"""The trace a configuration selects: the `trace` config group -> a Trace.

Takes any Mapping (an omegaconf DictConfig is one; plain dicts work the same), so sweep
and analysis share it without importing each other. Rules, in order: `path` set -> that
file (it must exist); `bundled` -> the copy shipped in sim_core/data; `profile` -> a
synthetic trace from sim_core.traces.synth. The formats, and the options a format takes beyond
the shared keys, come from sim_core.traces.loaders (FORMATS, SETTINGS): nothing here names one.

Keys (conf/trace/*.yaml): name, path, bundled, profile, format, max_requests,
context_tokens, cache_dir, block_tokens (the trace's block size: token formats hash at
it, every other trace is re-blocked to it; null = the trace's own), the options formats
declare (sim_core.traces.loaders.SETTINGS: tokenizer for text, a tokenizer.json;
file_block_tokens for dynamo, tokens per hash in the file), and the synthetic
generator's scale, seed, weeks, concurrency; sessions (where the trace's session ids come
from: SESSIONS, applied last, see :func:`apply_sessions`).
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import synth
from ..config_checks import ConfigError, check_int, check_number
from .loaders import FORMATS, REGISTRY, SETTINGS, bundled_path, detect_format, load_trace, times
from .loaders.lines import trace_files
from .reblock import reblock
from .sample import SampleSet
from .sessions import has_session_ids, sessions_source, with_inferred_sessions
from .summary import format_summary, summary
from .trace import Trace

log = logging.getLogger("sweep")

_ARRAYS = ("req_offsets", "blocks", "arrival_s", "session", "input_tokens", "output_tokens")
_MISSING = object()  # a required value left as ??? in the config
#: trace.sessions: auto = the trace's own session ids, inferred where it has none;
#: given = never inferred; inferred = always inferred, replacing the trace's own
SESSIONS = ("auto", "given", "inferred")


def _get(tc: Mapping, key: str, default: Any = None) -> Any:
    """tc[key], or `default`; _MISSING for a mandatory value not given (omegaconf raises
    MissingMandatoryValue for ???, a plain Mapping holds the text '???')."""
    try:
        value = tc.get(key, default)
    except Exception as e:  # noqa: BLE001 - omegaconf's error, without importing omegaconf
        if type(e).__name__ == "MissingMandatoryValue":
            return _MISSING
        raise
    return _MISSING if isinstance(value, str) and value == "???" else value


def formats() -> tuple[str, ...]:
    return FORMATS


def path_keys() -> frozenset[str]:
    """The trace config keys that hold a file path: the shared ones and the formats' file
    options (the command line's quoting check treats them as free text)."""
    return frozenset({"trace.path", "trace.cache_dir", *(f"trace.{n}" for n, (o, _) in SETTINGS.items()
                                                        if o.kind == "file")})


def check_trace_config(tc: Mapping, choice: str) -> None:
    """Checks that need no I/O beyond a stat: run before any work."""
    path = _get(tc, "path")
    if path is _MISSING:
        raise ConfigError(f"trace={choice} needs a file: trace.path=/path/to/trace "
                          f"(format {_get(tc, 'format') or 'auto'})")
    if not isinstance(path, str) and isinstance(path, (Sequence, Mapping)):
        # e.g. trace.path=/data/a,b.jsonl parses as a list; quoting keeps it one string
        raise ConfigError(f"trace.path must be one file path, got {path!r}; quote a path with "
                          f"special characters: \"trace.path='/data/a,b.jsonl'\"")
    fmt = _get(tc, "format") or "auto"
    if path:
        p = Path(str(path)).expanduser()
        if not p.exists():
            raise ConfigError(f"trace.path {str(p)!r} does not exist"
                              + (" (unset trace.path to use the synthetic profile)" if _get(tc, "profile") else ""))
        if fmt not in formats():
            raise ConfigError(f"unknown trace.format {fmt!r}; valid: {', '.join(formats())}")
        readers = [n for n, f in REGISTRY.items() if f.directories]
        if p.is_dir() and (fmt not in ("auto", *readers) or not trace_files(p)):
            raise ConfigError(f"trace.path {str(p)!r} is a directory; give a trace file (.jsonl or .npz), or a "
                              f"directory of per-session *.jsonl / *.json files (formats {', '.join(readers)})")
    elif not _get(tc, "bundled") and not _get(tc, "profile"):
        raise ConfigError(f"trace={choice} sets none of trace.path, trace.bundled or trace.profile: "
                          f"give the file, e.g. trace.path=/data/my_trace.jsonl")
    check_int(_get(tc, "max_requests"), "trace.max_requests", 1, allow_none=True, none_means="all requests")
    # 0 would otherwise fall back to the default window (`or` below): reject it instead
    check_int(_get(tc, "context_tokens"), "trace.context_tokens", 1, allow_none=True,
              none_means="the default context window")
    check_int(_get(tc, "block_tokens"), "trace.block_tokens", 1, allow_none=True,
              none_means="the trace's own block size")
    # the formats' own options: numbers first, then the files (a stat each)
    for opt, owners in sorted(SETTINGS.values(), key=lambda s: s[0].kind == "file"):
        value = _get(tc, opt.name)
        if opt.kind == "int":
            check_int(value, f"trace.{opt.name}", 1, allow_none=True, none_means=opt.what)
            continue
        if opt.kind == "unit":
            if value is not None and (not isinstance(value, str) or times.ALIASES.get(value, value) not in times.UNITS):
                raise ConfigError(f"trace.{opt.name} must be one of {', '.join(times.UNITS)} or null "
                                  f"({opt.what}), got {value!r}")
            continue
        if opt.kind == "bool":
            if value is not None and not isinstance(value, bool):
                raise ConfigError(f"trace.{opt.name} must be true or false, got {value!r}")
            continue
        if value is _MISSING or (opt.required and fmt in owners and not value):
            raise ConfigError(f"trace.format={fmt if fmt in owners else owners[0]} needs {opt.what}: "
                              f"trace.{opt.name}={opt.example}")
        if value:
            t = Path(str(value)).expanduser()
            if not t.is_file():
                raise ConfigError(f"trace.{opt.name} {str(t)!r} is not a file (a {Path(opt.example).name})")
    if _get(tc, "profile") and not path:  # the synthetic generator's knobs
        check_number(_get(tc, "scale"), "trace.scale", allow_none=True,
                     none_means="the default size; 1.0 = the full trace")
        check_int(_get(tc, "seed"), "trace.seed", 0, allow_none=True, none_means="0")
        check_number(_get(tc, "concurrency"), "trace.concurrency", allow_none=True,
                     none_means="the profile's default")
    check_int(_get(tc, "weeks"), "trace.weeks", 1, allow_none=True, none_means="1")
    sessions_mode(tc)
    if weeks(tc) > 1:
        if path or _get(tc, "bundled") or not _get(tc, "profile"):
            raise ConfigError(f"trace.weeks={weeks(tc)} needs a synthetic profile (independent weeks are generated); "
                              f"trace={choice} reads a file: set trace.weeks=1")
        if _get(tc, "max_requests") is not None:
            raise ConfigError("trace.max_requests cannot be combined with trace.weeks > 1: set trace.weeks=1, or "
                              "trace.scale for a smaller trace")


def sessions_mode(tc: Mapping) -> str:
    """trace.sessions (null or absent: auto); ConfigError naming the key otherwise."""
    mode = _get(tc, "sessions")
    if mode is None:
        return "auto"
    if not isinstance(mode, str) or mode not in SESSIONS:
        raise ConfigError(f"unknown trace.sessions {mode!r}; valid: {', '.join(SESSIONS)} (auto: the trace's own "
                          f"session ids, inferred from prefix chains where it has none)")
    return mode


def apply_sessions(trace, mode: str):
    """The trace with the sessions trace.sessions=`mode` selects, and where they came from
    in ``meta["sessions_source"]``: "given", "inferred" or "none". A trace that keeps its
    own ids is returned as the same object (its cached digest, and so the resume keys of
    its results, stay as they were); inferred ids change the session array, hence the
    trace digest."""
    given = has_session_ids(trace)
    if mode == "inferred" or (mode == "auto" and not given):
        try:
            trace = with_inferred_sessions(trace, force=True)
        except ValueError as e:  # a sample or a tail-first view saved as .npz
            raise ConfigError(f"trace.sessions={mode}: {e}") from None
        trace.meta["sessions_source"] = "inferred"
        n = int(trace.session.max()) + 1 if trace.n_requests else 0
        log.info("trace.sessions=%s: %d sessions inferred from prefix chains (sim_core/traces/sessions.py) for %d requests%s",
                 mode, n, trace.n_requests, ", replacing the trace's own ids" if given else "")
    else:
        # read off the trace, not a saved record: an .npz of an inferred trace stays "inferred"
        trace.meta.pop("sessions_source", None)
        trace.meta["sessions_source"] = sessions_source(trace)
        if not given:
            log.info("trace.sessions=given: the trace has no session ids, which session-level policies and "
                     "measurements need (trace.sessions=auto infers them from prefix chains)")
    return trace


def _head(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(64)


def _reblocked(trace, tc: Mapping):
    """The trace at trace.block_tokens (null: as it is)."""
    bt = _get(tc, "block_tokens")
    if bt is None or int(bt) == trace.block_tokens:
        return trace
    try:
        return reblock(trace, int(bt))
    except ValueError as e:
        raise ConfigError(f"trace.block_tokens={bt}: {e}") from None


def _load_native(path: Path, fmt: str, name: str | None):
    """Trace.load, not loaders.load_native: its errors already name the file and the bad
    field, and the loaders' context_tokens/cache_dir do not apply (the file is replayed
    as saved)."""
    if fmt not in ("auto", "native"):
        log.info("%s is an .npz archive: reading it as a native trace (trace.format=%s ignored)", path, fmt)
    try:
        t = Trace.load(path)
    except ValueError as e:
        looks_json = _head(path).lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"{", b"[")
        jsonl = [n for n, f in REGISTRY.items() if f.sniff is not None]
        hint = f"; read it with trace.format={', '.join(jsonl[:-1])} or {jsonl[-1]}" if looks_json else ""
        raise ConfigError(f"{e}{hint}") from None
    if name:
        t.name = name
    return t


def _load_file(path: Path, fmt: str, tc: Mapping, name: str | None):
    # a zip archive is never JSONL: read it as native whatever the trace group's format says
    if not path.is_dir() and (fmt == "native" or (fmt == "auto" and path.suffix == ".npz")
                              or _head(path).startswith(b"PK\x03\x04")):
        return _reblocked(_load_native(path, fmt, name), tc)
    if fmt == "auto":
        fmt = detect_format(path)
    f = REGISTRY[fmt]
    kwargs: dict[str, Any] = {}
    if _get(tc, "context_tokens") and "context_tokens" in f.options:
        kwargs["context_tokens"] = int(_get(tc, "context_tokens"))
    for key, (opt, owners) in SETTINGS.items():
        value = _get(tc, key)
        if value is None:
            continue
        if key not in f.options:
            raise ConfigError(f"trace.{key} applies to format(s) {', '.join(owners)}; {path} is {fmt}")
        kwargs[key] = {"file": lambda v: str(Path(str(v)).expanduser()), "int": int, "unit": str,
                       "bool": bool}[opt.kind](value)
    for opt in f.settings:
        if opt.required and opt.name not in kwargs:
            raise ConfigError(f"{path} is a {fmt} trace: it needs trace.{opt.name}={opt.example}")
    if _get(tc, "block_tokens") is not None:
        kwargs["block_tokens"] = int(_get(tc, "block_tokens"))
    if _get(tc, "cache_dir"):
        kwargs["cache_dir"] = str(_get(tc, "cache_dir"))
    try:
        return load_trace(str(path), fmt, name=name, **kwargs)
    except ValueError as e:  # a block size that is not a multiple of the file's
        if str(e).startswith("cannot re-block"):
            raise ConfigError(f"trace.block_tokens={kwargs['block_tokens']}: {e}") from None
        raise


def load(tc: Mapping, choice: str):
    """The Trace selected by the `trace` config group (name and source set)."""
    check_trace_config(tc, choice)
    name = _get(tc, "name")
    name = str(name) if name not in (None, "") else None  # trace.name=2024 arrives as an int
    path = _get(tc, "path")
    if path:
        p = Path(str(path)).expanduser()
        trace = _load_file(p, str(_get(tc, "format") or "auto"), tc, name or p.stem.split(".")[0])
    elif _get(tc, "bundled"):
        trace = _load_file(Path(bundled_path(str(_get(tc, "bundled")))), str(_get(tc, "format") or "auto"), tc,
                           name or choice)
    else:
        trace = week_maker(tc, sessions=False)(0)
    mr = _get(tc, "max_requests")
    if mr is not None and int(mr) < trace.n_requests:
        trace = trace.subset(int(mr))
    if trace.n_accesses == 0:
        raise ConfigError(f"trace {trace.name!r} is empty (no block accesses)")
    # last: sessions are inferred from the requests replayed, at the block size replayed
    return apply_sessions(trace, sessions_mode(tc))


def weeks(tc: Mapping) -> int:
    """trace.weeks: how many independent weeks of the synthetic profile (sweep/weeks.py)."""
    return int(_get(tc, "weeks") or 1)


def week_maker(tc: Mapping, *, sessions: bool = True):
    """week -> that week of the synthetic trace `tc` configures (week 0: the seed's own),
    at trace.block_tokens when set, with trace.sessions applied unless `sessions` is False
    (:func:`load` applies it after max_requests)."""
    kwargs = {"seed": int(_get(tc, "seed") or 0)}
    if _get(tc, "scale") is not None:
        kwargs["scale"] = _get(tc, "scale")
    if _get(tc, "concurrency") is not None:
        kwargs["concurrency"] = int(_get(tc, "concurrency"))
    name = _get(tc, "name")
    profile = str(_get(tc, "profile"))

    def make(week: int):
        n = weeks(tc)
        log.info("generating a synthetic %s trace (%s%s)", profile, ", ".join(f"{k}={v}" for k, v in kwargs.items()),
                 f", week {week + 1} of {n}" if n > 1 else "")
        trace = synth.generate(profile, week=week, **kwargs)
        if name not in (None, ""):
            trace.name = str(name)
        trace = _reblocked(trace, tc)
        return apply_sessions(trace, sessions_mode(tc)) if sessions else trace

    return make


def experiment_name(trace, override: str | None = None) -> str:
    if override:
        return str(override)
    return trace.name if trace.source == "real" else f"{trace.name}-synthetic"


# --------------------------------------------------------------- Ray transport
def to_payload(trace) -> dict:
    """Plain dict for ray.put: numpy arrays become zero-copy read-only views in workers.
    A sim_core.traces.sample.SampleSet travels as its samples."""
    if isinstance(trace, SampleSet):
        return {"kind": "samples", "name": trace.name, "source": trace.source, "block_tokens": trace.block_tokens,
                "n_accesses": trace.n_accesses, "requests": getattr(trace, "requests", None),
                "samples": [(list(k), to_payload(t)) for k, t in trace._samples.items()]}
    d = {k: getattr(trace, k) for k in _ARRAYS}
    d.update(block_tokens=trace.block_tokens, name=trace.name, source=trace.source,
             dropped_requests=trace.dropped_requests, meta=dict(trace.meta), depth=trace.depth,
             source_ids=trace.source_ids, full_blocks=trace.full_blocks, tool_wait_s=trace.tool_wait_s)
    return d


def from_payload(d: dict):
    if d.get("kind") == "samples":
        return SampleSet(d["name"], d["source"], d["block_tokens"], d["n_accesses"],
                         {tuple(k): from_payload(p) for k, p in d["samples"]}, d.get("requests"))
    arrays = {k: d[k] for k in _ARRAYS}
    for k, a in arrays.items():
        if not isinstance(a, np.ndarray):
            raise TypeError(f"trace payload field {k} is {type(a)}")
    # ray.get gives read-only arrays, which numba types apart from the driver's writable ones:
    # every kernel taking one would compile twice. Per-request arrays are copied (cheap); the
    # blocks stay shared.
    arrays = {k: a if k == "blocks" else a.copy() for k, a in arrays.items()}
    return Trace(**arrays, block_tokens=d["block_tokens"], name=d["name"], source=d["source"],
                 dropped_requests=d["dropped_requests"], meta=d["meta"], depth=d.get("depth"),
                 source_ids=d.get("source_ids"), full_blocks=d.get("full_blocks"), tool_wait_s=d.get("tool_wait_s"))


def payload_bytes(d: dict) -> int:
    if d.get("kind") == "samples":
        return sum(payload_bytes(p) for _, p in d["samples"]) + sum(a.nbytes for a in d.get("requests") or ())
    return sum(getattr(v, "nbytes", 0) for v in d.values())


def summarize(trace) -> tuple[dict, str]:
    """(flat summary dict, formatted text): sim_core.traces.summary plus the request-size and
    reuse numbers it lacks. Weeks held as samples (sweep.weeks) give their first week's."""
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
    if isinstance(d, Mapping):
        for k, v in d.items():
            out.update(flatten(v, f"{prefix}{k}."))
    else:
        out[prefix[:-1]] = d
    return out
