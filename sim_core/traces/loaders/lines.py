"""The line reader every JSONL trace format shares: open (plain or .gz), iterate JSON
objects with their 1-based line numbers, and check fields with errors that name
file:line:field (see sim_core.traces.loaders for the rules)."""
from __future__ import annotations

import errno
import gzip
import json
import math
import zlib
from array import array
from pathlib import Path
from typing import Any, Iterator

_U64 = 1 << 64
_I64_MAX = (1 << 63) - 1
_REPR_MAX = 60


class TraceFormatError(ValueError):
    """Malformed trace input. The message names file, 1-based line and field."""


#: the files a directory trace is made of (one session or conversation a file)
DIR_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz")


def check_exists(path: Path, directory: bool = False) -> None:
    """The trace file exists (`directory`: or it is a directory holding trace files)."""
    if not path.exists():
        raise FileNotFoundError(errno.ENOENT, "trace file not found", str(path))
    if path.is_dir() and (not directory or not trace_files(path)):
        what = "a directory without *.jsonl or *.json files" if directory else "a directory"
        subs = sorted(d.name for d in path.iterdir() if d.is_dir() and trace_files(d)) if directory else []
        if subs:  # a checkout of LMCache's agent traces: one directory per agent kind
            what += f"; its subdirectories {', '.join(subs[:8])} hold some: load one of them"
        raise IsADirectoryError(errno.EISDIR, f"expected a trace file, got {what}", str(path))


def trace_files(path: Path) -> list[Path]:
    """[path] for a file; a directory's trace files (DIR_SUFFIXES, not hidden) in name order."""
    if not path.is_dir():
        return [path]
    return sorted(p for p in path.iterdir()
                  if p.is_file() and not p.name.startswith(".") and p.name.endswith(DIR_SUFFIXES))


def iter_records(path: Path) -> Iterator[tuple[Path, int, dict]]:
    """(file, 1-based line, JSON object) over a file or a directory's files in name order."""
    for f in trace_files(path):
        for lineno, obj in iter_objects(f):
            yield f, lineno, obj


def _open_binary(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, raw line); damaged gzip data is a format error at the line
    where it starts, not an OSError/EOFError/zlib.error from deep inside gzip."""
    lineno = 0
    with _open_binary(path) as f:
        try:
            for lineno, raw in enumerate(f, 1):
                yield lineno, raw
        except (gzip.BadGzipFile, EOFError, zlib.error) as e:
            raise TraceFormatError(f"{path}:{lineno + 1}: unreadable gzip data "
                                   f"({type(e).__name__}: {e})") from None


def iter_objects(path: Path) -> Iterator[tuple[int, dict]]:
    """Yield (1-based line number, parsed JSON object) for every non-blank line."""
    where = str(path)
    for lineno, raw in _lines(path):
        raw = raw.strip()
        if not raw:
            continue
        try:
            obj = json.loads(raw)
        except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
            detail = f"{e.msg} (column {e.colno})" if isinstance(e, json.JSONDecodeError) else str(e)
            raise TraceFormatError(f"{where}:{lineno}: invalid JSON: {detail}") from None
        except RecursionError:  # json's recursive parser on deeply nested arrays
            raise TraceFormatError(f"{where}:{lineno}: invalid JSON: nested too deeply") from None
        if not isinstance(obj, dict):
            raise TraceFormatError(
                f"{where}:{lineno}: expected a JSON object, got {type(obj).__name__} {short(obj)}")
        yield lineno, obj


def default_name(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".jsonl", ".json"):
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
    return name


def short(value: Any) -> str:
    r = repr(value)
    return r if len(r) <= _REPR_MAX else r[: _REPR_MAX - 3] + "..."


class Line:
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
            raise self.fail(field, f"expected a number, got {short(value)}")
        value = float(value)
        if not math.isfinite(value):
            raise self.fail(field, f"expected a finite number, got {value!r}")
        return value

    def integer(self, value: Any, field: str, *, minimum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not value.is_integer()
        ):
            raise self.fail(field, f"expected an integer, got {short(value)}")
        value = int(value)
        if minimum is not None and value < minimum:
            raise self.fail(field, f"expected an integer >= {minimum}, got {value}")
        if abs(value) > _I64_MAX:
            raise self.fail(field, f"integer out of the int64 range: {value}")
        return value

    def string(self, value: Any, field: str) -> str:
        if not isinstance(value, str):
            raise self.fail(field, f"expected a string, got {short(value)}")
        return value

    def mapping(self, value: Any, field: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(field, f"expected an object, got {short(value)}")
        return value

    def first(self, obj: dict, keys: tuple[str, ...]) -> tuple[str, Any]:
        """(key, value) of the first of `keys` present and not null (aliases of one
        field), or (keys[0], None)."""
        for key in keys:
            if obj.get(key) is not None:
                return key, obj[key]
        return keys[0], None

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
            raise self.fail(field, f"expected a list of integers, got {short(value)}")
        try:
            out = array("q", value)
        except (TypeError, OverflowError):
            out = None
        if out is not None and bool not in map(type, value):
            return out
        folded = []
        for i, x in enumerate(value):
            if isinstance(x, bool) or not isinstance(x, int):
                raise self.fail(field, f"expected a list of integers, got {short(x)} at index {i}")
            if x > _I64_MAX:
                if x >= _U64:
                    raise self.fail(field, f"hash {x} at index {i} does not fit in 64 bits")
                x -= _U64  # unsigned 64-bit hash -> two's complement int64
            elif x < -_I64_MAX - 1:
                raise self.fail(field, f"hash {x} at index {i} does not fit in 64 bits")
            folded.append(x)
        return array("q", folded)


class Sessions:
    """Dense session ids 0, 1, 2, ... in order of first appearance of a file's session
    keys (strings or integers; "1" and 1 are different sessions)."""

    __slots__ = ("ids",)

    def __init__(self) -> None:
        self.ids: dict[tuple[type, Any], int] = {}

    def id_of(self, ln: Line, value: Any, field: str) -> int:
        """-1 for an absent (None) session key."""
        if value is None:
            return -1
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise ln.fail(field, f"expected a string or integer, got {short(value)}")
        return self.ids.setdefault((type(value), value), len(self.ids))
