"""Figures of the bubbles section: idle time per rank split by cause, and the pipeline bubble against theory.

No computation beyond unit conversion: the medians and fractions come from `traceview.bubbles.gaps`.
"""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from traceview.reports.html.figures import LAYOUT, NOISE_FLOOR_MS, Outliers, rank_bars

from traceview.bubbles.gaps import CAUSE_COLUMNS, BubbleAnalysis
from traceview.reduce.analysis import RunAnalysis

CAUSE_COLOURS = {
    "host-bound": "#D55E00",
    "dependency-bound": "#CC79A7",
    "comm-wait": "#E69F00",
    "unattributed": "#c7c7c7",
}
"""One colour per gap cause (`traceview.bubbles.gaps.GAP_CAUSES`)."""


def idle_cause_bars(bubbles: BubbleAnalysis) -> go.Figure:
    """Stacked bars per rank: the median step's idle time (ms) split by cause."""
    per_rank = bubbles.per_rank.with_columns([pl.col(c) / 1000 for c in CAUSE_COLUMNS.values()])
    bars = [(cause, column, CAUSE_COLOURS[cause]) for cause, column in CAUSE_COLUMNS.items()]
    title = "Idle time of the median step per rank, by cause"
    outliers = Outliers(bubbles.outliers, 1e-3)
    return rank_bars(per_rank, bars, title, yaxis_title="ms", floor=NOISE_FLOOR_MS, outliers=outliers)


def idle_path_bars(bubbles: BubbleAnalysis) -> go.Figure:
    """Stacked bars per rank: the median step's idle time (ms) by what held it on the critical path."""
    columns = [c for c in bubbles.idle_by_path.columns if c != "rank"]
    per_rank = bubbles.idle_by_path.with_columns([pl.col(c) / 1000 for c in columns])
    held = [c for c in columns if per_rank.get_column(c).abs().max() or 0.0]
    palette = (
        "#CC79A7",
        "#000000",
        "#555555",
        "#7F7F7F",
        "#F0E442",
        "#D55E00",
        "#999999",
        "#0072B2",
        "#888888",
    )
    bars = [(c.removesuffix("_us"), c, palette[i % len(palette)]) for i, c in enumerate(held)]
    title = "Idle time of the median step per rank, by what held it on the critical path"
    return rank_bars(per_rank, bars, title, yaxis_title="ms", floor=NOISE_FLOOR_MS)


def pipeline_scatter(bubbles: BubbleAnalysis) -> go.Figure:
    """Per (rank, step): the measured bubble fraction, and the theory (P-1)/(M*V+P-1) beside it."""
    rows = bubbles.pipeline
    ranks = rows.get_column("rank").to_list()
    text = [f"step {step}" for step in rows.get_column("step").to_list()]
    figure = go.Figure()
    figure.add_scatter(
        name="measured: no compute / step",
        x=ranks,
        y=rows.get_column("bubble_fraction").to_list(),
        text=text,
        mode="markers",
        marker={"size": 8, "color": "#0072B2"},
    )
    figure.add_scatter(
        name="theory (P-1)/(M*V+P-1)",
        x=ranks,
        y=rows.get_column("theory_fraction").to_list(),
        text=text,
        mode="markers",
        marker={"size": 10, "symbol": "line-ew-open", "color": "#D55E00"},
    )
    figure.update_layout(
        title=f"Pipeline bubble per rank and step (V = {bubbles.virtual_stages})",
        xaxis_title="rank",
        yaxis={"title": "fraction of the step", "range": [0, 1]},
        legend={"orientation": "h", "y": -0.25},
        **LAYOUT,
    )
    return figure


def bubble_figures(analysis: RunAnalysis) -> dict[str, go.Figure]:
    """The section's figures by element id (the pipeline one only when a pipeline was found)."""
    bubbles = analysis.bubbles
    if bubbles is None:
        return {}
    held = bubbles.idle_by_path.height > 0
    found = {"fig-idle-causes": idle_path_bars(bubbles) if held else idle_cause_bars(bubbles)}
    if bubbles.pipeline_detected:
        found["fig-pipeline-bubble"] = pipeline_scatter(bubbles)
    return found
