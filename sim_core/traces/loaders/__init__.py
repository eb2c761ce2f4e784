"""Trace loaders: real request traces (JSONL) and the native .npz format -> `Trace`.

All JSONL loaders stream the file line by line (plain or ``.gz``), validate every
record, append to flat ``array`` buffers and build the CSR arrays once at the end.
Requests are stable-sorted by arrival time (out-of-order timestamps are reordered,
never rejected), requests whose input exceeds ``context_tokens`` are dropped and
counted in ``Trace.dropped_requests`` (and ``meta["dropped_requests"]``), and block
hashes are remapped to dense int32 ids in order of first appearance
(:func:`sim_core.traces.file.remap_dense_ids`). Hash ids are global to one trace file.

Common rules for every JSONL format
-----------------------------------
* One JSON object per line; blank lines are skipped; the line number in error
  messages is the 1-based physical line of the file.
* Any malformed record raises :class:`TraceFormatError` (a ``ValueError``) whose
  message reads ``<file>:<line>: field '<name>': <what is wrong>``: invalid JSON,
  a line that is not an object, a missing required field, a wrong type (block-hash
  lists must be JSON arrays of integers; timestamps finite numbers or numeric
  strings, in a unit detected per file (times.py); lengths non-negative integers). A file without any request fails with "no requests".
* Optional fields may be absent or ``null``. Integer fields also accept integral
  floats (``12.0``); booleans are never accepted as numbers.
* Block hashes are 64-bit integers, signed or unsigned: values in 2^63..2^64-1 are
  folded onto negative int64 (two's complement; only equality matters, so this is
  exact as long as one file does not mix negative and >= 2^63 hashes).
* Input tokens of a request = its input-length field (never changed; a block size the
  lengths contradict is inferred: blocksize.py), or ``len(hashes) * block_tokens``
  when the field is absent (token formats: ``len(token_ids)``). Requests with input tokens >
  ``context_tokens`` (default: the model config's window, 262,144 for
  Qwen3-Coder-30B; ``None`` disables the filter) are dropped.
* ``Trace.source`` is ``"real"``; ``Trace.name`` defaults to the file name without
  ``.gz`` / ``.jsonl`` / ``.json``.
* Ids that are not prefix-chained are re-chained by position (builder.py; docs/traces.md).

Registry
--------
One module per format over a shared line reader (lines.py) and CSR builder (builder.py).
A module is a format when it defines ``FORMAT`` (a :class:`~.format.TraceFormat`: name,
reader, ``format=auto`` sniffer, options); this package finds them at import, as
``sim_core.policies`` finds policies: adding a format is adding one module. The formats
are listed in :data:`FORMATS` and described by :func:`describe_formats`.
"""
from __future__ import annotations

import errno
import hashlib
import logging
import os
import pkgutil
import uuid
from importlib import import_module
from pathlib import Path
from typing import Any

from ..trace import Trace
from ..file import NATIVE_FORMAT_VERSION
from .builder import DEFAULT_CONTEXT_TOKENS
from .format import Option, TraceFormat
from .lines import TraceFormatError, check_exists, default_name, iter_records

log = logging.getLogger(__name__)

REGISTRY: dict[str, TraceFormat] = {}
for _info in pkgutil.iter_modules(__path__):
    _mod = import_module(f"{__name__}.{_info.name}")
    _fmt = getattr(_mod, "FORMAT", None)
    if isinstance(_fmt, TraceFormat):
        if _fmt.name in REGISTRY or _fmt.name == "auto":
            raise RuntimeError(f"duplicate trace format name {_fmt.name!r} in {_info.name}")
        REGISTRY[_fmt.name] = _fmt
        globals()[_fmt.read.__name__] = _fmt.read  # load_mooncake, load_tokens, ...
REGISTRY = dict(sorted(REGISTRY.items(), key=lambda kv: (kv[1].order, kv[0])))

