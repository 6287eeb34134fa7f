"""Figures of the collectives section: busbw against message size, one scatter per collective, log axes.

Each point is one kernel (or CPU-only call) with a known size S and busbw (docs/metrics.md, "Collectives"),
coloured by process group. No computation beyond unit conversion and, past `MAX_POINTS` kernels of a
collective, keeping every k-th one (the figure's title says so).
"""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from traceview.reports.html.figures import LAYOUT, escaped

from traceview.reduce.analysis import RunAnalysis

MAX_POINTS = 4_000
"""Most points one scatter draws; beyond it every k-th kernel is kept (k = ceil(count / MAX_POINTS))."""


def figure_id(collective: str) -> str:
    """The page element id of a collective's scatter (`fig-busbw-allreduce`)."""
    return f"fig-busbw-{collective.lower()}"


def _points(kernels: pl.DataFrame, collective: str) -> tuple[pl.DataFrame, int]:
    """The plotted rows of `collective` and the stride k used (1: every kernel)."""
    rows = kernels.filter(
        (pl.col("collective") == collective) & pl.col("busbw_Bps").is_not_null() & (pl.col("size_bytes") > 0)
    )
    stride = max(1, -(-rows.height // MAX_POINTS))
    return rows.gather_every(stride), stride


def _hover() -> pl.Expr:
    return pl.format(
        "rank {} · {}<br>S = {} bytes, n = {}<br>{} us; busbw {} GB/s<br>{}",
        pl.col("rank"),
        escaped("pg_key"),
        pl.col("size_bytes"),
        pl.col("group_size").cast(pl.Utf8).fill_null("?"),
        pl.col("dur_us").round(1),
        (pl.col("busbw_Bps") / 1e9).round(2),
        escaped("name").str.slice(0, 100),
    )


def busbw_scatter(kernels: pl.DataFrame, collective: str) -> go.Figure:
    """busbw (GB/s) against S (bytes) for every kernel of `collective`, one trace per process group."""
    rows, stride = _points(kernels, collective)
    rows = rows.with_columns(_hover().alias("hover"), (pl.col("busbw_Bps") / 1e9).alias("busbw_GBps"))
    figure = go.Figure()
    for (group,), part in rows.partition_by("pg_key", as_dict=True, maintain_order=True).items():
        figure.add_trace(
            go.Scattergl(
                x=part.get_column("size_bytes").to_list(),
                y=part.get_column("busbw_GBps").to_list(),
                mode="markers",
                name=f"group {escaped_text(str(group))}",
                text=part.get_column("hover").to_list(),
                hoverinfo="text",
                marker={"size": 6, "opacity": 0.7},
            )
        )
    sampled = f" (every {stride}th kernel)" if stride > 1 else ""
    figure.update_layout(
        title=f"{collective}: bus bandwidth against message size{sampled}",
        xaxis={"type": "log", "title": "message size S (bytes)"},
        yaxis={"type": "log", "title": "busbw (GB/s)"},
        legend={"orientation": "h"},
        **LAYOUT,
    )
    return figure


def escaped_text(text: str) -> str:
    """`&`, `<`, `>` as HTML entities (plotly renders legend names as HTML)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def collective_figures(analysis: RunAnalysis) -> dict[str, go.Figure]:
    """One busbw scatter per collective that has at least one kernel with a known busbw."""
    if analysis.collectives is None:
        return {}
    kernels = analysis.collectives.kernels
    with_busbw = kernels.filter(pl.col("busbw_Bps").is_not_null() & (pl.col("size_bytes") > 0))
    present = with_busbw.get_column("collective").drop_nulls().unique(maintain_order=True).to_list()
    return {figure_id(collective): busbw_scatter(kernels, collective) for collective in present}
