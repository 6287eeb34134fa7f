"""Figures of the parallelism sections: cost per dimension, the MoE send matrix, the communication roofline
and the alpha-beta fit. Unit conversion only: every figure comes from `traceview.dimensions`,
`traceview.moe`, `traceview.roofline` and `traceview.links_measured`.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go
import polars as pl
from traceview.reports.html.figures import LAYOUT, NOISE_FLOOR_MS, OKABE_ITO

from traceview.dimensions.analysis import Dimensions
from traceview.links_measured.analysis import LinksMeasured
from traceview.moe.analysis import MoeBalance
from traceview.reduce.analysis import RunAnalysis
from traceview.roofline.analysis import Roofline

COST_BARS = (
    ("T_comm", "comm_us", OKABE_ITO[0]),
    ("exposed (no compute hides it)", "exposed_us", OKABE_ITO[1]),
    ("waiting for peers", "wait_us", OKABE_ITO[4]),
    ("transfer", "transfer_us", OKABE_ITO[2]),
)


def _ms(values: list[float | None]) -> list[float]:
    found = [0.0 if v is None else v / 1000 for v in values]
    return [0.0 if abs(v) < NOISE_FLOOR_MS else v for v in found]


def dimension_bars(dimensions: Dimensions) -> go.Figure:
    """Per dimension, the median step's T_comm, exposed communication, waiting and transfer (ms)."""
    rows = dimensions.per_dimension
    names = rows.get_column("dimension").to_list()
    figure = go.Figure()
    for label, column, colour in COST_BARS:
        figure.add_bar(name=label, x=names, y=_ms(rows.get_column(column).to_list()), marker_color=colour)
    figure.update_layout(
        title="Cost per dimension (median over ranks and steps)",
        barmode="group",
        yaxis_title="ms per step",
        legend={"orientation": "h", "y": -0.25},
        **LAYOUT,
    )
    return figure


def moe_heatmap(moe: MoeBalance) -> go.Figure:
    """The send matrix (MiB per step, sender x receiver) of the most imbalanced group."""
    group = str(moe.per_group.item(0, "group"))
    cells = moe.matrix.filter(pl.col("group") == group)
    ranks = sorted(set(cells["src"].to_list()) | set(cells["dst"].to_list()))
    sent = {(row["src"], row["dst"]): row["bytes"] / 2**20 for row in cells.iter_rows(named=True)}
    z = [[sent.get((src, dst)) for dst in ranks] for src in ranks]
    figure = go.Figure(
        go.Heatmap(
            z=z,
            x=[str(r) for r in ranks],
            y=[str(r) for r in ranks],
            colorscale="Viridis",
            colorbar={"title": "MiB/step"},
        )
    )
    figure.update_layout(
        title="All-to-all volume per step, sender x receiver (most imbalanced group)",
        xaxis={"title": "receiving rank (its experts' load)", "type": "category"},
        yaxis={"title": "sending rank", "type": "category", "autorange": "reversed"},
        **LAYOUT,
    )
    return figure


