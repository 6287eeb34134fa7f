"""Figures of the across-ranks section: a rank-by-instance lateness heatmap and per-rank wait bars.

Lateness and wait come from `traceview.across_ranks.analysis.CrossRank` (docs/metrics.md, "Across ranks");
nothing is computed here beyond reshaping and unit conversion. Past `MAX_INSTANCES` usable instances the
heatmap keeps every k-th one (its title says so).
"""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from traceview.reports.html.figures import (
    LAYOUT,
    MAX_RANK_BARS,
    NOISE_FLOOR_MS,
    Outliers,
    chart_ms,
    rank_distribution,
)

from traceview.across_ranks.analysis import CrossRank
from traceview.reduce.analysis import RunAnalysis

MAX_INSTANCES = 500
"""Most instance columns the heatmap draws; beyond it every k-th instance is kept."""


def _heatmap_rows(crossrank: CrossRank) -> tuple[pl.DataFrame, int]:
    """Lateness (ms) per rank (rows) and kept instance (columns), and the stride k."""
    instances = crossrank.calls.get_column("instance").unique().sort()
    stride = max(1, -(-instances.len() // MAX_INSTANCES))
    kept = instances.gather_every(stride)
    calls = crossrank.calls.filter(pl.col("instance").is_in(kept.implode()))
    table = calls.select("rank", "instance", chart_ms("lateness_us").alias("lateness_ms")).pivot(
        on="instance", index="rank", values="lateness_ms", sort_columns=True
    )
    return table.sort("rank"), stride


def lateness_heatmap(crossrank: CrossRank) -> go.Figure:
    """Rank x instance heatmap of lateness (ms after the instance's median arrival; blue early, red late)."""
    table, stride = _heatmap_rows(crossrank)
    columns = [c for c in table.columns if c != "rank"]
    figure = go.Figure(
        go.Heatmap(
            z=table.select(columns).rows(),
            x=[int(c) for c in columns],
            y=[f"rank {r}" for r in table.get_column("rank").to_list()],
            colorscale="RdBu",
            reversescale=True,
            zmid=0,
            colorbar={"title": "ms late"},
            hovertemplate="%{y}, instance %{x}: %{z:.3f} ms<extra></extra>",
        )
    )
    sampled = f" (every {stride}th instance)" if stride > 1 else ""
    figure.update_layout(
        title=f"Lateness per rank and collective instance{sampled}",
        xaxis_title="instance",
        **{**LAYOUT, "height": max(360, min(1200, 40 + 14 * table.height))},
    )
    return figure


def wait_bars(crossrank: CrossRank) -> go.Figure:
    """Total wait per rank (ms), stragglers in red; past `MAX_RANK_BARS` ranks its distribution, outliers
    named."""
    per_rank = crossrank.per_rank.with_columns(chart_ms("wait_us"))
    title = "Time each rank waited for later peers"
    if per_rank.height > MAX_RANK_BARS:
        series = [("wait for later peers", "wait_us", "#0072B2")]
        outliers = Outliers(crossrank.outliers, 1e-3)
        return rank_distribution(per_rank, series, title, outliers, "ms", NOISE_FLOOR_MS)
    colours = ["#D55E00" if flag else "#0072B2" for flag in per_rank.get_column("straggler").to_list()]
    figure = go.Figure(
        go.Bar(
            x=[f"rank {r}" for r in per_rank.get_column("rank").to_list()],
            y=per_rank.get_column("wait_us").to_list(),
            marker_color=colours,
            hovertemplate="%{x}: %{y:.3f} ms waiting for peers<extra></extra>",
        )
    )
    figure.update_layout(title=f"{title} (stragglers in red)", yaxis_title="ms", **LAYOUT)
    return figure


def crossrank_figures(analysis: RunAnalysis) -> dict[str, go.Figure]:
    """The section's figures by page id (none without usable instances)."""
    crossrank = analysis.crossrank
    if crossrank is None or crossrank.calls.height == 0:
        return {}
    return {"fig-lateness": lateness_heatmap(crossrank), "fig-wait": wait_bars(crossrank)}
