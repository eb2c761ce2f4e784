"""Trace loaders: real request traces (JSONL) and the native .npz format -> `Trace`.

All JSONL loaders stream the file line by line (plain or ``.gz``), validate every
record, append to flat ``array`` buffers and build the CSR arrays once at the end.
Requests are stable-sorted by arrival time (out-of-order timestamps are reordered,
never rejected), requests whose input exceeds ``context_tokens`` are dropped and
counted in ``Trace.dropped_requests`` (and ``meta["dropped_requests"]``), and block
hashes are remapped to dense int32 ids in order of first appearance
(:func:`sim_core.trace_file.remap_dense_ids`). Hash ids are global to one trace file.

Common rules for every JSONL format
-----------------------------------
* One JSON object per line; blank lines are skipped; the line number in error
  messages is the 1-based physical line of the file.
* Any malformed record raises :class:`TraceFormatError` (a ``ValueError``) whose
  message reads ``<file>:<line>: field '<name>': <what is wrong>``: invalid JSON,
  a line that is not an object, a missing required field, a wrong type (block-hash
  lists must be JSON arrays of integers; timestamps finite numbers; lengths
  non-negative integers). A file without any request fails with "no requests".
* Optional fields may be absent or ``null``. Integer fields also accept integral
  floats (``12.0``); booleans are never accepted as numbers.
* Block hashes are 64-bit integers, signed or unsigned: values in 2^63..2^64-1 are
  folded onto negative int64 (two's complement; only equality matters, so this is
  exact as long as one file does not mix negative and >= 2^63 hashes).
* Input tokens of a request = its input-length field, or ``len(hashes) *
  block_tokens`` when the field is absent. Requests with input tokens >
  ``context_tokens`` (default: the model config's window, 262,144 for
  Qwen3-Coder-30B; ``None`` disables the filter) are dropped.
* ``Trace.source`` is ``"real"``; ``Trace.name`` defaults to the file name without
  ``.gz`` / ``.jsonl`` / ``.json``.

One module per format (mooncake, qwen_bailian, freeinference, native) over a shared line
reader (lines.py) and CSR builder (builder.py); this module dispatches by format.
"""
from __future__ import annotations

import errno
import hashlib
import logging
import os
import uuid
from pathlib import Path
from typing import Any, Callable

from ..trace import Trace
from ..trace_file import NATIVE_FORMAT_VERSION
from .builder import DEFAULT_CONTEXT_TOKENS
from .freeinference import load_freeinference
from .lines import TraceFormatError, check_exists, default_name, iter_objects
from .mooncake import load_mooncake
from .native import load_native
from .qwen_bailian import load_qwen_bailian

__all__ = [
    "DEFAULT_CONTEXT_TOKENS", "FORMATS", "TraceFormatError", "bundled_path", "detect_format",
    "load_freeinference", "load_mooncake", "load_native", "load_qwen_bailian", "load_trace",
]

log = logging.getLogger(__name__)

FORMATS = ("auto", "mooncake", "qwen_bailian", "freeinference", "native")
DATA_DIR = Path(__file__).resolve().parent.parent / "data"

# Bump when parsing changes in a way that alters the produced arrays: invalidates caches.
_LOADER_VERSION = 2  # 2: traces keep the file's block hashes (Trace.source_ids)


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


_LOADERS: dict[str, Callable[..., Trace]] = {
    "mooncake": load_mooncake,
    "qwen_bailian": load_qwen_bailian,
    "freeinference": load_freeinference,
}


# ------------------------------------------------------------------- dispatch
def detect_format(path: str | Path) -> str:
    """``native`` for .npz, else sniff the keys of the first non-blank JSON line."""
    path = Path(path)
    check_exists(path)
    if path.suffix == ".npz":
        return "native"
    for lineno, obj in iter_objects(path):
        keys = set(obj)
        if "requests" in keys:
            return "freeinference"
        if "chat_id" in keys:
            return "qwen_bailian"
        if "hash_ids" in keys and "timestamp" in keys:
            return "mooncake"
        raise TraceFormatError(
            f"{path}:{lineno}: cannot detect the trace format from keys {sorted(keys)}; "
            f"pass fmt= one of {FORMATS[1:]}")
    raise TraceFormatError(f"{path}: no requests (empty file)")


def _cache_file(cache_dir: Path, path: Path, fmt: str, kw: dict) -> Path:
    st = path.stat()
    key = repr((str(path.resolve()), st.st_size, st.st_mtime_ns, fmt,
                kw.get("context_tokens", DEFAULT_CONTEXT_TOKENS), kw.get("name"),
                _LOADER_VERSION, NATIVE_FORMAT_VERSION))
    digest = hashlib.sha256(key.encode()).hexdigest()[:20]
    return cache_dir / f"{default_name(path)}.{fmt}.{digest}.npz"


def load_trace(path: str | Path, fmt: str = "auto", *, cache_dir: str | Path | None = None,
               **kw: Any) -> Trace:
    """Load a trace of format ``fmt`` (one of :data:`FORMATS`).

    ``kw`` goes to the format's loader (``name``, ``context_tokens``; native takes only
    ``name``). With ``cache_dir`` a parsed JSONL trace is stored there in native format,
    keyed by (absolute path, size, mtime, fmt, context_tokens, name), and later calls
    load that file instead of re-parsing.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown trace format {fmt!r}; valid formats: {', '.join(FORMATS)}")
    path = Path(path)
    check_exists(path)
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt == "native":
        unexpected = set(kw) - {"name"}
        if unexpected:
            raise TypeError(f"native traces accept only name=, got {sorted(unexpected)}")
        return load_native(path, **kw)
    loader = _LOADERS[fmt]
    if cache_dir is None:
        return loader(path, **kw)

    cache_dir = Path(cache_dir)
    cached = _cache_file(cache_dir, path, fmt, kw)
    if cached.is_file():
        try:
            trace = Trace.load(cached)
            log.info("loaded %s from cache %s", path, cached)
            return trace
        except Exception as e:  # a broken cache entry is re-parsed, never fatal
            log.warning("ignoring unreadable trace cache %s (%s); re-parsing %s", cached, e, path)
    trace = loader(path, **kw)
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = cache_dir / f".{cached.stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}.npz"
    try:
        trace.save(tmp)
        os.replace(tmp, cached)  # atomic: concurrent loaders never see half a file
    finally:
        tmp.unlink(missing_ok=True)
    return trace
