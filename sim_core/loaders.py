"""Trace loaders: real request traces (JSONL) and the native .npz format -> `Trace`.

All JSONL loaders stream the file line by line (plain or ``.gz``), validate every
record, append to flat ``array`` buffers and build the CSR arrays once at the end.
Requests are stable-sorted by arrival time (out-of-order timestamps are reordered,
never rejected), requests whose input exceeds ``context_tokens`` are dropped and
counted in ``Trace.dropped_requests`` (and ``meta["dropped_requests"]``), and block
hashes are remapped to dense int32 ids in order of first appearance
(:func:`sim_core.trace.remap_dense`). Hash ids are global to one trace file.

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
  ``context_tokens`` (default 262,144: Qwen3-Coder-30B's 256K window; ``None``
  disables the filter) are dropped.
* ``Trace.source`` is ``"real"``; ``Trace.name`` defaults to the file name without
  ``.gz`` / ``.jsonl`` / ``.json``.

Mooncake (``fmt="mooncake"``, block_tokens = 512)
-------------------------------------------------
Mooncake FAST'25 traces (github kvcache-ai/Mooncake)::

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 1]}

=================  ========  =====================================================
field              required  meaning
=================  ========  =====================================================
``timestamp``      yes       arrival in milliseconds (number); arrival_s = ts/1000
``hash_ids``       yes       list of ints: prefix-chained 512-token block hashes
``input_length``   no        prompt tokens (int >= 0)
``output_length``  no        generated tokens (int >= 0; 0 when absent)
=================  ========  =====================================================

Sessions are unknown: ``session = -1`` for every request.

Qwen Bailian (``fmt="qwen_bailian"``, block_tokens = 16)
--------------------------------------------------------
Alibaba Bailian traces of "KVCache Cache in the Wild" (ATC'25)::

    {"chat_id": 7, "parent_chat_id": 3, "timestamp": 61.25, "input_length": 912,
     "output_length": 88, "type": "text", "turn": 2, "hash_ids": [0, 1, 2, 95]}

==================  ========  ====================================================
field               required  meaning
==================  ========  ====================================================
``chat_id``         yes       request id (int >= 0), unique within the file
``timestamp``       yes       arrival in seconds (number)
``hash_ids``        yes       list of ints: prefix-chained 16-token block hashes
``parent_chat_id``  no        chat_id of the previous turn; absent, null or
                              negative (conventionally -1) = first turn
``input_length``    no        prompt tokens (int >= 0)
``output_length``   no        generated tokens (int >= 0; 0 when absent)
``type``            no        request type (string; counted in ``meta["types"]``)
``turn``            no        turn number in the conversation (int >= 0)
==================  ========  ====================================================

``session`` is the root ``chat_id`` reached by following ``parent_chat_id`` links
(parents may appear anywhere in the file; dropped requests still link their
children). A chat whose parent id does not occur in the file is its own root. A
duplicated ``chat_id`` or a cycle of parent links is a format error.

FreeInference agentic trace (``fmt="freeinference"``, block_tokens = 16)
------------------------------------------------------------------------
github HarvardMadSys/freeinference_agentic_trace, raw ``traces/<day>.jsonl``: one
top-level agent *session* per line. A session object::

    {"session_id": "s-1",                 # or "id"; string or int; required
     "requests": [                        # required list, may be empty
        {"start_ms": 1778977459236,       # required number, arrival in ms
         "block_ids": [123, 456, 789],    # required list of ints, 16-token blocks
         "input_tokens": 40,              # optional, alias "input_length"
         "output_tokens": 230,            # optional, alias "output_length"
         "tool_calls": [                  # optional list (or null) of objects
            {"name": "task", "subagent": <session object> or null}]}]}

Only the keys above are read; every other key (``week``, ``provider_tokens``,
``role_tokens``, ``mutation``, ...) is ignored. When both spellings of a key are
present the first listed wins. ``arrival_s = start_ms / 1000`` (Unix epoch
seconds). Flattening: every session, top-level or nested under a tool call's
``subagent`` (recursively, to any depth), becomes its own session with a new dense
id 0, 1, 2, ... assigned in file order, depth first (a session gets its id before
the subagents it spawns); all requests of all sessions are then ordered by arrival
(ties keep this depth-first order). Error messages name nested fields by their
path, e.g. ``field 'requests[3].tool_calls[0].subagent.requests[1].block_ids'``.

Native (``fmt="native"``)
-------------------------
The ``.npz`` written by :meth:`Trace.save`; see :func:`load_native`.
"""
from __future__ import annotations

