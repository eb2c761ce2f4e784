"""Token-level requests -> prefix-chained block hashes, as serving engines hash them.

Shared by the ``tokens`` and ``text`` formats. The model is vLLM's prefix-cache block
hash (github vllm-project/vllm, ``vllm/v1/core/kv_cache_utils.py``: ``hash_block_tokens``
and ``get_request_block_hasher``; hash functions in ``vllm/utils/hashing.py``, default
``prefix_caching_hash_algo="sha256"`` in ``vllm/config/cache.py``): a block's hash is a
hash of (its parent block's hash, this block's token ids), the first block's parent
being a fixed seed (vLLM's ``NONE_HASH``). So two requests share block k exactly when
they share their first (k+1) * block_tokens tokens.

Our own encoding, not vLLM's bytes (vLLM pickles a tuple; its hashes are not meant to be
reproduced outside the process): ``digest_k = sha256(digest_{k-1} || tokens_k)`` with
``tokens_k`` the block's token ids as little-endian int64 and ``digest_{-1} =
sha256(b"sim_core.traces.loaders.token_records")`` (a constant: the same file hashes the same
way in every run, as vLLM does with a fixed PYTHONHASHSEED). The chain carries the full
32-byte digests; a block's id in the trace is the first 8 bytes of its digest (signed
int64), remapped to dense ids at load like every format's hashes. Extra keys (LoRA,
multimodal, cache salt) do not exist in these formats and are not modelled.

One departure from vLLM, on purpose: vLLM hashes full blocks only; here a request's
partial last block (fewer than block_tokens tokens) is a block of the trace too, hashed
over its partial tokens (a shorter input than any full block's, so it never equals a
full block), and ``input_tokens = len(token_ids)``. Whether a partial block is cached is
the engine's ``partial_blocks`` switch, not the loader's choice.

Record fields shared by both formats (one JSON object per line):

=================  ========  ======================================================
field              required  meaning
=================  ========  ======================================================
``timestamp``      yes [1]   arrival in seconds (number)
``timestamp_ms``   yes [1]   arrival in milliseconds (number), instead of timestamp
``session_id``     no        session key (string or integer), dense ids by first
                             appearance; absent/null = unknown (-1)
``output_length``  no        generated tokens (int >= 0; 0 when absent)
=================  ========  ======================================================

[1] exactly one of ``timestamp`` and ``timestamp_ms``.
"""
from __future__ import annotations

import hashlib
from array import array
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..trace import Trace
from .builder import Builder
from .lines import Line, Sessions, iter_objects, short
from .times import stamp

ROOT_DIGEST = hashlib.sha256(b"sim_core.traces.loaders.token_records").digest()
_MAX_TOKEN = (1 << 63) - 1


def chain_hashes(tokens: np.ndarray, block_tokens: int) -> array:
    """int64 ids of the chained block hashes of one request's tokens: ceil(n / B) of them,
    the last one over a partial block when n is not a multiple of B."""
    if block_tokens <= 0:
        raise ValueError(f"block_tokens must be positive, got {block_tokens}")
    data = np.ascontiguousarray(tokens, dtype="<i8").tobytes()
    step = 8 * block_tokens
    out = array("q")
    parent = ROOT_DIGEST
    sha256 = hashlib.sha256
    for start in range(0, len(data), step):
        parent = sha256(parent + data[start:start + step]).digest()
        out.append(int.from_bytes(parent[:8], "little", signed=True))
    return out


def token_array(ln: Line, value: Any, field: str) -> np.ndarray:
    """A JSON list of token ids (integers >= 0) -> int64 array."""
    if not isinstance(value, list):
        raise ln.fail(field, f"expected a list of token ids, got {type(value).__name__}")
    try:
        out = np.array(value, dtype=np.int64) if value else np.zeros(0, np.int64)
    except (TypeError, ValueError, OverflowError):
        out = None
    if out is not None and out.ndim == 1 and bool not in map(type, value) and float not in map(type, value):
        if len(out) and int(out.min()) < 0:
            i = int(np.argmax(out < 0))
            raise ln.fail(field, f"token ids must be >= 0, got {int(out[i])} at index {i}")
        return out
    for i, x in enumerate(value):
        if isinstance(x, bool) or not isinstance(x, int):
            raise ln.fail(field, f"expected a list of token ids (integers), got {short(x)} at index {i}")
        if not 0 <= x <= _MAX_TOKEN:
            raise ln.fail(field, f"token id {x} at index {i} is not in 0..2^63-1")
    raise ln.fail(field, "expected a flat list of token ids")


def arrival_s(ln: Line, obj: dict) -> float:
    """``timestamp`` (seconds) or ``timestamp_ms`` (milliseconds): exactly one."""
    s, ms = obj.get("timestamp"), obj.get("timestamp_ms")
    if s is not None and ms is not None:
        raise ln.fail("timestamp", "give timestamp (seconds) or timestamp_ms (milliseconds), not both")
    if s is None and ms is None:
        raise ln.fail("timestamp", "missing required field (seconds; or timestamp_ms in milliseconds)")
    return stamp(ln, s, "timestamp") if s is not None else stamp(ln, ms, "timestamp_ms") / 1000.0


def read_token_requests(path: str | Path, loader: str, block_tokens: int, context_tokens: int | None,
                        name: str | None, tokens_of: Callable[[Line, dict], np.ndarray], **options) -> Trace:
    """The shared loop: ``tokens_of(line, record)`` gives a record's token ids."""
    b = Builder(path, int(block_tokens), context_tokens, "s", hashed=False, **options)
    sessions = Sessions()
    n_partial = 0
    for lineno, obj in iter_objects(b.path):
        ln = Line(b.where, lineno)
        ts = arrival_s(ln, obj)
        tokens = tokens_of(ln, obj)
        session = sessions.id_of(ln, obj.get("session_id"), "session_id")
        olen = ln.optional_integer(obj, ("output_length",))
        hashes = chain_hashes(tokens, b.block_tokens)
        if b.add(hashes, ts, session, len(tokens), olen or 0):
            n_partial += len(tokens) % b.block_tokens != 0
    return b.build(loader, name, {"sessions": len(sessions.ids), "partial_last_blocks": n_partial,
                                  "block_hash": "sha256 chain (sim_core.traces.loaders.token_records)"})
