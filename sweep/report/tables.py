"""The table printed at the end of a sweep."""
from __future__ import annotations

from typing import Mapping, Sequence

from sim_core.capacity import human_gib

from ..plan import Capacity


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


KNEE_POINTS = 0.01  # the knee: the smallest pool within 1 point of the largest pool's served ratio


def knee(pools: Sequence[tuple[str, float]]) -> int:
    """Index of the smallest pool whose served ratio is within KNEE_POINTS of the largest
    pool's. `pools` are (label, served ratio), smallest pool first."""
    top = pools[-1][1]
    return next(i for i, (_, s) in enumerate(pools) if s >= top - KNEE_POINTS - 1e-12)


def tier_table(curves, capacities: Sequence[Capacity], pools: Sequence[str], points: int = 4) -> str:
    """A tiered sweep's pool sizing: per policy and HBM capacity, the served ratio at each
    pool size, the knee (smallest pool within 1 point of the largest) and the mean TTFT
    there. `curves` are sweep Curves (served ratio and TTFT do not depend on the cost model:
    the first cost model's are read)."""
    by = {}
    for c in curves:
        by.setdefault((c.policy, c.pool), c)  # one cost model is enough
    idx = pick_points(len(capacities), points)
    pw = max([len("policy")] + [len(p) for p, _ in by])
    lines = [f"pool sizing: served ratio (HBM + lower tiers) per pool; knee = smallest pool within "
             f"{KNEE_POINTS * 100:g} point of the largest; TTFT there (service time, no queueing)", ""]
    head = f"{'policy':<{pw}}  {'HBM':>8}  " + "  ".join(f"{p:>14}" for p in pools) + f"  {'knee':>14}  {'TTFT ms':>8}"
    lines += [head, "-" * len(head)]
    for pol in dict.fromkeys(p for p, _ in by):
        for i in idx:
            rows = [by.get((pol, p)) for p in pools]
            if any(c is None or i not in c.rows for c in rows):
                continue
            served = [(p, c.rows[i].served_ratio) for p, c in zip(pools, rows)]
            k = knee(served)
            ttft = rows[k].rows[i].ttft_mean_s
            lines.append(f"{pol:<{pw}}  {human_gib(capacities[i].gib):>8}  " +
                         "  ".join(f"{s:>14.4f}" for _, s in served) + f"  {pools[k]:>14}  " +
                         (f"{ttft * 1e3:>8.1f}" if ttft == ttft else f"{'-':>8}"))
    return "\n".join(lines)
