"""Bridge to libCacheSim (optional dependency) for cross-checks and benchmarks.

The access sequence of a trace is written as an oracleGeneral binary file (24-byte
records: uint32 time, uint64 id, uint32 size, int64 next-access index or -1), which
libCacheSim replays block by block: our `mode="block"` semantics.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..oracles.future import NEVER, next_use

ORACLE_DTYPE = np.dtype([("t", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])


def lcs_names() -> dict[str, str]:
    """our policy name -> libcachesim class name (parameters at their defaults), from
    each PolicySpec's `libcachesim`."""
    from ..policies import REGISTRY

    return {n: s.libcachesim for n, s in REGISTRY.items() if s.libcachesim}


LCS_NAMES = lcs_names()


def write_oracle_general(trace, path: str | Path) -> Path:
    """Write the trace's block accesses (unit size) as an oracleGeneral file; each block's
    object id is `trace.object_ids()` (its source id, else dense id + 1)."""
    path = Path(path)
    rec = np.empty(trace.n_accesses, dtype=ORACLE_DTYPE)
    # one tick per request keeps time monotone; libCacheSim's policies here ignore it
    rec["t"] = np.repeat(np.arange(trace.n_requests, dtype=np.uint32), trace.request_lengths)
    rec["id"] = trace.object_ids()[trace.blocks]
    rec["size"] = 1
    nu = next_use(trace)
    rec["next"] = np.where(nu == NEVER, -1, nu)
    rec.tofile(path)
    return path


def libcachesim_hit_ratio(oracle_path: str | Path, policy: str, capacity: int, **kwargs) -> float:
    """Object hit ratio of libCacheSim's `policy` replaying an oracleGeneral file."""
    import libcachesim as lcs

    cls = getattr(lcs, LCS_NAMES.get(policy, policy))
    reader = lcs.TraceReader(str(oracle_path), lcs.TraceType.ORACLE_GENERAL_TRACE)
    cache = cls(cache_size=int(capacity), **kwargs)
    obj_miss_ratio, _byte_miss_ratio = cache.process_trace(reader)
    return 1.0 - obj_miss_ratio
