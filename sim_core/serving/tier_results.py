"""The lower tiers' part of a ServeResult: per tier and per replica, what each served at first
admission, what it loaded, the time requests waited for it, and what it refused to take
(the compiled side: sim_core.serving.tiers)."""
from __future__ import annotations

import dataclasses

import numpy as np

from .state import C_LOADED
from .tiers import FIRST_FOREIGN, FIRST_HBM, RC_FOREIGN, RC_SKIP


def tier_fields(res, specs, views, cache, reqs, bt: int):
    """`res` with the tier fields filled in, and each per_replica record extended; `views`:
    each replica's (sim_core.serving.tiers.Below)."""
    lo = views[0]
    Q = len(res.per_replica)
    rc = np.stack([views[q].rc for q in range(Q)])  # [Q, N_RC]
    wait = np.stack([views[q].wait for q in range(Q)])  # [Q, 3]
    names = [s.name for s in specs]
    n = len(names)
    loads = cache.c[:, C_LOADED:C_LOADED + n]  # [Q, n] blocks loaded, every admission
    first = lo.first[:, :]  # [5, N] blocks at the first admission
    skip = rc[:, RC_SKIP:RC_SKIP + n]
    P = float(res.prompt_tokens)
    per = []
    for q, rec in enumerate(res.per_replica):
        k = reqs.rep == q
        d = {**rec, "hbm_tokens": int(first[FIRST_HBM, k].sum()) * bt, "pool_foreign_blocks": int(rc[q, RC_FOREIGN])}
        for i, m in enumerate(names):  # flat keys, as a sweep's rows hold them (replica<q>.tier_tokens.<tier>)
            d[f"tier_tokens.{m}"] = int(first[1 + i, k].sum()) * bt
            d[f"tier_loads.{m}"] = int(loads[q, i])
            d[f"load_wait_s.{m}"] = float(wait[q, i])
            d[f"skipped_writes.{m}"] = int(skip[q, i])
        per.append(d)
    total = loads.sum(axis=0)
    return dataclasses.replace(
        res, per_replica=per,
        tier_capacity={s.name: int(s.capacity) for s in specs}, tier_shared={s.name: int(s.shared) for s in specs},
        tier_hits={m: int(total[i]) for i, m in enumerate(names)},
        tier_loaded_bytes={m: int(total[i]) * int(lo.block_bytes) for i, m in enumerate(names)},
        tier_load_s={m: float(wait[:, i].sum()) for i, m in enumerate(names)},
        tier_skipped_writes={m: int(skip[:, i].sum()) for i, m in enumerate(names)},
        tier_first_tokens={m: int(first[1 + i].sum()) * bt for i, m in enumerate(names)},
        hbm_first_reuse_ratio=float(first[FIRST_HBM].sum()) * bt / P if P else float("nan"),
        pool_foreign_blocks=int(rc[:, RC_FOREIGN].sum()))


__all__ = ["tier_fields"]
