"""The CSR builder every JSONL trace format shares: kept requests accumulate in flat
buffers; build() decides the time unit (times.py) and the block size (blocksize.py),
sorts the requests by arrival, remaps the hashes to dense ids, re-chains ids that are not
prefix-chained (:func:`sim_core.traces.reblock.chain_by_position`) and returns the Trace.

Options every hash format takes (``trace.<name>``): ``time_unit`` (s, ms, us, ns; null =
detected), ``file_block_tokens`` (tokens per hash; null = the format's, or inferred),
``rechain`` (true: ids after different prefixes become different blocks; false: the
file's ids as they are)."""
from __future__ import annotations

import logging
from array import array
from pathlib import Path

import numpy as np

from ...catalog.models import QWEN3_CODER_30B
from ..trace import Trace
from ..reblock import chain_by_position, chain_counts
from ..file import remap_dense_ids
from . import blocksize, times
from .lines import TraceFormatError, check_exists, default_name

log = logging.getLogger("sim_core.traces.loaders")

#: Requests longer than the default model's context window are dropped (the model
#: config owns the number: Qwen3-Coder-30B, 256K tokens).
DEFAULT_CONTEXT_TOKENS = QWEN3_CODER_30B.context_tokens


#: the keyword options of every reader built on Builder (see the module docstring)
NORMALIZE = ("time_unit", "file_block_tokens", "rechain")


