"""The table printed at the end of a sweep."""
from __future__ import annotations

from typing import Mapping, Sequence

from .plan import Capacity, human_gib


def pick_points(n: int, k: int) -> list[int]:
    """k capacity indices spread evenly over n (first and last included)."""
    if k <= 0:
        return []
    if n <= k:
        return list(range(n))
    if k == 1:
        return [n - 1]
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def summary_table(curves: Mapping[str, Mapping[str, Sequence[dict]]], capacities: Sequence[Capacity],
                  points: int = 4, policy_order: Sequence[str] = (), cost_order: Sequence[str] = (),
                  sample_rate: float | None = None) -> str:
    """Compute savings per (policy, cost model) at a few capacities and the mean over all
    capacities of the curve; within a cost model, best mean first. Under sampled replay,
    a value that was replayed exactly (below the sampling floor) is marked with *."""
    if not curves:
        return "no results"
    idx = pick_points(len(capacities), points)
    heads = [human_gib(capacities[i].gib) for i in idx]
    pw = max([len("policy")] + [len(p) for per in curves.values() for p in per])
    cw = max([len("cost model")] + [len(m) for m in curves])
    col = max([8] + [len(h) for h in heads])
    title = "compute-savings ratio (cost model uniform = block hit ratio)"
    if sample_rate is not None:
        title += f"; sampled replay at r={sample_rate:g} (miniature simulation), * = replayed exactly"
    lines = [title,
             f"{'policy':<{pw}}  {'cost model':<{cw}}  " + "  ".join(f"{h:>{col}}" for h in heads)
             + f"  {'mean':>{col}}"]
    lines.append("-" * len(lines[-1]))
    order = {p: i for i, p in enumerate(policy_order)}
    corder = {m: i for i, m in enumerate(cost_order)}
    for m in sorted(curves, key=lambda m: (corder.get(m, len(corder)), m)):
        rows = []
        for p, rs in curves[m].items():
            by_idx = {r["capacity_index"]: r["compute_savings"] for r in rs}
            exact = {r["capacity_index"] for r in rs if sample_rate is not None and r.get("sample_rate", 1.0) == 1.0}
            mean = sum(by_idx.values()) / len(by_idx) if by_idx else float("nan")
            cells = [(f"{by_idx[i]:>{col - 1}.4f}*" if i in exact else f"{by_idx[i]:>{col}.4f}")
                     if i in by_idx else f"{'-':>{col}}" for i in idx]
            partial = "" if len(by_idx) == len(capacities) else f"  ({len(by_idx)}/{len(capacities)} capacities)"
            rows.append((-mean, order.get(p, len(order)), p,
                         f"{p:<{pw}}  {m:<{cw}}  " + "  ".join(cells) + f"  {mean:>{col}.4f}" + partial))
        lines += [r[-1] for r in sorted(rows)]
    return "\n".join(lines)
