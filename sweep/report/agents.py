"""The report's agent-hint section: the share of the LRU-to-Belady gap each agent hint
(sim_core/policies/agent.py) recovers, per regime, from the curves a sweep already has.

share = (sum of the hint's hit ratios - LRU's) / (Belady's - LRU's) over the regime's
swept capacities (docs/agents.md uses the same formula on hit counts). Empty unless the
sweep has complete curves of lru, belady and at least one hint.
"""
from __future__ import annotations

import html

from sim_core.policies.agent import HINT_POLICIES

from .regimes import REGIMES, in_regime
from .sweeps import SweepTable


def gap_rows(table: SweepTable) -> list[dict]:
    """One row per (regime, hint): regime, policy, capacities, hit ratio means, share."""
    if not table.cost_models:
        return []
    curves = table.complete(table.cost_models[0])  # hit ratios do not depend on the cost model
    hints = [p for p in HINT_POLICIES if p in curves]
    if "lru" not in curves or "belady" not in curves or not hints:
        return []
    out = []
    for reg in REGIMES:
        caps = {int(r["capacity_index"]) for r in in_regime(curves["lru"], reg)}
        if not caps:
            continue

        def total(p):
            return sum(float(r["hit_ratio"]) for r in curves[p] if int(r["capacity_index"]) in caps)

        lru, opt = total("lru"), total("belady")
        for p in hints:
            got = total(p)
            out.append({"regime": reg.title, "policy": p, "capacities": len(caps), "lru": lru / len(caps),
                        "belady": opt / len(caps), "hint": got / len(caps),
                        "share": (got - lru) / (opt - lru) if opt > lru else float("nan")})
    return out


def agents_html(rows: list[dict]) -> str:
    if not rows:
        return ""
    e = html.escape
    body = "".join(
        f"<tr><td>{e(r['regime'])}</td><td>{r['capacities']}</td><td>{e(r['policy'])}</td>"
        f"<td>{r['lru']:.4f}</td><td>{r['hint']:.4f}</td><td>{r['belady']:.4f}</td>"
        f"<td>{'-' if r['share'] != r['share'] else format(r['share'], '+.1%')}</td></tr>" for r in rows)
    return ('<section id="agents"><h2>Agent hints</h2><p>Share of the LRU-to-Belady gap each agent hint recovers, '
            "(hint - LRU) / (Belady - LRU) over the regime's swept capacities, block hit ratio "
            "(docs/agents.md).</p><table><tr><th>regime</th><th>capacities</th><th>policy</th><th>LRU</th>"
            f"<th>hint</th><th>Belady</th><th>gap recovered</th></tr>{body}</table></section>")
