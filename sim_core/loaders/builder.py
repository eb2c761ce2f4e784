"""The CSR builder every JSONL trace format shares: kept requests accumulate in flat
buffers; build() sorts them by arrival, remaps the hashes to dense ids and returns the
Trace."""
from __future__ import annotations

import logging
from array import array
from pathlib import Path

import numpy as np

from ..models import QWEN3_CODER_30B
from ..trace import Trace
from ..trace_file import remap_dense_ids
from .lines import TraceFormatError, check_exists, default_name

log = logging.getLogger("sim_core.loaders")

#: Requests longer than the default model's context window are dropped (the model
#: config owns the number: Qwen3-Coder-30B, 256K tokens).
DEFAULT_CONTEXT_TOKENS = QWEN3_CODER_30B.context_tokens


class Builder:
    """Accumulates kept requests in flat buffers; builds the sorted, dense `Trace`."""

    def __init__(self, path: str | Path, block_tokens: int, context_tokens: int | None) -> None:
        self.path = Path(path)
        check_exists(self.path)
        self.where = str(self.path)  # for error messages
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
        blocks, source_ids = remap_dense_ids(raw)
        n_unique = len(source_ids)
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
                      block_tokens=self.block_tokens, name=name or default_name(self.path),
                      source="real", dropped_requests=self.dropped, meta=meta, source_ids=source_ids)
        log.info("loaded %s (%s): %d requests, %d block accesses, %d unique blocks, %d dropped",
                 self.path, loader, trace.n_requests, trace.n_accesses, n_unique, self.dropped)
        return trace
