"""In-memory trace: CSR arrays over requests, block ids remapped to dense int32.

A request is an ordered list of KV-block ids (prefix-chained hashes). Everything the
replay engine touches is a flat numpy array so the hot loop never hashes.
"""
from __future__ import annotations

import dataclasses
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from ..jit import njit
from .file import (NATIVE_ARRAYS, NATIVE_FORMAT_VERSION, _describe, _header_repr, _member,
                         check_native_arrays, remap_dense_ids)

SOURCES = ("real", "synthetic")
_NO_DEPTH = np.zeros(0, np.int32)


@dataclass
class Trace:
    """CSR request trace.

    Attributes:
        req_offsets: int64[R+1]; request r owns blocks[req_offsets[r]:req_offsets[r+1]].
        blocks: int32[N] dense block ids in 0..n_unique-1.
        arrival_s: float64[R] arrival time in seconds (non-decreasing).
        session: int64[R] session id, -1 when unknown.
        input_tokens: int64[R] prompt length in tokens.
        output_tokens: int64[R] generated tokens (0 when unknown).
        block_tokens: tokens per KV block (16 for FreeInference/Qwen, 512 for Mooncake).
        name, source: trace name and whether it is `real` or `synthetic`.
        dropped_requests: requests removed at load (over the context window).
        meta: free-form provenance (loader, path, generator parameters, ...).
        depth: int32[N] or None. A sample of a trace (sim_core.traces.sample) keeps only some
            blocks of each request; `depth` then holds each access's depth in the full
            request, which is what its compute cost depends on. None: depth = position.
        tail_first: True for the view a tail-first replay walks (`tail_first_view`):
            each request's blocks are stored deepest first, `depth` holds true depths.
        full_blocks: int32[R] or None: for a sample, how many blocks each request has in
            the full trace (where its partial last block is); None: its own length.
        source_ids: uint64[U] or None: the id each dense block had in the source (the
            hashes given to `from_requests` or read from a trace file; int64 hashes as
            their two's-complement bits), indexed by dense id. None when there were none
            (synthetic traces, native files with dense ids). See :meth:`object_ids`.
        tool_wait_s: float64[R] or None: seconds the request waited on tool calls between
            the previous turn of its session and its own arrival (Dynamo's agentic
            ``tool_wait_ms``); 0 where it waited on none; None when the trace does not
            record tool waits. Session and next-arrival helpers: sim_core.traces.sessions.
    """

    req_offsets: np.ndarray
    blocks: np.ndarray
    arrival_s: np.ndarray
    session: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    block_tokens: int = 16
    name: str = "trace"
    source: str = "real"
    dropped_requests: int = 0
    meta: dict = field(default_factory=dict)
    depth: np.ndarray | None = None
    tail_first: bool = False
    source_ids: np.ndarray | None = None
    full_blocks: np.ndarray | None = None
    tool_wait_s: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.req_offsets = np.ascontiguousarray(self.req_offsets, dtype=np.int64)
        self.blocks = np.ascontiguousarray(self.blocks, dtype=np.int32)
        self.arrival_s = np.ascontiguousarray(self.arrival_s, dtype=np.float64)
        self.session = np.ascontiguousarray(self.session, dtype=np.int64)
        self.input_tokens = np.ascontiguousarray(self.input_tokens, dtype=np.int64)
        self.output_tokens = np.ascontiguousarray(self.output_tokens, dtype=np.int64)
        if self.depth is not None:
            self.depth = np.ascontiguousarray(self.depth, dtype=np.int32)
        if self.source_ids is not None:
            self.source_ids = _as_uint64(self.source_ids)
        if self.full_blocks is not None:
            self.full_blocks = np.ascontiguousarray(self.full_blocks, dtype=np.int32)
        if self.tool_wait_s is not None:
            self.tool_wait_s = np.ascontiguousarray(self.tool_wait_s, dtype=np.float64)
        self.validate()

    # ------------------------------------------------------------------ shape
    @property
    def n_requests(self) -> int:
        return len(self.req_offsets) - 1

    @property
    def n_accesses(self) -> int:
        return int(self.req_offsets[-1])

    def _shape(self) -> tuple[int, int]:
        # (n_unique, max_request_blocks): scans of every access (0.3 s at full scale) that
        # every simulate call asks for, kept while the arrays are the same objects
        got = self.__dict__.get("_shape_cache")
        if got is None or got[0] is not self.blocks or got[1] is not self.req_offsets:
            n_unique = int(self.blocks.max()) + 1 if len(self.blocks) else 0
            longest = int(np.diff(self.req_offsets).max()) if len(self.req_offsets) > 1 else 0
            got = (self.blocks, self.req_offsets, n_unique, longest)
            self.__dict__["_shape_cache"] = got
        return got[2], got[3]

    @property
    def n_unique(self) -> int:
        return self._shape()[0]

    @property
    def request_lengths(self) -> np.ndarray:
        return np.diff(self.req_offsets)

    @property
    def max_request_blocks(self) -> int:
        return self._shape()[1]

    def depths(self) -> np.ndarray:
        """int32[N]: depth of each access in its request (0 = first block): its position,
        or for a sample the depth it had in the full request."""
        if self.depth is not None:
            return self.depth
        lengths = self.request_lengths
        starts = np.repeat(self.req_offsets[:-1], lengths)
        return (np.arange(self.n_accesses, dtype=np.int64) - starts).astype(np.int32)

    def engine_depth(self) -> np.ndarray:
        """What compiled loops take as `depth`: empty when depth is the position (no
        per-access array at full scale), the sample's true depths otherwise."""
        return _NO_DEPTH if self.depth is None else self.depth

    def tail_first_view(self) -> "Trace":
        """The trace as a tail-first replay walks it: each request's blocks deepest first,
        with their true depths (``depth``), so every policy's clock and lists see a
        request's tail as older than its head. Kept on the trace (two per-access arrays)."""
        if self.tail_first:
            return self
        got = self.__dict__.get("_tail_first_view")  # (the blocks it was made from, the view)
        if got is None or got[0] is not self.blocks:
            blocks, depth = _reverse_requests(self.req_offsets, self.blocks, self.engine_depth())
            got = (self.blocks, dataclasses.replace(self, blocks=blocks, depth=depth, tail_first=True,
                                                    meta=dict(self.meta)))
            self.__dict__["_tail_first_view"] = got
        return got[1]

    def partial_tails(self) -> tuple[np.ndarray, np.ndarray]:
        """(tail_depth, tail_tokens), int32[R]: the depth of each request's partial last
        block (-1 when its last block is full) and that block's tokens (block_tokens when
        full). A request of n blocks whose input_tokens are not in ((n-1) T, n T] (T =
        block_tokens; e.g. a trace without token counts) has only full blocks."""
        got = self.__dict__.get("_partial_tails")
        if got is None or got[0] is not self.req_offsets:
            n = (self.request_lengths if self.full_blocks is None else self.full_blocks).astype(np.int64)
            T = int(self.block_tokens)
            it = self.input_tokens
            ok = (n > 0) & (it > (n - 1) * T) & (it <= n * T)
            tokens = np.where(ok, it - (n - 1) * T, T).astype(np.int32)
            depth = np.where(ok & (tokens < T), n - 1, -1).astype(np.int32)
            got = (self.req_offsets, depth, tokens)
            self.__dict__["_partial_tails"] = got
        return got[1], got[2]

    def object_ids(self) -> np.ndarray:
        """uint64[U]: the object id of each dense block when the trace is handed to
        libCacheSim: its source id, else dense id + 1 (id 0 is reserved in some of its
        readers). `sim_core.replay.reference.write_oracle_general` writes these, and W-TinyLFU's
        ``libcachesim`` mode hashes these: libCacheSim's admission sketch hashes the
        8-byte object id, so both sides must see the same ids to agree."""
        if self.source_ids is not None:
            return self.source_ids
        return np.arange(1, self.n_unique + 1, dtype=np.uint64)

    def request_blocks(self, r: int) -> np.ndarray:
        return self.blocks[self.req_offsets[r] : self.req_offsets[r + 1]]

    def validate(self) -> None:
        R = len(self.req_offsets) - 1
        if R < 0 or self.req_offsets[0] != 0:
            raise ValueError("req_offsets must start at 0 and have R+1 entries")
        if np.any(np.diff(self.req_offsets) < 0):
            raise ValueError("req_offsets must be non-decreasing")
        if self.req_offsets[-1] != len(self.blocks):
            raise ValueError(
                f"req_offsets[-1]={self.req_offsets[-1]} != len(blocks)={len(self.blocks)}"
            )
        for name in ("arrival_s", "session", "input_tokens", "output_tokens"):
            if len(getattr(self, name)) != R:
                raise ValueError(f"{name} has {len(getattr(self, name))} entries, expected {R}")
        if len(self.blocks) and self.blocks.min() < 0:
            raise ValueError("block ids must be dense non-negative ints")
        if self.source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {self.source!r}")
        if self.block_tokens <= 0:
            raise ValueError("block_tokens must be positive")
        if self.depth is not None and len(self.depth) != len(self.blocks):
            raise ValueError(f"depth has {len(self.depth)} entries, expected {len(self.blocks)}")
        if self.full_blocks is not None and len(self.full_blocks) != R:
            raise ValueError(f"full_blocks has {len(self.full_blocks)} entries, expected {R}")
        if self.tool_wait_s is not None and len(self.tool_wait_s) != R:
            raise ValueError(f"tool_wait_s has {len(self.tool_wait_s)} entries, expected {R}")
        if self.source_ids is not None and self.source_ids.shape != (self.n_unique,):
            raise ValueError(f"source_ids has shape {self.source_ids.shape}, expected ({self.n_unique},): "
                             f"one id per dense block")

    # ------------------------------------------------------------ construction
    @classmethod
    def from_requests(
        cls,
        requests: Sequence[Iterable[int]],
        arrival_s: Sequence[float] | None = None,
        session: Sequence[int] | None = None,
        block_tokens: int = 16,
        *,
        input_tokens: Sequence[int] | None = None,
        output_tokens: Sequence[int] | None = None,
        name: str = "handmade",
        source: str = "synthetic",
        **kwargs,
    ) -> "Trace":
        """Build a trace from per-request lists of block hashes (any hashable ints).

        Hashes are remapped to dense ids in order of first appearance; the hashes stay
        the blocks' `source_ids`.
        """
        lists = [np.asarray(list(req), dtype=np.int64) for req in requests]
        R = len(lists)
        lengths = np.array([len(x) for x in lists], dtype=np.int64)
        offsets = np.zeros(R + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        raw = np.concatenate(lists) if R else np.zeros(0, dtype=np.int64)
        blocks, ids = remap_dense_ids(raw)
        arrival = np.arange(R, dtype=np.float64) if arrival_s is None else np.asarray(arrival_s, dtype=np.float64)
        sess = np.full(R, -1, dtype=np.int64) if session is None else np.asarray(session, dtype=np.int64)
        itok = lengths * block_tokens if input_tokens is None else np.asarray(input_tokens, dtype=np.int64)
        otok = np.zeros(R, dtype=np.int64) if output_tokens is None else np.asarray(output_tokens, dtype=np.int64)
        kwargs.setdefault("source_ids", ids)
        return cls(offsets, blocks, arrival, sess, itok, otok, block_tokens=block_tokens,
                   name=name, source=source, **kwargs)

    # ---------------------------------------------------------------- storage
    def save(self, path: str | Path) -> Path:
        """Write the native format (uncompressed .npz: loads at disk speed)."""
        path = Path(path)
        if path.suffix != ".npz":
            path = path.with_suffix(".npz")
        header = _header_repr({"block_tokens": self.block_tokens, "name": self.name,
                               "source": self.source, "dropped_requests": self.dropped_requests,
                               "meta": self.meta, "format": NATIVE_FORMAT_VERSION})
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp.npz")
        optional = {k: getattr(self, k) for k in ("source_ids", "tool_wait_s") if getattr(self, k) is not None}
        np.savez(
            tmp,
            req_offsets=self.req_offsets,
            blocks=self.blocks,
            arrival_s=self.arrival_s,
            session=self.session,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            header=np.array([header]),
            **optional,
        )
        tmp.replace(path)  # never leave a half-written trace behind
        return path

    @classmethod
    def load(cls, path: str | Path, mmap: bool = False) -> "Trace":
        """Read the native format written by :meth:`save`.

        Any problem with the file is a ValueError that names it: not an .npz archive (e.g.
        a renamed JSONL), damaged, a member missing, or arrays of the wrong kind or order
        (see :func:`check_native_arrays`). Block ids that are not already dense 0..U-1
        (e.g. raw hashes, or sparse ids written by another tool) are remapped to dense ids
        in order of first appearance, as :meth:`from_requests` does, and then stay the
        blocks' `source_ids`; dense ids are kept. A `source_ids` member (written by
        :meth:`save`) is read back.
        """
        import ast

        path = Path(path)
        with open(path, "rb") as f:  # a missing/unreadable file stays an OSError
            head = f.read(64)
        if not head.startswith(b"PK"):
            raise ValueError(f"{path} is not a native trace (an .npz written by Trace.save): {_describe(head)}")
        if not zipfile.is_zipfile(path):
            raise ValueError(f"{path} is a damaged native trace: not a complete zip archive (truncated?)")
        try:
            with np.load(path, allow_pickle=False, mmap_mode="r" if mmap else None) as z:
                missing = [k for k in NATIVE_ARRAYS + ("header",) if k not in z.files]
                if missing:
                    raise ValueError(f"{path} is not a native trace: no {', '.join(missing)} array "
                                     f"(a native trace holds {', '.join(NATIVE_ARRAYS)} and header)")
                hdr = _member(z, "header", path)
                try:
                    header = ast.literal_eval(str(hdr.reshape(-1)[0]))
                except (ValueError, SyntaxError, IndexError) as e:
                    raise ValueError(f"{path}: unreadable native trace header ({type(e).__name__})") from e
                if not isinstance(header, dict):
                    raise ValueError(f"{path}: native trace header is not a dict")
                if header.get("format") != NATIVE_FORMAT_VERSION:
                    raise ValueError(f"{path}: unsupported native trace format {header.get('format')!r}")
                arrays = {k: _member(z, k, path) for k in NATIVE_ARRAYS}
                source_ids = _member(z, "source_ids", path) if "source_ids" in z.files else None
                tool_wait = _member(z, "tool_wait_s", path) if "tool_wait_s" in z.files else None
        # a damaged header can mark a member encrypted (RuntimeError) or oddly compressed (NotImplementedError)
        except (zipfile.BadZipFile, EOFError, zlib.error, RuntimeError, NotImplementedError) as e:
            raise ValueError(f"{path} is a damaged native trace ({type(e).__name__}: {e})") from e
        if source_ids is not None and (source_ids.ndim != 1 or source_ids.dtype.kind not in "iu"):
            raise ValueError(f"{path}: source_ids must be a 1-D integer array, got "
                             f"{source_ids.dtype} of shape {source_ids.shape}")
        arrays, stored_ids = check_native_arrays(arrays, str(path))
        if source_ids is None:  # the file's own (sparse) ids, when they were remapped
            source_ids = stored_ids
        bt = header.get("block_tokens")
        if isinstance(bt, bool) or not isinstance(bt, int) or bt <= 0:
            raise ValueError(f"{path}: header block_tokens must be a positive integer, got {bt!r}")
        meta = dict(header.get("meta") or {})
        if stored_ids is not None:
            meta["block_ids_remapped"] = "first-appearance"
        try:
            return cls(**arrays, block_tokens=bt, name=str(header.get("name") or path.stem),
                       source=header.get("source", "real"),
                       dropped_requests=int(header.get("dropped_requests") or 0), meta=meta,
                       source_ids=source_ids, tool_wait_s=tool_wait)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None

    def subset(self, n_requests: int) -> "Trace":
        """The first n requests, block ids re-densified."""
        end = int(self.req_offsets[n_requests])
        blocks, old = remap_dense_ids(self.blocks[:end])
        return Trace(self.req_offsets[: n_requests + 1].copy(), blocks, self.arrival_s[:n_requests].copy(),
                     self.session[:n_requests].copy(), self.input_tokens[:n_requests].copy(),
                     self.output_tokens[:n_requests].copy(), block_tokens=self.block_tokens,
                     name=self.name, source=self.source, meta=dict(self.meta, subset=n_requests),
                     source_ids=None if self.source_ids is None else self.source_ids[old],
                     full_blocks=None if self.full_blocks is None else self.full_blocks[:n_requests].copy(),
                     tool_wait_s=None if self.tool_wait_s is None else self.tool_wait_s[:n_requests].copy())


def back_to_back(traces: Sequence[Trace], gap_s: float = 3600.0) -> Trace:
    """The traces one after another through one cache, as independent stretches of
    traffic: each keeps its requests and depths, gets block ids and sessions of its own,
    and starts `gap_s` after the previous one's last arrival. Metadata and name are the
    first trace's; source ids are kept only when every trace has them."""
    ts = list(traces)
    if not ts:
        raise ValueError("back_to_back needs at least one trace")
    if len({t.block_tokens for t in ts}) > 1:
        raise ValueError(f"back_to_back: block sizes differ ({sorted({t.block_tokens for t in ts})} tokens)")
    if any(t.tail_first for t in ts):
        raise ValueError("back_to_back takes traces in forward order, not tail-first views")
    with_depth = any(t.depth is not None for t in ts)  # samples: keep true depths, positions for the rest
    offsets, blocks, arrival, session, depth = [np.zeros(1, np.int64)], [], [], [], []
    n_acc = n_ids = n_sess = 0
    t_end = None
    for t in ts:
        offsets.append(t.req_offsets[1:] + n_acc)
        blocks.append(t.blocks + np.int32(n_ids))
        shift = 0.0 if t_end is None or not t.n_requests else t_end + gap_s - float(t.arrival_s[0])
        arrival.append(t.arrival_s + shift)
        session.append(np.where(t.session >= 0, t.session + n_sess, -1))
        if with_depth:
            depth.append(t.depths())
        n_acc += t.n_accesses
        n_ids += t.n_unique
        n_sess += int(t.session.max()) + 1 if t.n_requests and t.session.max() >= 0 else 0
        if t.n_requests:
            t_end = float(t.arrival_s[-1]) + shift
    keep_ids = all(t.source_ids is not None for t in ts)
    cat = np.concatenate
    return Trace(cat(offsets), cat(blocks), cat(arrival), cat(session), cat([t.input_tokens for t in ts]),
                 cat([t.output_tokens for t in ts]), block_tokens=ts[0].block_tokens, name=ts[0].name,
                 source=ts[0].source, dropped_requests=sum(t.dropped_requests for t in ts),
                 meta=dict(ts[0].meta, back_to_back=len(ts)),
                 depth=cat(depth) if with_depth else None,
                 source_ids=cat([t.source_ids for t in ts]) if keep_ids else None,
                 full_blocks=cat([t.request_lengths if t.full_blocks is None else t.full_blocks for t in ts])
                 if any(t.full_blocks is not None for t in ts) else None,
                 tool_wait_s=cat([np.zeros(t.n_requests) if t.tool_wait_s is None else t.tool_wait_s for t in ts])
                 if any(t.tool_wait_s is not None for t in ts) else None)


@njit
def _reverse_requests(offsets, blocks, depth):
    """(blocks, depths) with every request's blocks in reverse order; `depth` empty means
    depth = position."""
    out = np.empty_like(blocks)
    out_d = np.empty(blocks.shape[0], np.int32)
    for r in range(offsets.shape[0] - 1):
        s = offsets[r]
        e = offsets[r + 1]
        for j in range(s, e):
            k = s + e - 1 - j
            out[j] = blocks[k]
            out_d[j] = depth[k] if depth.shape[0] > 0 else k - s
    return out, out_d


def _as_uint64(ids) -> np.ndarray:
    """Integer ids as uint64 (signed ones by their two's-complement bits)."""
    a = np.ascontiguousarray(ids)
    if a.dtype.kind not in "iu":
        raise ValueError(f"source_ids must hold integers, got dtype {a.dtype}")
    if a.dtype.kind == "i":
        a = np.ascontiguousarray(a, dtype=np.int64).view(np.uint64)
    return np.ascontiguousarray(a, dtype=np.uint64)
