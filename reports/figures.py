"""Plotly figures built from analysis results (no computation beyond unit conversion)."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from traceview.analysis import RunAnalysis

BUDGET_PARTS = (
    ("compute only", "#2ca02c"),
    ("compute overlapped with comm", "#98df8a"),
    ("exposed comm", "#ff7f0e"),
    ("idle", "#c7c7c7"),
)
LAYOUT = {"template": "plotly_white", "margin": {"l": 60, "r": 20, "t": 50, "b": 50}, "height": 360}


def budget_bars(analysis: RunAnalysis) -> go.Figure:
    """Stacked bars per rank: the median step split into compute, overlapped, exposed comm and idle (ms)."""
    per_rank = analysis.budget.per_rank.with_columns(
        ((pl.col("comp_us") - pl.col("overlap_us")) / 1000).alias("compute only"),
        (pl.col("overlap_us") / 1000).alias("compute overlapped with comm"),
        (pl.col("exposed_comm_us") / 1000).alias("exposed comm"),
        (pl.col("idle_us") / 1000).alias("idle"),
    )
    ranks = [f"rank {r}" for r in per_rank.get_column("rank").to_list()]
    figure = go.Figure()
    for part, colour in BUDGET_PARTS:
        figure.add_bar(name=part, x=ranks, y=per_rank.get_column(part).to_list(), marker_color=colour)
    figure.update_layout(
        barmode="stack", title="Median step per rank", yaxis_title="ms", legend={"orientation": "h"}, **LAYOUT
    )
    return figure


def gamma_bars(analysis: RunAnalysis) -> go.Figure:
    """Measured and exposed gamma per rank, with the break-even line at 1 (seeds section 4.1)."""
    per_rank = analysis.budget.per_rank
    ranks = [f"rank {r}" for r in per_rank.get_column("rank").to_list()]
    figure = go.Figure()
    figure.add_bar(name="measured gamma (T_comm / T_comp)", x=ranks, y=per_rank.get_column("gamma").to_list(), marker_color="#1f77b4")
    figure.add_bar(name="exposed gamma (exposed comm / T_comp)", x=ranks, y=per_rank.get_column("exposed_gamma").to_list(), marker_color="#ff7f0e")
    figure.add_hline(y=1.0, line_dash="dash", line_color="#d62728", annotation_text="break-even: gamma = 1")
    figure.update_layout(barmode="group", title="Gamma per rank (median over steps)", legend={"orientation": "h"}, **LAYOUT)
    return figure
