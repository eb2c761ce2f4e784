"""Content digests that give a result its identity: the trace it replayed and the
simulator source that replayed it (sweep resume and the journal key results by them)."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

_PKG = Path(__file__).resolve().parent
_TRACE_ARRAYS = ("req_offsets", "blocks", "arrival_s", "session", "input_tokens", "output_tokens")


def source_digest() -> str:
    """sha256 over numba's version and every sim_core source file (16 hex digits):
    any edit of the simulator changes it."""
    import numba

    h = hashlib.sha256(numba.__version__.encode())
    for p in sorted(_PKG.rglob("*.py")):
        h.update(str(p.relative_to(_PKG)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def trace_digest(trace) -> str:
    """blake2b over the trace's arrays (dtype, shape and bytes), its blocks' source ids
    when it has them (W-TinyLFU's libcachesim mode hashes them), its tool waits when it
    has them (policies may read them) and block size; cached on
    the trace. Names and provenance are not part of it: the same requests are the same
    trace. About 1 s per GB of arrays."""
    cached = getattr(trace, "_content_digest", None)
    if cached is None:
        h = hashlib.blake2b(digest_size=16)
        h.update(f"block_tokens={int(trace.block_tokens)}".encode())
        # optional arrays only when present: a trace without them keeps the digest it had
        names = _TRACE_ARRAYS + tuple(k for k in ("source_ids", "tool_wait_s") if getattr(trace, k, None) is not None)
        for name in names:
            a = np.ascontiguousarray(getattr(trace, name))
            h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
            h.update(memoryview(a).cast("B"))
        cached = h.hexdigest()
        trace._content_digest = cached
    return cached


def generator_digest(meta: dict) -> str:
    """The identity of a trace that sim_core.traces.synth generated, from what generated it: its
    parameters (`Trace.meta`, which records a non-default profile in full) and the
    simulator's source digest (which covers the generator). It stands for the content
    digest of a fresh generated trace: the same inputs give the same arrays bit for bit,
    and computing it costs nothing where hashing a full-scale week's arrays takes
    seconds. A trace derived from it (a subset, a sample, a view) is a new object and
    gets its content digest."""
    h = hashlib.blake2b(digest_size=16)
    h.update(repr(sorted((str(k), repr(v)) for k, v in meta.items())).encode())
    h.update(source_digest().encode())
    return "synth-" + h.hexdigest()
