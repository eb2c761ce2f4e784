"""What a policy is (family, cost-aware, oracle), from its sim_core PolicySpec, and how
the figures draw it: one colour per family, a distinct line style and marker per member,
oracles in black and dashed. Twenty curves stay distinguishable because no two share
both colour and style."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from sim_core import get_policy

#: Family display order (legend, tables) and colour (colour-blind-safe where possible).
FAMILY_COLOURS: dict[str, str] = {
    "recency": "#1f77b4",
    "fifo": "#8c564b",
    "frequency": "#b8a000",
    "quick_demotion": "#ff7f0e",
    "analytic": "#7f7f7f",
    "learned": "#9467bd",
    "session": "#17becf",
    "prefix_specific": "#2ca02c",
    "compute_aware": "#d62728",
    "oracle": "#000000",
}
OTHER_COLOUR = "#e377c2"
_LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (8, 2)))
_ORACLE_LINESTYLES = ("--", (0, (2, 1.5)), (0, (6, 2, 1, 2)), ":")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


@dataclass(frozen=True)
class PolicyInfo:
    name: str
    family: str
    cost_aware: bool
    offline: bool  # looks at the future: an oracle, not a deployable policy


def policy_info(name: str) -> PolicyInfo:
    """From sim_core's registry; a name it does not know is an online policy of family
    "other" (a store may hold curves of policies since removed)."""
    try:
        s = get_policy(name)
    except ValueError:
        return PolicyInfo(name, "other", False, False)
    return PolicyInfo(name, s.family, bool(s.cost_aware), bool(s.offline))


def family_order(family: str) -> int:
    order = list(FAMILY_COLOURS)
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
    """policy -> Style; members of a family are numbered in name order."""
    out: dict[str, Style] = {}
    seen: dict[str, int] = {}
    for p in ordered(names):
        i = seen.get(p.family, 0)
        seen[p.family] = i + 1
        if p.offline:
            out[p.name] = Style("#000000", _ORACLE_LINESTYLES[i % len(_ORACLE_LINESTYLES)],
                                _MARKERS[i % len(_MARKERS)], 2.0)
        else:
            out[p.name] = Style(FAMILY_COLOURS.get(p.family, OTHER_COLOUR), _LINESTYLES[i % len(_LINESTYLES)],
                                _MARKERS[i % len(_MARKERS)], 2.4 if p.name == "lru" else 1.6)
    return out