#: Every ``fmt=`` value: "auto" (sniff the file) and each registered format.
FORMATS = ("auto", *REGISTRY)

#: option name -> (its declaration, the formats that take it), in format order: what a
#: trace config may set besides the keys every format shares (sim_core.traces.config)
SETTINGS: dict[str, tuple[Option, tuple[str, ...]]] = {}
for _fmt in REGISTRY.values():
    for _opt in _fmt.settings:
        _known, _owners = SETTINGS.get(_opt.name, (_opt, ()))
        if _known != _opt:
            raise RuntimeError(f"trace formats {_owners[0]} and {_fmt.name} declare option {_opt.name!r} differently")
        SETTINGS[_opt.name] = (_opt, _owners + (_fmt.name,))
DATA_DIR = Path(__file__).resolve().parents[2] / "data"

# Bump when parsing changes in a way that alters the produced arrays: invalidates caches.
_LOADER_VERSION = 5  # 2: traces keep the file's block hashes (Trace.source_ids); 3: format options;
# 4: time units, block-size inference, re-chaining, tool waits; 5: relative times' unit from the span


# ---------------------------------------------------------------- bundled data
def bundled_path(name: str) -> Path:
    """Path of a file shipped in ``sim_core/data`` (e.g. ``"mooncake_conversation.jsonl"``).

    The extension may be omitted (``"mooncake_conversation"``).
    """
    if not name or Path(name).name != name or name in (".", ".."):
        raise ValueError(f"bundled file name must be a plain file name, got {name!r}")
    for candidate in (name, name + ".jsonl", name + ".jsonl.gz", name + ".npz"):
        p = DATA_DIR / candidate
        if p.is_file():
            return p
    available = sorted(p.name for p in DATA_DIR.iterdir() if p.is_file()) if DATA_DIR.is_dir() else []
    raise FileNotFoundError(errno.ENOENT, f"no bundled file {name!r} (available: {available})",
                            str(DATA_DIR / name))


# ------------------------------------------------------------------- dispatch
def get_format(fmt: str) -> TraceFormat:
    if fmt not in REGISTRY:
        raise ValueError(f"unknown trace format {fmt!r}; valid formats: {', '.join(FORMATS)}")
    return REGISTRY[fmt]


def describe_formats() -> dict[str, str]:
    """name -> one-line description, in :data:`FORMATS` order."""
    return {name: f.description for name, f in REGISTRY.items()}


def detect_format(path: str | Path) -> str:
    """A format whose suffix the file has (``native`` for .npz), else the one format whose
    sniffer claims the first non-blank JSON object."""
    path = Path(path)
    check_exists(path, directory=True)
    for f in REGISTRY.values():
        if path.suffix in f.suffixes:
            return f.name
    for file, lineno, obj in iter_records(path):
        claims = [f.name for f in REGISTRY.values() if f.sniff is not None and f.sniff(obj)]
        if path.is_dir():  # a directory: only the formats that read one
            claims = [c for c in claims if REGISTRY[c].directories]
        if len(claims) == 1:
            return claims[0]
        what = (f"formats {' and '.join(claims)} both read records" if claims
                else "cannot detect the trace format")
        raise TraceFormatError(
            f"{file}:{lineno}: {what} with keys {sorted(obj)[:20]}; pass fmt= one of {FORMATS[1:]}")
    raise TraceFormatError(f"{path}: no requests (empty file)")


def _option_stamp(kw: dict) -> list:
    """Options as they enter the cache key; a file option (tokenizer) with its size and mtime."""
    out = []
    for k in sorted(kw):
        v = kw[k]
        if k == "tokenizer" and v is not None and Path(v).expanduser().is_file():
            p = Path(v).expanduser()
            st = p.stat()
            v = (str(p.resolve()), st.st_size, st.st_mtime_ns)
        out.append((k, v if isinstance(v, (int, str, tuple, type(None))) else str(v)))
    return out


