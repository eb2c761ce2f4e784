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
                  sample_rate: float | None = None, saturation_blocks: int | None = None) -> str:
    """Compute savings per policy at a few capacities and the mean over all capacities of
    the curve, one section per cost model, best mean first. Capacities that hold the
    whole trace (>= `saturation_blocks`) give every policy the same value: they share
    one column. Under sampled replay, a value replayed exactly is marked with *."""
    if not curves:
        return "no results"
    n_unsat = sum(1 for c in capacities if saturation_blocks is None or c.blocks < saturation_blocks)
    saturated = n_unsat < len(capacities)
    idx = pick_points(n_unsat, points - 1 if saturated and n_unsat else points) + ([n_unsat] if saturated else [])
    heads = [human_gib(capacities[i].gib) + ("+" if saturated and i == n_unsat else "") for i in idx]
    pw = max([len("policy")] + [len(p) for per in curves.values() for p in per])
    col = max([8] + [len(h) for h in heads])
    title = "compute-savings ratio"
    if sample_rate is not None:
        title += f"; sampled replay at r={sample_rate:g} (miniature simulation), * = replayed exactly"
    if saturated:
        title += (f"; {heads[-1]} = every capacity from {heads[-1][:-1]} up ({len(capacities) - n_unsat} of "
                  f"{len(capacities)}) holds the whole trace")
    header = f"{'policy':<{pw}}  " + "  ".join(f"{h:>{col}}" for h in heads) + f"  {'mean':>{col}}"
    lines = [title]
    order = {p: i for i, p in enumerate(policy_order)}
    corder = {m: i for i, m in enumerate(cost_order)}
    for m in sorted(curves, key=lambda m: (corder.get(m, len(corder)), m)):
        lines += ["", f"cost model {m}" + (" (= block hit ratio)" if m == "uniform" else ""), header,
                  "-" * len(header)]
        rows = []
        for p, rs in curves[m].items():
            by_idx = {r["capacity_index"]: r["compute_savings"] for r in rs}
            exact = {r["capacity_index"] for r in rs if sample_rate is not None and r.get("sample_rate", 1.0) == 1.0}
            mean = sum(by_idx.values()) / len(by_idx) if by_idx else float("nan")
            cells = [(f"{by_idx[i]:>{col - 1}.4f}*" if i in exact else f"{by_idx[i]:>{col}.4f}")
                     if i in by_idx else f"{'-':>{col}}" for i in idx]
            partial = "" if len(by_idx) == len(capacities) else f"  ({len(by_idx)}/{len(capacities)} capacities)"
            rows.append((-mean, order.get(p, len(order)), p,
                         f"{p:<{pw}}  " + "  ".join(cells) + f"  {mean:>{col}.4f}" + partial))
        lines += [r[-1] for r in sorted(rows)]
    return "\n".join(lines)
