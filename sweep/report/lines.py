"""One colour per line, the same in every figure of a serving report (and on its MLflow
runs), and the axes those figures share: plain log ticks, capacity labels.

A serving sweep's lines are configurations ("lru @ kv_router x8"), not policies of a
family: the families' palette (sweep.report.families) gives two of them one colour as
soon as two routes share a policy. Here each name gets its own: matplotlib's tab10 (without
its grey) for the first nine, then hues spaced by the golden angle at two lightnesses, so any number
of lines stays distinct; markers cycle too, for print in grey.
"""
from __future__ import annotations

import base64
import colorsys
import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from .slo import seconds

#: tab10 (matplotlib's default cycle) in its order, without its grey: greys are the SLO's and the ceiling's
TAB10 = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf")
MARKERS = ("o", "s", "D", "^", "v", "P", "X", "*", "h", "<", ">")
#: the SLO's bound and the fleet ceiling in every figure
SLO_COLOUR = "#444444"  # a dark grey: no line's colour, not the axes' black either (tests find it by its pixels)
CEILING_COLOUR = "#555555"


@dataclass(frozen=True)
class LineStyle:
    colour: str
    marker: str


def colour(i: int) -> str:
    """The i-th colour: tab10 without grey, then golden-angle hues alternating two lightnesses."""
    if i < len(TAB10):
        return TAB10[i]
    k = i - len(TAB10)
    h = (0.07 + k * 0.381966) % 1.0
    r, g, b = colorsys.hsv_to_rgb(h, 0.75, 0.85 if k % 2 == 0 else 0.55)
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


def line_styles(names: Iterable[str]) -> dict[str, LineStyle]:
    """name -> its style, in the order given (the sweep's: routes, then policies)."""
    return {n: LineStyle(colour(i), MARKERS[i % len(MARKERS)]) for i, n in enumerate(dict.fromkeys(names))}


def plain(x: float) -> str:
    """A tick label without exponents: 0.05, 0.5, 2, 20, 1,000."""
    if x >= 1000:
        return f"{x:,.0f}"
    if x >= 1:
        return f"{x:g}"
    return f"{x:.3g}"


def plain_log_axis(axis) -> None:
    """Ticks at 1, 2 and 5 of each decade, written out (not 4x10^1): a matplotlib Axis."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: plain(v)))
    axis.set_minor_formatter(NullFormatter())


def save(fig, handles: list, labels: list, slo_s: float, title: str, path) -> Path:
    """The legend outside the axes (the SLO's bound first when there is one), the title,
    then the PNG at `path` (110 dpi, as the report embeds it)."""
    from matplotlib.lines import Line2D

    if slo_s == slo_s:
        handles = [Line2D([], [], color=SLO_COLOUR, linestyle="--", linewidth=1.4)] + list(handles)
        labels = [f"SLO: p99 TTFT <= {seconds(slo_s)}"] + list(labels)
    fig.legend(handles, labels, loc="outside right upper", frameon=False, handlelength=3.0)
    fig.suptitle(title)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def img_html(png, alt: str, names: Iterable[str]) -> str:
    """A figure embedded in the report, saying which colour each of its lines has and the
    SLO's (data-lines, data-slo-colour): what a reader matches against the legend, and what
    tests/test_browser_fleet.py finds among the pixels the browser draws."""
    lines = {n: s.colour for n, s in line_styles(names).items()}
    data = base64.b64encode(Path(png).read_bytes()).decode("ascii")
    return (f'<img class="lines" alt="{html.escape(alt)}" data-lines="{html.escape(json.dumps(lines))}" '
            f'data-slo-colour="{SLO_COLOUR}" src="data:image/png;base64,{data}">')
