"""Figures of the critical path section: the median step of each rank, stacked by what held it.

No computation beyond unit conversion: the medians come from `traceview.critical_path.analysis`; each rank's
bar carries the drill-down address of its `median_step` (the page's script follows it on a click).
"""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from traceview.reports.html.figures import MAX_RANK_BARS, NOISE_FLOOR_MS, rank_bars

from traceview.critical_path.analysis import CriticalPath
from traceview.critical_path.categories import DEVICE_CATEGORIES
from traceview.reduce.analysis import RunAnalysis

GROUP_COLOURS = (
    ("compute_", ("#0072B2", "#56B4E9", "#009E73", "#80CFB9", "#2B7A9E")),
    ("comm_", ("#E69F00",)),
    ("peer_", ("#D55E00",)),
    ("blocking_", ("#CC79A7", "#000000", "#555555", "#7F7F7F")),
    ("", ("#F0E442", "#999999", "#888888", "#BBBBBB", "#666666", "#DDDDDD", "#C7C7C7")),
)
"""Colours by the category's prefix, from the report's colour-blind-safe palette (`OKABE_ITO`, `TINTS`) and
greys: compute blues and greens, communication orange, peer waits vermillion, blocking calls reddish purple,
black and dark greys, the host's yellow and light greys; taken in turn within a group (the legend and the
hover name each category)."""


def _colours(categories: tuple[str, ...]) -> dict[str, str]:
    """A colour per category (`GROUP_COLOURS`)."""
    taken: dict[str, int] = {}
    found: dict[str, str] = {}
    for category in categories:
        prefix, palette = next((p, c) for p, c in GROUP_COLOURS if category.startswith(p))
        found[category] = palette[taken.get(prefix, 0) % len(palette)]
        taken[prefix] = taken.get(prefix, 0) + 1
    return found


def path_bars(path: CriticalPath) -> go.Figure:
    """Stacked bars per rank: the median step's critical path (ms) by category; a category no rank holds is
    left out of the legend."""
    columns = [f"{c}_us" for c in path.categories]
    per_rank = path.per_rank.with_columns([pl.col(c) / 1000 for c in columns])
    held = [c for c in path.categories if per_rank.get_column(f"{c}_us").abs().max() or 0.0]
    colours = _colours(path.categories)
    bars = [
        (c.removeprefix("compute_") if c in DEVICE_CATEGORIES else c, f"{c}_us", colours[c]) for c in held
    ]
    title = "Critical path of the median step per rank, by what held it (click a bar: that step in detail)"
    figure = rank_bars(per_rank, bars, title, yaxis_title="ms", floor=NOISE_FLOOR_MS)
    if per_rank.height <= MAX_RANK_BARS:  # one bar per rank: each links to its median step's drill-down cell
        links = [drill_link(rank, step) for rank, step in per_rank.select("rank", "median_step").iter_rows()]
        figure.update_traces(customdata=links, selector={"type": "bar"})
    return figure


def drill_link(rank: int, step: int | None) -> str | None:
    """The step drill-down's address of a (rank, step) cell (`#cell=RANK-STEP`, docs/metrics.md, "Report");
    None without a step."""
    return None if step is None else f"#cell={rank}-{step}"


def critical_path_figures(analysis: RunAnalysis) -> dict[str, go.Figure]:
    """The section's figures by element id."""
    path = analysis.critical_path
    return {} if path is None else {"fig-critical-path": path_bars(path)}
