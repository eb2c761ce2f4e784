"""LMCache lookup-hash log (``fmt="lmcache"``): what ``lmcache server
--lookup-hash-log-dir DIR`` writes

One line per ``lookup()`` of the LMCache multiprocess server (github LMCache/LMCache,
writer ``LookupHashLoggingSubscriber`` in
``lmcache/v1/mp_observability/subscribers/logging/lookup_hash.py``; files
``DIR/lookup_hashes_<UTC time>_<n>.jsonl``, rotated by time and size: concatenate them
in name order to replay a longer window)::

    {"timestamp": 1711929600.123, "request_id": "req-abc", "model_name": "DeepSeek-V3",
     "chunk_size": 256, "seq_len": 1024, "dtypes": ["float8_e4m3fn"],
     "shapes": [[32, 256, 128]], "chunk_hashes": ["0xab12...", "0x9f3c..."]}

=================  ========  ======================================================
field              required  meaning
=================  ========  ======================================================
``timestamp``      yes       time of the lookup, Unix epoch seconds (number)
``chunk_hashes``   yes       list of chunk hashes: hex strings (``"0x..."``, as the
                             writer formats bytes or ints) or integers; LMCache
                             chains them over the prefix (``compute_chunk_hashes``
                             takes the previous prefix hash) and hashes full chunks
                             only: ``floor(seq_len / chunk_size)`` of them
``chunk_size``     yes       tokens per chunk (int > 0; one value for the file)
``seq_len``        no        prompt tokens (int >= 0); absent = chunks * chunk_size
``request_id``     no        string; a repeated id is the engine asking again for
                             the same request (kept once: the first lookup;
                             ``meta["repeated_lookups"]`` counts the rest)
``model_name``     no        string; one model per file (a second one is an error:
                             two models never share a cache)
=================  ========  ======================================================

Hashes wider than 64 bits (LMCache's bytes digests) are kept by their low 64 bits.
Sessions and output lengths are not logged: ``session = -1``, ``output_tokens = 0``.
``dtypes`` and ``shapes`` are not read.
"""
from __future__ import annotations

from array import array
from pathlib import Path
from typing import Any

from ..trace import Trace
from .builder import DEFAULT_CONTEXT_TOKENS, Builder
from .format import HASH_OPTIONS, HASH_SETTINGS, TraceFormat
from .lines import Line, iter_objects, short
from .times import stamp

_MASK64 = (1 << 64) - 1
_MAX_HEX_DIGITS = 256  # a 1024-bit digest; longer text is not a hash


def _chunk_hashes(ln: Line, value: Any) -> array:
    field = "chunk_hashes"
    if not isinstance(value, list):
        raise ln.fail(field, f"expected a list of hex strings, got {short(value)}")
    out = array("q")
    for i, h in enumerate(value):
        if isinstance(h, str):
            text = h[2:] if h[:2] in ("0x", "0X") else h
            try:
                if not text or len(text) > _MAX_HEX_DIGITS:
                    raise ValueError
                x = int(text, 16)
            except ValueError:
                raise ln.fail(field, f"expected a hex string, got {short(h)} at index {i}") from None
        elif isinstance(h, int) and not isinstance(h, bool):
            x = h
        else:
            raise ln.fail(field, f"expected a hex string, got {short(h)} at index {i}")
        x &= _MASK64
        out.append(x - (1 << 64) if x >> 63 else x)  # two's complement int64
    return out


def load_lmcache(path: str | Path, *, name: str | None = None,
                 context_tokens: int | None = DEFAULT_CONTEXT_TOKENS, **options) -> Trace:
    """LMCache lookup-hash JSONL: one request per first lookup of a request id."""
    # block size: the file's chunk_size; full chunks only are hashed
    b = Builder(path, 1, context_tokens, "s", partial_last=False, **options)
    chunk_line = first_chunk = 0
    model: tuple[str, int] | None = None
    first_lookup: set[str] = set()
    repeated = 0
    for lineno, obj in iter_objects(b.path):
        ln = Line(b.where, lineno)
        ts = stamp(ln, ln.required(obj, "timestamp"), "timestamp")
        hashes = _chunk_hashes(ln, ln.required(obj, "chunk_hashes"))
        chunk = ln.integer(ln.required(obj, "chunk_size"), "chunk_size", minimum=1)
        if not chunk_line:
            first_chunk, chunk_line = chunk, lineno
            b.block_tokens = b.block_override or chunk
        elif chunk != first_chunk:
            raise ln.fail("chunk_size", f"{chunk} differs from {first_chunk} (line {chunk_line}); "
                                        f"one trace has one block size")
        seq_len = ln.optional_integer(obj, ("seq_len",))
        if obj.get("model_name") is not None:
            m = ln.string(obj["model_name"], "model_name")
            if model is None:
                model = (m, lineno)
            elif m != model[0]:
                raise ln.fail("model_name", f"{short(m)} differs from {short(model[0])} (line {model[1]}): "
                                            f"one trace is one model's cache; split the log by model")
        rid = obj.get("request_id")
        if rid not in (None, ""):
            rid = ln.string(rid, "request_id")
            if rid in first_lookup:
                repeated += 1
                continue
            first_lookup.add(rid)
        b.add(hashes, ts, -1, seq_len, 0)
    return b.build("lmcache", name, {"repeated_lookups": repeated,
                                     "model_name": model[0] if model else None})


FORMAT = TraceFormat(
    name="lmcache", read=load_lmcache, order=90, sniff=lambda obj: "chunk_hashes" in obj,
    description="LMCache lookup-hash log (lmcache server --lookup-hash-log-dir)",
    options=HASH_OPTIONS, settings=HASH_SETTINGS,
)
