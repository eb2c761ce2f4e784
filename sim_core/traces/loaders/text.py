"""Text trace (``fmt="text"``): prompts as text, tokenized with a local tokenizer file
(the ``tokenizers`` package, ``Tokenizer.from_file(tokenizer)``: a ``tokenizer.json``
such as a model repository ships) and hashed into prefix-chained blocks of any size
(``block_tokens``, default 16)::

    {"timestamp": 12.5, "prompt": "Explain the KV cache.", "session_id": 7,
     "output_length": 52}

Its fields are those of the tokens format (:mod:`sim_core.traces.loaders.tokens`), with
``prompt`` (string, required: the prompt as the engine receives it, any chat template
already applied) in place of ``token_ids``.

Token ids are ``tokenizer.encode(prompt).ids`` (the
tokenizer's own post-processor applies, e.g. a BOS token); ``input_tokens`` is their
count. Nothing is downloaded: the tokenizer is a file on disk. Hashing as in
:mod:`sim_core.traces.loaders.token_records`.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..trace import Trace
from .builder import DEFAULT_CONTEXT_TOKENS
from .format import TIME_UNIT, Option, TraceFormat
from .lines import Line
from .token_records import read_token_requests

DEFAULT_BLOCK_TOKENS = 16
TOKENIZER = Option("tokenizer", "file", "a tokenizer file", "/path/to/tokenizer.json", required=True)


def load_tokenizer(path: str | Path):
    """``tokenizers.Tokenizer.from_file``, with errors that name the file."""
    try:
        from tokenizers import Tokenizer
    except ImportError as e:  # an optional dependency: pip install 'kvcache-sweep[text]'
        raise ImportError("the text trace format needs the 'tokenizers' package "
                          "(pip install 'kvcache-sweep[text]')") from e
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(2, "tokenizer file not found", str(p))
    try:
        return Tokenizer.from_file(str(p))
    except Exception as e:  # noqa: BLE001 - the Rust side raises a plain Exception
        raise ValueError(f"{p}: not a tokenizers file (tokenizer.json): {e}") from None


def load_text(path: str | Path, *, name: str | None = None,
              context_tokens: int | None = DEFAULT_CONTEXT_TOKENS,
              block_tokens: int | None = None, tokenizer: str | Path | None = None,
              time_unit: str | None = None) -> Trace:
    """Prompt-text JSONL trace, tokenized with `tokenizer` (a tokenizer.json file)."""
    if tokenizer is None:
        raise TypeError("the text format needs a tokenizer file: tokenizer=/path/to/tokenizer.json "
                        "(trace.tokenizer=... on the command line)")
    tok = load_tokenizer(tokenizer)

    def tokens_of(ln: Line, obj: dict) -> np.ndarray:
        prompt = ln.string(ln.required(obj, "prompt"), "prompt")
        return np.asarray(tok.encode(prompt).ids, dtype=np.int64)

    trace = read_token_requests(path, "text", block_tokens or DEFAULT_BLOCK_TOKENS, context_tokens, name,
                                tokens_of, time_unit=time_unit)
    trace.meta["tokenizer"] = str(Path(tokenizer).expanduser().resolve())
    return trace


FORMAT = TraceFormat(
    name="text", read=load_text, order=60, hashes_tokens=True,
    description="JSONL of prompt text, tokenized with a local tokenizer file and hashed into chained blocks",
    sniff=lambda obj: "prompt" in obj and "token_ids" not in obj,
    options=("context_tokens", "block_tokens", "tokenizer", "time_unit"),
    settings=(TOKENIZER, TIME_UNIT),
)
