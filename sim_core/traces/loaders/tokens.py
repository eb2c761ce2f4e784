"""Token-level trace (``fmt="tokens"``): the prompt's token ids, hashed here into
prefix-chained blocks of any size (``block_tokens``, default 16)::

    {"timestamp": 12.5, "token_ids": [128000, 849, 21435, 279], "session_id": "chat-7",
     "output_length": 52}

=================  ========  ======================================================
field              required  meaning
=================  ========  ======================================================
``timestamp``      yes [1]   arrival in seconds (number)
``timestamp_ms``   yes [1]   arrival in milliseconds, instead of ``timestamp``
``token_ids``      yes       list of token ids (integers >= 0), the whole prompt
``session_id``     no        session key (string or integer)
``output_length``  no        generated tokens (int >= 0; 0 when absent)
=================  ========  ======================================================

[1] exactly one of the two. ``input_tokens = len(token_ids)``; the last block may be
partial. The hash chain and its source (vLLM's ``hash_block_tokens``) are described in
:mod:`sim_core.traces.loaders.token_records`.
"""
from __future__ import annotations

from pathlib import Path

from ..trace import Trace
from .builder import DEFAULT_CONTEXT_TOKENS
from .format import TIME_UNIT, TraceFormat
from .lines import Line
from .token_records import read_token_requests, token_array

DEFAULT_BLOCK_TOKENS = 16


def load_tokens(path: str | Path, *, name: str | None = None,
                context_tokens: int | None = DEFAULT_CONTEXT_TOKENS,
                block_tokens: int | None = None, time_unit: str | None = None) -> Trace:
    """Token-id JSONL trace, hashed into chained blocks of `block_tokens` (default 16)."""
    def tokens_of(ln: Line, obj: dict):
        return token_array(ln, ln.required(obj, "token_ids"), "token_ids")

    return read_token_requests(path, "tokens", block_tokens or DEFAULT_BLOCK_TOKENS, context_tokens, name,
                               tokens_of, time_unit=time_unit)


FORMAT = TraceFormat(
    name="tokens", read=load_tokens, order=50, hashes_tokens=True,
    description="JSONL of prompt token ids, hashed into chained blocks of any size",
    sniff=lambda obj: "token_ids" in obj,
    options=("context_tokens", "block_tokens", "time_unit"), settings=(TIME_UNIT,),
)
