"""What a policy is (family, cost-aware, oracle), from its sim_core PolicySpec, and how
the figures draw it.

A family keeps one line style (and is one group in the legend); its members differ in
colour (matplotlib's tab10 palette without its grey, starting at the family's own
colour) and in marker. Oracles are achromatic (black, then greys) and dashed; the
hierarchy's bound is black and dotted. So two
members of a family never share a colour, and no two policies share colour, line style
and marker. The grey left out of the online palette keeps online curves apart from the
oracles'.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from sim_core import get_policy
from sim_core.catalog.capacity import parse_size

#: Online palette: tab10 without #7f7f7f (grey is the oracles').
#: Ordered so that the policies most often swept together (lru, fifo, the quick-demotion
#: family, lfu) get nine different colours.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#e377c2", "#bcbd22", "#17becf", "#8c564b")
# a fourth, dark brown, since four oracles (belady, belady_compute, ilp, agent_next) share the family
ORACLE_COLOURS = ("#000000", "#555555", "#999999", "#7a4a1e")

#: Family display order (legend, tables): (first member's palette index, line style).
FAMILIES: dict[str, tuple[int, object]] = {
    "recency": (0, "-"),
    "fifo": (8, (0, (7, 2))),
    "frequency": (6, (0, (1, 1.5))),
    "quick_demotion": (1, (0, (4, 1.5))),
    "analytic": (5, (0, (7, 2, 1, 2))),
    "learned": (4, "-."),
    "session": (7, (0, (3, 1, 1, 1, 1, 1))),
    "prefix_specific": (2, (0, (10, 2, 2, 2, 2, 2))),
    "compute_aware": (3, (0, (2, 1))),
    "agent": (4, (0, (1, 2, 5, 2))),  # sim_core's agent hints (ttl_pin, agent_end)
    "oracle": (0, "--"),
    "bound": (0, ":"),  # sim_core's tier_bound: black, dotted, its own marker
}
OTHER = (5, (0, (5, 3)))
_ORACLE_LINESTYLES = ("--", (0, (2, 1.5)), (0, (6, 2, 1, 2)), ":")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
#: A tiered sweep names its curves "<policy> @ <pool>" (sweep.curves.Curve.label).
POOL_SEP = " @ "


@dataclass(frozen=True)
class PolicyInfo:
    name: str
    family: str
    cost_aware: bool
    offline: bool  # looks at the future: an oracle, not a deployable policy


def reference_of(label: str, reference: str = "lru") -> str:
    """The curve a curve's margin ("vs LRU") is taken against, everywhere (console, report,
    figures): LRU, above the same pool in a tiered sweep ("s3fifo @ dram=1TiB" ->
    "lru @ dram=1TiB"), so a margin is the policy's and never the pool's."""
    return reference + (POOL_SEP + label.split(POOL_SEP, 1)[1] if POOL_SEP in label else "")


def policy_info(name: str) -> PolicyInfo:
    """From sim_core's registry ("lru @ dram=1TiB" is lru's); a name it does not know is
    an online policy of family "other" (a store may hold curves of policies since removed)."""
    try:
        s = get_policy(name.split(POOL_SEP, 1)[0])
    except ValueError:
        return PolicyInfo(name, "other", False, False)
    return PolicyInfo(name, s.family, bool(s.cost_aware), bool(s.offline))


#: A tier swept over write/admission modes tags its pool label: "dram=1TiB[on_compute+after_hits=2]".
MODE_TAG = re.compile(r"\[([^\]]*)\]")


def pool_part(tier: str, size: str, mode: str = "") -> str:
    """One tier's part of a pool label (sweep.plan.resolve_pools joins them with ",")."""
    return f"{tier}={size}" + (f"[{mode}]" if mode else "")


def pool_parts(pool: str) -> tuple[str, str]:
    """(the sizes, the mode) of a pool label: "dram=1TiB[on_compute]" -> ("dram=1TiB",
    "on_compute"); the mode is "" when no tier was swept over modes, and names the tier
    when several were ("dram:on_compute ssd:all")."""
    sizes, modes = [], []
    for part in pool.split(","):
        m = MODE_TAG.search(part)
        sizes.append(MODE_TAG.sub("", part))
        if m:
            modes.append((part.split("=", 1)[0], m.group(1)))
    mode = modes[0][1] if len(modes) == 1 else " ".join(f"{t}:{m}" for t, m in modes)
    return ",".join(sizes), mode


def pool_key(pool: str) -> tuple:
    """Sort key of a pool label: "dram=0" < "dram=12GiB" < "dram=1TiB"; level by level,
    then by mode."""
    sizes, mode = pool_parts(pool)
    out = []
    for part in sizes.split(","):
        try:
            out.append(parse_size(part.split("=", 1)[-1])[0])
        except ValueError:
            out.append(float("inf"))
    return tuple(out), mode


def family_order(family: str) -> int:
    order = list(FAMILIES)
    return order.index(family) if family in order else len(order)


def ordered(names: Iterable[str]) -> list[PolicyInfo]:
    """Policies grouped by family (display order), alphabetical within a family."""
    infos = [policy_info(n) for n in set(names)]
    return sorted(infos, key=lambda p: (family_order(p.family), p.family, p.name))


@dataclass(frozen=True)
class Style:
    colour: str
    linestyle: object
    marker: str
    linewidth: float


def styles(names: Iterable[str]) -> dict[str, Style]:
    """policy -> Style; members of a family are numbered in name order (a family of more
    than len(PALETTE) members repeats colours, told apart by marker)."""
    out: dict[str, Style] = {}
    seen: dict[str, int] = {}
    # belady numbered first among the oracles: it keeps black dashes whatever joins them
    for p in sorted(ordered(names), key=lambda p: p.name != "belady"):
        i = seen.get(p.family, 0)
        seen[p.family] = i + 1
        marker = _MARKERS[i % len(_MARKERS)]
        if p.family == "bound":
            out[p.name] = Style(ORACLE_COLOURS[0], FAMILIES["bound"][1], "x", 2.0)
        elif p.offline:
            out[p.name] = Style(ORACLE_COLOURS[i % len(ORACLE_COLOURS)], _ORACLE_LINESTYLES[i % len(_ORACLE_LINESTYLES)],
                                marker, 2.0)
        else:
            base, linestyle = FAMILIES.get(p.family, OTHER)
            out[p.name] = Style(PALETTE[(base + i) % len(PALETTE)], linestyle, marker,
                                2.4 if p.name == "lru" else 1.6)
    return out