import errno
import gzip
import hashlib
import json
import logging
import math
import os
import uuid
import zipfile
from array import array
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from .models import QWEN3_CODER_30B
from .trace import NATIVE_FORMAT_VERSION, Trace, remap_dense

__all__ = [
    "DEFAULT_CONTEXT_TOKENS", "FORMATS", "TraceFormatError", "bundled_path", "detect_format",
    "load_freeinference", "load_mooncake", "load_native", "load_qwen_bailian", "load_trace",
]

log = logging.getLogger(__name__)

#: Requests longer than the default model's context window are dropped (the model
#: config owns the number: Qwen3-Coder-30B, 256K tokens).
DEFAULT_CONTEXT_TOKENS = QWEN3_CODER_30B.context_tokens
FORMATS = ("auto", "mooncake", "qwen_bailian", "freeinference", "native")
DATA_DIR = Path(__file__).resolve().parent / "data"

# Bump when parsing changes in a way that alters the produced arrays: invalidates caches.
_LOADER_VERSION = 1
_U64 = 1 << 64
_I64_MAX = (1 << 63) - 1
_REPR_MAX = 60


class TraceFormatError(ValueError):
    """Malformed trace input. The message names file, 1-based line and field."""


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


# ------------------------------------------------------------- line iteration
def _check_exists(path: Path) -> None:
    if not path.exists():
        raise FileNotFoundError(errno.ENOENT, "trace file not found", str(path))
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "expected a trace file, got a directory", str(path))


