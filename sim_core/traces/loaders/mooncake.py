"""Mooncake (``fmt="mooncake"``, block_tokens = 512)

Mooncake FAST'25 traces (github kvcache-ai/Mooncake)::

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 1]}

=================  ========  =====================================================
field              required  meaning
=================  ========  =====================================================
``timestamp``      yes       arrival in milliseconds (number or numeric string;
                             another unit is detected: sim_core.traces.loaders.times)
``hash_ids``       yes       list of ints: prefix-chained 512-token block hashes
                             (another size is inferred: loaders/blocksize.py)
``input_length``   no        prompt tokens (int >= 0)
``output_length``  no        generated tokens (int >= 0; 0 when absent)
=================  ========  =====================================================

Sessions are unknown: ``session = -1`` for every request.
"""
from __future__ import annotations

from pathlib import Path

from ..trace import Trace
from .builder import DEFAULT_CONTEXT_TOKENS, Builder
from .format import HASH_OPTIONS, HASH_SETTINGS, TraceFormat
from .lines import Line, iter_objects
from .times import stamp


#: Keys NVIDIA Dynamo's replay rows add to Mooncake's (format ``dynamo``): a first
#: record with any of them is Dynamo's, not a plain Mooncake record.
DYNAMO_KEYS = frozenset({"session_id", "delay", "delay_ms", "created_time", "input_tokens",
                         "output_tokens", "request_id", "priority", "wait_for", "branches",
                         "tool_wait_ms", "prefix_reset"})


def _is_mooncake(obj: dict) -> bool:
    return "timestamp" in obj and "hash_ids" in obj and "chat_id" not in obj and not DYNAMO_KEYS & obj.keys()


def load_mooncake(path: str | Path, *, name: str | None = None,
                  context_tokens: int | None = DEFAULT_CONTEXT_TOKENS, **options) -> Trace:
    """Mooncake JSONL trace (512-token blocks, timestamps in ms, no sessions)."""
    b = Builder(path, 512, context_tokens, "ms", **options)
    path, where = b.path, b.where
    for lineno, obj in iter_objects(path):
        ln = Line(where, lineno)
        ts = stamp(ln, ln.required(obj, "timestamp"), "timestamp")
        hashes = ln.hashes(ln.required(obj, "hash_ids"), "hash_ids")
        ilen = ln.optional_integer(obj, ("input_length",))
        olen = ln.optional_integer(obj, ("output_length",))
        b.add(hashes, ts, -1, ilen, olen or 0)
    return b.build("mooncake", name)


FORMAT = TraceFormat(
    name="mooncake", read=load_mooncake, order=10, sniff=_is_mooncake,
    description="Mooncake FAST'25 JSONL: timestamp (ms), hash_ids of 512-token blocks",
    options=HASH_OPTIONS, settings=HASH_SETTINGS,
)
