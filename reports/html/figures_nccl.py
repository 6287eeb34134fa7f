"""Figures of the NCCL log section: NCCL's algorithm/protocol choices by message size (its TUNING lines).

No computation beyond labels: the counts come from `traceview.nccl.join.NcclJoin.algorithms`.
"""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from traceview.reports.html.figures import LAYOUT, escaped

from traceview.reduce.analysis import RunAnalysis

FIGURE_ID = "fig-nccl-algorithms"


def algorithm_bars(algorithms: pl.DataFrame) -> go.Figure:
    """Stacked bars: per (op, message-size bucket) the TUNING choices, one colour per algorithm/protocol."""
    rows = algorithms.sort("op", "size_bucket_bytes", nulls_last=True).with_columns(
        pl.format("{} · {}", escaped("op"), escaped("size_bucket")).alias("where"),
        pl.format("{}/{}", escaped("algo"), escaped("proto")).alias("choice"),
    )
    order = rows.get_column("where").unique(maintain_order=True).to_list()
    figure = go.Figure()
    for (choice,), part in rows.partition_by("choice", as_dict=True, maintain_order=True).items():
        figure.add_trace(
            go.Bar(
                x=part.get_column("where").to_list(),
                y=part.get_column("choices").to_list(),
                name=str(choice),
            )
        )
    figure.update_layout(
        title="NCCL's algorithm / protocol choices by message size (TUNING lines)",
        barmode="stack",
        xaxis={
            "title": "operation · message size (bytes as NCCL printed them)",
            "categoryorder": "array",
            "categoryarray": order,
        },
        yaxis={"title": "choices logged"},
        legend={"orientation": "h"},
        **LAYOUT,
    )
    return figure


def nccl_figures(analysis: RunAnalysis) -> dict[str, go.Figure]:
    """The algorithm/protocol mix, when the logs hold TUNING lines."""
    if analysis.nccl is None or analysis.nccl.algorithms.is_empty():
        return {}
    return {FIGURE_ID: algorithm_bars(analysis.nccl.algorithms)}