def _open_binary(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def _iter_objects(path: Path) -> Iterator[tuple[int, dict]]:
    """Yield (1-based line number, parsed JSON object) for every non-blank line."""
    where = str(path)
    with _open_binary(path) as f:
        for lineno, raw in enumerate(f, 1):
            raw = raw.strip()
            if not raw:
                continue
            try:
                obj = json.loads(raw)
            except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
                detail = f"{e.msg} (column {e.colno})" if isinstance(e, json.JSONDecodeError) else str(e)
                raise TraceFormatError(f"{where}:{lineno}: invalid JSON: {detail}") from None
            if not isinstance(obj, dict):
                raise TraceFormatError(
                    f"{where}:{lineno}: expected a JSON object, got {type(obj).__name__} {_short(obj)}")
            yield lineno, obj


def _default_name(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".jsonl", ".json"):
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
    return name


def _short(value: Any) -> str:
    r = repr(value)
    return r if len(r) <= _REPR_MAX else r[: _REPR_MAX - 3] + "..."


# ------------------------------------------------------------ field checking
class _Line:
    """Validation context of one input line: raises errors that name file:line:field."""

    __slots__ = ("where", "lineno")

    def __init__(self, where: str, lineno: int) -> None:
        self.where = where
        self.lineno = lineno

    def fail(self, field: str, msg: str) -> TraceFormatError:
        return TraceFormatError(f"{self.where}:{self.lineno}: field '{field}': {msg}")

    def required(self, obj: dict, key: str, field: str | None = None) -> Any:
        value = obj.get(key)
        if value is None:
            what = "missing required field" if key not in obj else "required field is null"
            raise self.fail(field or key, what)
        return value

    def number(self, value: Any, field: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(field, f"expected a number, got {_short(value)}")
        value = float(value)
        if not math.isfinite(value):
            raise self.fail(field, f"expected a finite number, got {value!r}")
        return value

    def integer(self, value: Any, field: str, *, minimum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not value.is_integer()
        ):
            raise self.fail(field, f"expected an integer, got {_short(value)}")
        value = int(value)
        if minimum is not None and value < minimum:
            raise self.fail(field, f"expected an integer >= {minimum}, got {value}")
        if abs(value) > _I64_MAX:
            raise self.fail(field, f"integer out of the int64 range: {value}")
        return value

    def optional_integer(self, obj: dict, keys: tuple[str, ...], field_prefix: str = "",
                         *, minimum: int | None = 0) -> int | None:
        for key in keys:
            value = obj.get(key)
            if value is not None:
                return self.integer(value, field_prefix + key, minimum=minimum)
        return None

    def hashes(self, value: Any, field: str) -> array:
        """A JSON list of integer block hashes -> array('q')."""
        if not isinstance(value, list):
            raise self.fail(field, f"expected a list of integers, got {_short(value)}")
        try:
            out = array("q", value)
        except (TypeError, OverflowError):
            out = None
        if out is not None and bool not in map(type, value):
            return out
        folded = []
        for i, x in enumerate(value):
            if isinstance(x, bool) or not isinstance(x, int):
                raise self.fail(field, f"expected a list of integers, got {_short(x)} at index {i}")
            if x > _I64_MAX:
                if x >= _U64:
                    raise self.fail(field, f"hash {x} at index {i} does not fit in 64 bits")
                x -= _U64  # unsigned 64-bit hash -> two's complement int64
            elif x < -_I64_MAX - 1:
                raise self.fail(field, f"hash {x} at index {i} does not fit in 64 bits")
            folded.append(x)
        return array("q", folded)


# ----------------------------------------------------------------- CSR builder
class _Builder:
    """Accumulates kept requests in flat buffers; builds the sorted, dense `Trace`."""

    def __init__(self, path: Path, block_tokens: int, context_tokens: int | None) -> None:
        self.path = path
        self.block_tokens = block_tokens
        self.context_tokens = context_tokens
        self.blocks = array("q")
        self.lengths = array("q")
        self.arrival = array("d")
        self.session = array("q")
        self.input_tokens = array("q")
        self.output_tokens = array("q")
        self.seen = 0
        self.dropped = 0

    def input_tokens_of(self, length: int | None, hashes: array) -> int:
        return len(hashes) * self.block_tokens if length is None else length

    def add(self, hashes: array, arrival_s: float, session: int, input_tokens: int,
            output_tokens: int) -> bool:
        self.seen += 1
        if self.context_tokens is not None and input_tokens > self.context_tokens:
            self.dropped += 1
            return False
        self.blocks.extend(hashes)
        self.lengths.append(len(hashes))
        self.arrival.append(arrival_s)
        self.session.append(session)
        self.input_tokens.append(input_tokens)
        self.output_tokens.append(output_tokens)
        return True

    def build(self, loader: str, name: str | None, extra_meta: dict | None = None) -> Trace:
        where = str(self.path)
        if self.seen == 0:
            raise TraceFormatError(f"{where}: no requests (the file holds no records)")
        if not self.lengths:
            raise TraceFormatError(
                f"{where}: no requests left: all {self.dropped} exceed context_tokens={self.context_tokens}")
        lengths = np.frombuffer(self.lengths, dtype=np.int64)
        raw = np.frombuffer(self.blocks, dtype=np.int64)
        arrival = np.frombuffer(self.arrival, dtype=np.float64)
        session = np.frombuffer(self.session, dtype=np.int64)
        itok = np.frombuffer(self.input_tokens, dtype=np.int64)
        otok = np.frombuffer(self.output_tokens, dtype=np.int64)

        reordered = bool(np.any(np.diff(arrival) < 0))
        if reordered:
            order = np.argsort(arrival, kind="stable")
            starts = np.zeros(len(lengths), dtype=np.int64)
            np.cumsum(lengths[:-1], out=starts[1:])
            lengths = lengths[order]
            new_starts = np.zeros(len(lengths), dtype=np.int64)
            np.cumsum(lengths[:-1], out=new_starts[1:])
            gather = np.arange(len(raw), dtype=np.int64) + np.repeat(starts[order] - new_starts, lengths)
            raw = raw[gather]
            arrival, session, itok, otok = arrival[order], session[order], itok[order], otok[order]

        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        blocks, n_unique = remap_dense(raw)
        meta = {
            "loader": loader,
            "path": str(self.path.resolve()),
            "context_tokens": self.context_tokens,
            "records": self.seen,
            "dropped_requests": self.dropped,
            "reordered": reordered,
            "unique_blocks": int(n_unique),
        }
        meta.update(extra_meta or {})
        trace = Trace(offsets, blocks, arrival.copy(), session.copy(), itok.copy(), otok.copy(),
                      block_tokens=self.block_tokens, name=name or _default_name(self.path),
                      source="real", dropped_requests=self.dropped, meta=meta)
        log.info("loaded %s (%s): %d requests, %d block accesses, %d unique blocks, %d dropped",
                 self.path, loader, trace.n_requests, trace.n_accesses, n_unique, self.dropped)
        return trace


# --------------------------------------------------------------------- loaders
def load_mooncake(path: str | Path, *, name: str | None = None,
                  context_tokens: int | None = DEFAULT_CONTEXT_TOKENS) -> Trace:
    """Mooncake JSONL trace (512-token blocks, timestamps in ms, no sessions)."""
    path = Path(path)
    _check_exists(path)
    b = _Builder(path, 512, context_tokens)
    where = str(path)
    for lineno, obj in _iter_objects(path):
        ln = _Line(where, lineno)
        ts = ln.number(ln.required(obj, "timestamp"), "timestamp")
        hashes = ln.hashes(ln.required(obj, "hash_ids"), "hash_ids")
        ilen = ln.optional_integer(obj, ("input_length",))
        olen = ln.optional_integer(obj, ("output_length",))
        b.add(hashes, ts / 1000.0, -1, b.input_tokens_of(ilen, hashes), olen or 0)
    return b.build("mooncake", name)


def load_qwen_bailian(path: str | Path, *, name: str | None = None,
                      context_tokens: int | None = DEFAULT_CONTEXT_TOKENS) -> Trace:
    """Alibaba Qwen Bailian JSONL trace (16-token blocks, seconds, sessions from parent links)."""
    path = Path(path)
    _check_exists(path)
    b = _Builder(path, 16, context_tokens)
    where = str(path)
    parent_of: dict[int, int] = {}  # chat_id -> parent chat_id (-1 = root)
    line_of: dict[int, int] = {}    # chat_id -> line number (duplicates, cycle reports)
    kept_chat = array("q")          # chat_id of every kept request, in file order
    types: dict[str, int] = {}
    for lineno, obj in _iter_objects(path):
        ln = _Line(where, lineno)
        chat = ln.integer(ln.required(obj, "chat_id"), "chat_id", minimum=0)
        if chat in line_of:
            raise ln.fail("chat_id", f"duplicate chat_id {chat} (first seen on line {line_of[chat]})")
        parent = obj.get("parent_chat_id")
        parent = -1 if parent is None else ln.integer(parent, "parent_chat_id")
        ts = ln.number(ln.required(obj, "timestamp"), "timestamp")
        hashes = ln.hashes(ln.required(obj, "hash_ids"), "hash_ids")
        ilen = ln.optional_integer(obj, ("input_length",))
        olen = ln.optional_integer(obj, ("output_length",))
        kind = obj.get("type")
        if kind is not None:
            if not isinstance(kind, str):
                raise ln.fail("type", f"expected a string, got {_short(kind)}")
            types[kind] = types.get(kind, 0) + 1
        if obj.get("turn") is not None:
            ln.integer(obj["turn"], "turn", minimum=0)
        parent_of[chat] = parent if parent >= 0 else -1
        line_of[chat] = lineno
        # Session is resolved after the whole file is read (parents may come later).
        if b.add(hashes, ts, -1, b.input_tokens_of(ilen, hashes), olen or 0):
            kept_chat.append(chat)

    root_of: dict[int, int] = {}

    def root(chat: int) -> int:
        chain = []
        on_chain = set()
        node = chat
        while node not in root_of:
            parent = parent_of.get(node, -1)
            if parent < 0 or parent not in parent_of:  # first turn, or unknown parent
                root_of[node] = node
                break
            if node in on_chain:
                raise TraceFormatError(f"{where}:{line_of[chat]}: field 'parent_chat_id': "
                                       f"cycle of parent links through chat_id {node}")
            chain.append(node)
            on_chain.add(node)
            node = parent
        r = root_of[node]
        for c in chain:
            root_of[c] = r
        return r

    for i, chat in enumerate(kept_chat):
        b.session[i] = root(chat)
    orphans = sum(1 for c, p in parent_of.items() if p >= 0 and p not in parent_of)
    return b.build("qwen_bailian", name, {"types": types, "unknown_parents": orphans})


def load_freeinference(path: str | Path, *, name: str | None = None,
                       context_tokens: int | None = DEFAULT_CONTEXT_TOKENS) -> Trace:
    """FreeInference agentic JSONL trace: one session per line, subagent sessions flattened."""
    path = Path(path)
    _check_exists(path)
    b = _Builder(path, 16, context_tokens)
    where = str(path)
    n_sessions = 0
    n_subagents = 0

    def walk(ln: _Line, sess: Any, prefix: str) -> None:
        nonlocal n_sessions, n_subagents
        if not isinstance(sess, dict):
            raise ln.fail(prefix.rstrip(".") or "session",
                          f"expected a session object, got {_short(sess)}")
        sid = sess.get("session_id")
        if sid is None:
            sid = sess.get("id")
        if sid is None:
            raise ln.fail(prefix + "session_id", "missing required field (also accepted: 'id')")
        if isinstance(sid, bool) or not isinstance(sid, (str, int)):
            raise ln.fail(prefix + "session_id", f"expected a string or integer, got {_short(sid)}")
        requests = ln.required(sess, "requests", prefix + "requests")
        if not isinstance(requests, list):
            raise ln.fail(prefix + "requests", f"expected a list of request objects, got {_short(requests)}")
        session_id = n_sessions
        n_sessions += 1
        for i, req in enumerate(requests):
            rp = f"{prefix}requests[{i}]"
            if not isinstance(req, dict):
                raise ln.fail(rp, f"expected a request object, got {_short(req)}")
            start = ln.number(ln.required(req, "start_ms", rp + ".start_ms"), rp + ".start_ms")
            hashes = ln.hashes(ln.required(req, "block_ids", rp + ".block_ids"), rp + ".block_ids")
            ilen = ln.optional_integer(req, ("input_tokens", "input_length"), rp + ".")
            olen = ln.optional_integer(req, ("output_tokens", "output_length"), rp + ".")
            b.add(hashes, start / 1000.0, session_id, b.input_tokens_of(ilen, hashes), olen or 0)
            calls = req.get("tool_calls")
            if calls is None:
                continue
            if not isinstance(calls, list):
                raise ln.fail(rp + ".tool_calls", f"expected a list of tool-call objects, got {_short(calls)}")
            for j, call in enumerate(calls):
                cp = f"{rp}.tool_calls[{j}]"
                if not isinstance(call, dict):
                    raise ln.fail(cp, f"expected a tool-call object, got {_short(call)}")
                sub = call.get("subagent")
                if sub is not None:
                    n_subagents += 1
                    walk(ln, sub, cp + ".subagent.")

    for lineno, obj in _iter_objects(path):
        walk(_Line(where, lineno), obj, "")
    return b.build("freeinference", name, {"sessions": n_sessions, "subagent_sessions": n_subagents})


def load_native(path: str | Path, *, name: str | None = None) -> Trace:
    """A trace written by :meth:`Trace.save`; corrupt or partial files raise TraceFormatError."""
    path = Path(path)
    _check_exists(path)
    try:
        trace = Trace.load(path)
    except (zipfile.BadZipFile, KeyError, ValueError, SyntaxError, EOFError, OSError, IndexError,
            TypeError) as e:
        raise TraceFormatError(f"{path}: not a valid native trace (.npz): {type(e).__name__}: {e}") from e
    if name is not None:
        trace.name = name
    return trace


_LOADERS: dict[str, Callable[..., Trace]] = {
    "mooncake": load_mooncake,
    "qwen_bailian": load_qwen_bailian,
    "freeinference": load_freeinference,
}


# ------------------------------------------------------------------- dispatch
def detect_format(path: str | Path) -> str:
    """``native`` for .npz, else sniff the keys of the first non-blank JSON line."""
    path = Path(path)
    _check_exists(path)
    if path.suffix == ".npz":
        return "native"
    for lineno, obj in _iter_objects(path):
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
    return cache_dir / f"{_default_name(path)}.{fmt}.{digest}.npz"


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
    _check_exists(path)
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