def _cache_file(cache_dir: Path, path: Path, fmt: str, kw: dict) -> Path:
    st = path.stat()
    key = repr((str(path.resolve()), st.st_size, st.st_mtime_ns, fmt,
                kw.get("context_tokens", DEFAULT_CONTEXT_TOKENS), _option_stamp(kw),
                _LOADER_VERSION, NATIVE_FORMAT_VERSION))
    digest = hashlib.sha256(key.encode()).hexdigest()[:20]
    return cache_dir / f"{default_name(path)}.{fmt}.{digest}.npz"


def _read(f: TraceFormat, path: Path, kw: dict) -> Trace:
    block_tokens = kw.pop("block_tokens", None)
    if f.hashes_tokens:
        return f.read(path, block_tokens=block_tokens, **kw)
    trace = f.read(path, **kw)
    if block_tokens is not None and block_tokens != trace.block_tokens:
        from ..reblock import reblock

        trace = reblock(trace, block_tokens)
    return trace


def load_trace(path: str | Path, fmt: str = "auto", *, cache_dir: str | Path | None = None,
               **kw: Any) -> Trace:
    """Load a trace of format ``fmt`` (one of :data:`FORMATS`).

    ``kw`` goes to the format's reader: ``name`` always, and the options its module
    declares (``context_tokens`` for the JSONL formats; ``tokenizer`` for text;
    ``file_block_tokens``, ``time_unit``, ``rechain`` for the hash formats). ``path`` may be a
    directory of per-session files for the formats that read one (``lmcache_agent``,
    ``kvcache_tester``). ``block_tokens=B`` is the block size of the
    trace: token formats hash at B, the others are re-blocked to B (a multiple of the
    file's block size; :func:`sim_core.traces.reblock`). With ``cache_dir`` a parsed JSONL trace
    is stored there in native format, keyed by (absolute path, size, mtime, fmt,
    options), and later calls load that file instead of re-parsing.
    """
    f = get_format(fmt) if fmt != "auto" else None
    path = Path(path)
    check_exists(path, directory=True)
    if f is None:
        f = REGISTRY[detect_format(path)]
    if path.is_dir() and not f.directories:
        readers = [n for n, g in REGISTRY.items() if g.directories]
        raise IsADirectoryError(errno.EISDIR, f"format {f.name} reads one file, not a directory (formats that read "
                                              f"a directory of per-session files: {', '.join(readers)})", str(path))
    allowed = {"name", "block_tokens", *f.options}
    unexpected = set(kw) - allowed
    if unexpected:
        raise TypeError(f"{f.name} traces accept only {', '.join(sorted(allowed))}=, got {sorted(unexpected)}")
    if cache_dir is None or not f.cacheable or path.is_dir():  # a directory's mtime misses its files' edits
        return _read(f, path, dict(kw))

    cache_dir = Path(cache_dir)
    cached = _cache_file(cache_dir, path, f.name, kw)
    if cached.is_file():
        try:
            trace = Trace.load(cached)
            log.info("loaded %s from cache %s", path, cached)
            return trace
        except Exception as e:  # a broken cache entry is re-parsed, never fatal
            log.warning("ignoring unreadable trace cache %s (%s); re-parsing %s", cached, e, path)
    trace = _read(f, path, dict(kw))
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = cache_dir / f".{cached.stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}.npz"
    try:
        trace.save(tmp)
        os.replace(tmp, cached)  # atomic: concurrent loaders never see half a file
    finally:
        tmp.unlink(missing_ok=True)
    return trace


__all__ = [
    "DEFAULT_CONTEXT_TOKENS", "FORMATS", "Option", "REGISTRY", "SETTINGS", "TraceFormat", "TraceFormatError",
    "bundled_path", "describe_formats", "detect_format", "get_format", "load_trace",
    *(f.read.__name__ for f in REGISTRY.values()),
]