def roofline_figure(roofline: Roofline) -> go.Figure:
    """Log-log: each link level's ceiling min(peak, CCR x B), the peak, the run's achieved FLOP/s, and each
    dimension at its CCR on the ceiling of its level."""
    peak = float(roofline.peak_flops or 0.0)
    points = roofline.points.filter(pl.col("ccr").is_not_null() & (pl.col("ccr") > 0))
    ccrs = points.get_column("ccr").to_list() + roofline.levels.get_column("ridge").to_list()
    low, high = 10 ** math.floor(math.log10(min(ccrs) / 10)), 10 ** math.ceil(math.log10(max(ccrs) * 10))
    xs = [low * (high / low) ** (i / 60) for i in range(61)]
    figure = go.Figure()
    for index, row in enumerate(roofline.levels.iter_rows(named=True)):
        figure.add_scatter(
            name=(
                f"{row['level']}-node ceiling ({row['bandwidth_Bps'] / 1e9:.3g} GB/s; ridge "
                f"{row['ridge']:.3g})"
            ),
            x=xs,
            y=[min(peak, x * row["bandwidth_Bps"]) for x in xs],
            mode="lines",
            line={"color": OKABE_ITO[(index + 3) % len(OKABE_ITO)]},
        )
    if roofline.achieved_flops:
        figure.add_hline(
            y=roofline.achieved_flops, line_dash="dot", line_color="#666", annotation_text="achieved FLOP/s"
        )
    levels = {row["level"]: row["bandwidth_Bps"] for row in roofline.levels.iter_rows(named=True)}
    for row in points.iter_rows(named=True):
        bandwidth = levels.get(row["level"]) if row["level"] else max(levels.values(), default=None)
        unplaced = row["level"] is not None and bandwidth is None  # its link unknown: no ceiling to sit on
        attainable = min(peak, row["ccr"] * bandwidth) if bandwidth else peak
        attainable = (roofline.achieved_flops or attainable) if unplaced else attainable
        said = f"no ridge: the {row['level']} link is unknown" if unplaced else row["regime"] or "all bytes"
        figure.add_scatter(
            name=f"{row['dimension']}: CCR {row['ccr']:.3g} ({said})",
            x=[row["ccr"]],
            y=[attainable],
            mode="markers+text",
            text=[row["dimension"]],
            textposition="top center",
            marker={"size": 11, "color": OKABE_ITO[0] if row["dimension"] != "all" else "#000000"},
        )
    figure.update_layout(
        title="Communication roofline: FLOP/s attainable against CCR (FLOPs per byte moved)",
        xaxis={"title": "CCR = step FLOPs / bus bytes per step (FLOP/B)", "type": "log"},
        yaxis={"title": "FLOP/s per rank", "type": "log"},
        legend={"orientation": "h", "y": -0.3},
        **{**LAYOUT, "height": 420},
    )
    return figure


def fit_figure(links: LinksMeasured) -> go.Figure:
    """Transfer time against bus bytes per class (log-log), with each fitted class's line k alpha + x / B."""
    figure = go.Figure()
    keys = ["collective", "group_size", "link", "protocol"]
    for index, ((collective, n, link, protocol), rows) in enumerate(
        links.samples.sort("x").group_by(keys, maintain_order=True)
    ):
        colour = OKABE_ITO[index % len(OKABE_ITO)]
        label = f"{collective} n={n} {protocol} ({link})"
        figure.add_scatter(
            name=label,
            x=rows["x"].to_list(),
            y=(rows["y"] * 1e6).to_list(),
            mode="markers",
            marker={"color": colour, "size": 6},
        )
        fitted = links.classes.filter(
            (pl.col("collective") == collective)
            & (pl.col("group_size") == n)
            & (pl.col("link") == link)
            & (pl.col("protocol") == protocol)
            & pl.col("fitted")
        )
        for row in fitted.iter_rows(named=True):
            xs = rows["x"].to_list()
            ys = [row["k"] * row["alpha_fit_us"] + x / row["bandwidth_Bps"] * 1e6 for x in xs]
            figure.add_scatter(name=f"{label}: fit", x=xs, y=ys, mode="lines", line={"color": colour})
    figure.update_layout(
        title="Transfer time against bus bytes, with the alpha-beta fit per class",
        xaxis={"title": "f(n) S (bytes)", "type": "log"},
        yaxis={"title": "transfer time (us)", "type": "log"},
        legend={"orientation": "h", "y": -0.3},
        **{**LAYOUT, "height": 420},
    )
    return figure


def dimension_figures(analysis: RunAnalysis) -> dict[str, go.Figure]:
    """The dimensions section's figure."""
    found = analysis.dimensions
    return {"fig-dimensions": dimension_bars(found)} if found and found.per_dimension.height else {}


def moe_figures(analysis: RunAnalysis) -> dict[str, go.Figure]:
    """The MoE section's heatmap, when a group's all-to-alls carry split sizes."""
    found = analysis.moe
    return {"fig-moe-matrix": moe_heatmap(found)} if found and found.measurable else {}


def roofline_figures(analysis: RunAnalysis) -> dict[str, go.Figure]:
    """The roofline, when it could be drawn."""
    found = analysis.roofline
    drawn = found is not None and found.missing is None and found.levels.height > 0
    return {"fig-comm-roofline": roofline_figure(found)} if found is not None and drawn else {}


def fit_figures(analysis: RunAnalysis) -> dict[str, go.Figure]:
    """The alpha-beta fit, when any instance was matched."""
    found = analysis.links_measured
    return {"fig-links-fit": fit_figure(found)} if found is not None and found.samples.height else {}
