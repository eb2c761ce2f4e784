"""Pool sizing under load (tier=... with fleet=...): per router, replica count, load, policy
and KV cache per replica, the smallest lower tiers within a point of saturation and the TTFT
there, from the serving rows of a sweep (or of `advise`).

A serving row with tiers carries each tier's capacity in blocks (`tier_capacity.<tier>`) and
whether the fleet shares it (`tier_shared.<tier>`): the memory a pool costs is the private
tiers' blocks times the replicas plus the shared tiers' once. Saturation is the best
first-admission reuse over the pools swept at that point; the answer is the cheapest pool
(fewest blocks in all, then the smaller shared pool) whose reuse is within POINT of it. When
that is the most expensive pool swept while a cheaper one is more than a point below, reuse
may still be rising there: the answer says so ("not shown to saturate").
"""
from __future__ import annotations

import html
from typing import Mapping, Sequence

from .slo import route_of

POINT = 0.01  # one point of first-admission reuse
ABOVE = " above "  # a serving curve's label: "lru @ 1x load, kv_router x8 above dram=1TiB,pool=8TiB"

Row = Mapping[str, object]


def pool_of(label: str) -> str:
    return label.split(ABOVE, 1)[1] if ABOVE in label else ""


def _tiers(row: Row) -> tuple[dict, dict]:
    cap = {k.split(".", 1)[1]: float(v) for k, v in row.items() if str(k).startswith("tier_capacity.")}
    shared = {k.split(".", 1)[1]: bool(float(v)) for k, v in row.items() if str(k).startswith("tier_shared.")}
    return cap, shared


def cost(row: Row) -> tuple[float, float, float]:
    """(private blocks per replica, shared blocks, blocks in all) of a row's tiers."""
    cap, shared = _tiers(row)
    priv = sum(c for t, c in cap.items() if not shared.get(t))
    pool = sum(c for t, c in cap.items() if shared.get(t))
    return priv, pool, priv * float(row.get("replicas", 1)) + pool


def held_text(row: Row, replicas: int, blocks: int) -> str:
    """'2 x 1,000 blocks', or with lower tiers '2 x (1,000 + 4,000) + 64,000 shared blocks': the
    capacity the fleet ceiling pools (HBM and every private tier per replica, a shared one once)."""
    priv, pool, _ = cost(row)
    if not priv and not pool:
        return f"{replicas} x {blocks:,} blocks"
    per = f"({blocks:,} + {priv:,.0f})" if priv else f"{blocks:,}"
    return f"{replicas} x {per}" + (f" + {pool:,.0f} shared" if pool else "") + " blocks"


def sizing(curves: Mapping[str, Sequence[Row]]) -> list[dict]:
    """One record per (router, replicas, load, policy, capacity) swept over several pools."""
    groups: dict[tuple, list[tuple[str, Row]]] = {}
    for label, rows in curves.items():
        pool = pool_of(label)
        if not pool:
            continue
        policy = label.split(" @ ", 1)[0]
        for r in rows:
            router, reps = route_of(r)
            key = (router, reps, float(r.get("load", 0.0)), policy, int(r.get("capacity_blocks", 0)))
            groups.setdefault(key, []).append((pool, r))
    out = []
    for (router, reps, load, policy, blocks), got in groups.items():
        if len(got) < 2:
            continue
        got.sort(key=lambda pr: (cost(pr[1])[2], cost(pr[1])[1]))
        top = max(float(r["first_reuse_ratio"]) for _, r in got)
        pool, row = next((p, r) for p, r in got if float(r["first_reuse_ratio"]) >= top - POINT)
        priv, shared, total = cost(row)
        last = row is got[-1][1]
        below = [float(r["first_reuse_ratio"]) for _, r in got[:-1]]
        rising = last and (not below or max(below) < top - POINT)
        out.append({"router": router, "replicas": reps, "load": load, "policy": policy, "capacity_blocks": blocks,
                    "capacity_label": row.get("capacity_label", f"{blocks} blocks"), "pool": pool,
                    "private_blocks": priv, "shared_blocks": shared, "total_blocks": total,
                    "first_reuse_ratio": float(row["first_reuse_ratio"]), "saturation": top,
                    "ttft_mean_s": float(row["ttft_mean_s"]), "ttft_p99_s": float(row["ttft_p99_s"]),
                    "rising": rising, "pools": len(got)})
    out.sort(key=lambda d: (d["load"], d["policy"], d["capacity_blocks"], d["replicas"], d["router"]))
    return out