class Builder:
    """Accumulates kept requests in flat buffers; builds the sorted, dense `Trace`.

    `block_tokens` and `file_unit` are what the format documents; ``add`` takes each
    request's raw timestamp in that unit (NaN: none) and its input length as the file
    gives it (None: absent). `partial_last`: a request's last, partial block has a hash
    (False: full blocks only)."""

    def __init__(self, path: str | Path, block_tokens: int, context_tokens: int | None,
                 file_unit: str = "s", *, partial_last: bool = True, hashed: bool = True,
                 directory: bool = False, **options) -> None:
        self.path = Path(path)
        check_exists(self.path, directory)
        self.where = str(self.path)  # for error messages
        unknown = set(options) - set(NORMALIZE)
        if unknown:
            raise TypeError(f"unexpected reader options {sorted(unknown)}")
        unit = options.get("time_unit")
        self.time_override = None if unit is None else times.unit_name(unit)
        fbt = options.get("file_block_tokens")
        if fbt is not None and (isinstance(fbt, bool) or int(fbt) != fbt or int(fbt) <= 0):
            raise ValueError(f"file_block_tokens must be a positive integer, got {fbt!r}")
        self.block_override = None if fbt is None else int(fbt)
        self.rechain = options.get("rechain") is not False  # None: the default, re-chained
        self.block_tokens = self.block_override or block_tokens
        self.time_unit = file_unit
        self.partial_last = partial_last
        self.hashed = hashed  # False: ids hashed here (token formats), chained and sized by construction
        self.times_resolved: dict | None = None  # set by a reader that resolves times itself (dynamo)
        self.context_tokens = context_tokens
        self.given = array("b")
        self.tool_wait = array("d")
        self.blocks = array("q")
        self.lengths = array("q")
        self.arrival = array("d")
        self.session = array("q")
        self.input_tokens = array("q")
        self.output_tokens = array("q")
        self.seen = 0
        self.dropped = 0

    def add(self, hashes: array, stamp: float, session: int, input_tokens: int | None,
            output_tokens: int, tool_wait_s: float = float("nan")) -> bool:
        """Keep one request (False: dropped, over the context window). `input_tokens`
        None: len(hashes) blocks' worth, at the block size build() settles on."""
        self.seen += 1
        counted = len(hashes) * self.block_tokens if input_tokens is None else input_tokens
        if self.context_tokens is not None and counted > self.context_tokens:
            self.dropped += 1
            return False
        self.blocks.extend(hashes)
        self.lengths.append(len(hashes))
        self.arrival.append(stamp)
        self.session.append(session)
        self.given.append(input_tokens is not None)
        self.input_tokens.append(-1 if input_tokens is None else input_tokens)
        self.output_tokens.append(output_tokens)
        self.tool_wait.append(tool_wait_s)
        return True

    def _settle(self, lengths: np.ndarray, itok: np.ndarray, given: np.ndarray) -> tuple[np.ndarray, dict]:
        """Block size (inferred where the file contradicts the format's) and the input
        tokens of requests without a length: their blocks' worth."""
        info: dict = {}
        if self.hashed:
            self.block_tokens, info = blocksize.resolve(lengths, itok, given, self.block_tokens, self.block_override,
                                                        self.partial_last, self.where)
        return np.where(given, itok, lengths * self.block_tokens), info

    def build(self, loader: str, name: str | None, extra_meta: dict | None = None) -> Trace:
        where = str(self.path)
        if self.seen == 0:
            raise TraceFormatError(f"{where}: no requests (the file holds no records)")
        if not self.lengths:
            raise TraceFormatError(
                f"{where}: no requests left: all {self.dropped} exceed context_tokens={self.context_tokens}")
        lengths = np.frombuffer(self.lengths, dtype=np.int64)
        raw = np.frombuffer(self.blocks, dtype=np.int64)
        if self.times_resolved is None:
            arrival, time_info = times.resolve(np.frombuffer(self.arrival, dtype=np.float64), self.time_unit,
                                               self.time_override, where)
        else:
            arrival, time_info = np.frombuffer(self.arrival, dtype=np.float64), self.times_resolved
        session = np.frombuffer(self.session, dtype=np.int64)
        given = np.frombuffer(self.given, dtype=np.int8).astype(bool)
        itok, block_info = self._settle(lengths, np.frombuffer(self.input_tokens, dtype=np.int64), given)
        otok = np.frombuffer(self.output_tokens, dtype=np.int64)
        wait = np.frombuffer(self.tool_wait, dtype=np.float64)
        wait = None if np.isnan(wait).all() else np.nan_to_num(wait, nan=0.0)

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
            wait = None if wait is None else wait[order]

        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        blocks, source_ids = remap_dense_ids(raw)
        n_unique = len(source_ids)
        chain = self._chain(offsets, blocks, n_unique) if self.hashed else {}
        if chain.get("rechained"):
            blocks, source_ids = chain.pop("blocks"), None  # a file id no longer names one block
        meta = {
            "loader": loader,
            "path": str(self.path.resolve()),
            "context_tokens": self.context_tokens,
            "records": self.seen,
            "dropped_requests": self.dropped,
            "reordered": reordered,
            "unique_blocks": int(n_unique),
            "time": time_info,
        }
        if block_info:
            meta["block_size"] = block_info
        if chain:
            meta["chaining"] = chain
        meta.update(extra_meta or {})
        trace = Trace(offsets, blocks, arrival.copy(), session.copy(), itok.copy(), otok.copy(),
                      block_tokens=self.block_tokens, name=name or default_name(self.path),
                      source="real", dropped_requests=self.dropped, meta=meta, source_ids=source_ids,
                      tool_wait_s=wait)
        log.info("loaded %s (%s): %d requests, %d block accesses, %d unique blocks, %d dropped",
                 self.path, loader, trace.n_requests, trace.n_accesses, n_unique, self.dropped)
        return trace

    def _chain(self, offsets: np.ndarray, blocks: np.ndarray, n_unique: int) -> dict:
        """Whether the file's ids are prefix-chained; re-chained by position unless
        rechain=false. A block hit is only a KV-cache hit when the block id names its
        whole prefix (docs/concepts.md)."""
        counts = chain_counts(offsets, blocks)  # a sort, where the trie below is a hash map per access
        if not counts["ids_after_several_prefixes"]:
            return {"chained": True}
        chained, n_nodes = chain_by_position(offsets, blocks)
        out = {"chained": False, **counts, "ids": int(n_unique), "ids_by_position": int(n_nodes),
               "rechained": self.rechain}
        log.warning("%s: block ids are not prefix-chained: %d ids follow more than one predecessor, %d appear at "
                    "more than one depth; %s", self.where, out["ids_after_several_prefixes"],
                    out["ids_at_several_depths"],
                    f"re-chained by position: {n_unique} ids become {n_nodes} blocks (trace.rechain=false keeps "
                    f"the raw ids)" if self.rechain else "kept as written (trace.rechain=false): a hit on an id "
                    "after another prefix counts, which no KV cache can serve")
        if self.rechain:
            out["blocks"] = chained
        return out