def _ms(s: float) -> str:
    return "nan" if s != s else f"{s * 1e3:,.0f}"


def lines(records: Sequence[dict]) -> list[str]:
    """The console's pool-sizing table under load."""
    if not records:
        return []
    out = ["", f"pool sizing under load: per router and replicas, the cheapest pool within {POINT * 100:g} point of "
               "the best first-admission reuse swept (private blocks per replica x replicas + shared blocks), and "
               "the TTFT there",
           f"{'load':>5}  {'policy':<10} {'HBM':>10}  {'router':<12} {'reps':>4}  {'pool':<28} {'reuse':>7} "
           f"{'best':>7}  {'TTFT mean ms':>12} {'p99 ms':>9}"]
    for d in records:
        pool = (">" if d["rising"] else "") + d["pool"]
        out.append(f"{d['load']:>4g}x  {d['policy']:<10} {str(d['capacity_label']):>10}  {d['router']:<12} "
                   f"{d['replicas']:>4}  {pool:<28} {d['first_reuse_ratio']:>7.4f} {d['saturation']:>7.4f}  "
                   f"{_ms(d['ttft_mean_s']):>12} {_ms(d['ttft_p99_s']):>9}")
    if any(d["rising"] for d in records):
        out.append("  >pool: the largest pool swept, and reuse still rises by more than a point there (not shown to "
                   "saturate)")
    return out


def html_section(records: Sequence[dict]) -> str:
    if not records:
        return ""
    head = ("<tr><th>load</th><th>policy</th><th>HBM per replica</th><th>router</th><th>replicas</th>"
            "<th>pool</th><th>private blocks</th><th>shared blocks</th><th>first-admission reuse</th>"
            "<th>best swept</th><th>TTFT mean (ms)</th><th>TTFT p99 (ms)</th></tr>")
    body = "".join(
        f"<tr><td>{d['load']:g}x</td><td>{html.escape(d['policy'])}</td><td>{html.escape(str(d['capacity_label']))}"
        f"</td><td>{html.escape(d['router'])}</td><td>{d['replicas']}</td>"
        f"<td>{'&gt;' if d['rising'] else ''}{html.escape(d['pool'])}</td><td>{d['private_blocks']:,.0f}</td>"
        f"<td>{d['shared_blocks']:,.0f}</td><td>{d['first_reuse_ratio']:.4f}</td><td>{d['saturation']:.4f}</td>"
        f"<td>{_ms(d['ttft_mean_s'])}</td><td>{_ms(d['ttft_p99_s'])}</td></tr>" for d in records)
    return (f"<h2>Pool sizing under load</h2><p>Per router and replica count, the cheapest pool within "
            f"{POINT * 100:g} point of the best first-admission reuse swept (private blocks per replica times the "
            f"replicas, plus the shared pool's once), and the TTFT there; &gt;: reuse still rises at the largest "
            f"pool swept.</p><table>{head}{body}</table>")


def markdown(records: Sequence[dict]) -> list[str]:
    if not records:
        return []
    out = ["", "## Pool sizing under load", "",
           f"Per router and replica count, the cheapest pool within {POINT * 100:g} point of the best "
           "first-admission reuse swept (private blocks per replica x replicas + shared blocks), and the TTFT there; "
           ">: reuse still rises at the largest pool swept.", "",
           "| load | policy | HBM per replica | router | replicas | pool | reuse | best swept | TTFT mean (ms) | "
           "TTFT p99 (ms) |", "|---|---|---|---|---:|---|---:|---:|---:|---:|"]
    for d in records:
        out.append(f"| {d['load']:g}x | {d['policy']} | {d['capacity_label']} | {d['router']} | {d['replicas']} | "
                   f"{'>' if d['rising'] else ''}{d['pool']} | {d['first_reuse_ratio']:.4f} | {d['saturation']:.4f} | "
                   f"{_ms(d['ttft_mean_s'])} | {_ms(d['ttft_p99_s'])} |")
    return out


__all__ = ["ABOVE", "POINT", "cost", "held_text", "html_section", "lines", "markdown", "pool_of", "sizing"]
