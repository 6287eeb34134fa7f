"""Figures of the kernels section: time by kernel class per rank (a stacked bar of the median step), and each
operator class on the compute roofline.

No computation beyond unit conversion and reshaping: the medians, FLOP/s and roofs come from
`traceview.kernels.analysis`.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go
import polars as pl
from traceview.reports.html.figures import LAYOUT, NOISE_FLOOR_MS, OKABE_ITO, TINTS, rank_bars

from traceview.events.kernel_classes import COMPUTE_CLASSES, OVERLAP
from traceview.kernels.analysis import KernelAnalysis
from traceview.reduce.analysis import RunAnalysis

CLASS_COLOURS = {
    "gemm": OKABE_ITO[0],
    "attention": OKABE_ITO[4],
    "convolution": OKABE_ITO[5],
    "normalization": OKABE_ITO[6],
    "elementwise": OKABE_ITO[2],
    "reduction": OKABE_ITO[1],
    "embedding": OKABE_ITO[3],
    "optimizer": TINTS[1],
    "other": "#a0a0a0",
    OVERLAP: "#dfe3e8",
}
"""One colour per compute class (`traceview.events.kernel_classes.COMPUTE_CLASSES`) and the overlap term."""
DTYPE_DASHES = ("solid", "dash", "dot", "dashdot")


def class_bars(kernels: KernelAnalysis) -> go.Figure:
    """Stacked bars per rank: the median step's time of each compute class alone, and the overlap, in ms."""
    compute = kernels.per_rank.filter(pl.col("in_comp"))
    wide = compute.pivot(on="kernel_class", index="rank", values="exclusive_us").sort("rank").fill_null(0.0)
    present = [c for c in (*COMPUTE_CLASSES, OVERLAP) if c in wide.columns and wide.get_column(c).sum() > 0]
    shown = wide.with_columns(pl.col(c) / 1000 for c in present)
    bars = [(name, name, CLASS_COLOURS[name]) for name in present]
    title = "Compute time of the median step per rank, by kernel class (alone; overlap apart)"
    return rank_bars(shown, bars, title, yaxis_title="ms", floor=NOISE_FLOOR_MS)


def _roofs(kernels: KernelAnalysis, low: float, high: float) -> list[go.Scatter]:
    """The roof of each dtype with a peak: min(peak, I x bandwidth) over intensities `low`..`high`."""
    bandwidth = kernels.device.memory_bytes_per_s
    rows = kernels.roofline.filter(pl.col("peak_flops").is_not_null()).unique("dtype", maintain_order=True)
    if bandwidth is None:
        return []
    lines = []
    points = [low * (high / low) ** (i / 60) for i in range(61)]
    for index, row in enumerate(rows.iter_rows(named=True)):
        peak = row["peak_flops"]
        lines.append(
            go.Scatter(
                name=f"roof {row['dtype']} ({peak / 1e12:.0f} TFLOP/s, {bandwidth / 1e12:.2f} TB/s)",
                x=points,
                y=[min(peak, i * bandwidth) for i in points],
                mode="lines",
                line={"color": "#57606a", "dash": DTYPE_DASHES[index % len(DTYPE_DASHES)], "width": 1},
                hoverinfo="skip",
            )
        )
    return lines


def roofline_figure(kernels: KernelAnalysis) -> go.Figure:
    """Each (operator class, dtype) at its arithmetic intensity and achieved FLOP/s, under the device's
    roofs."""
    placed = kernels.roofline.filter(pl.col("intensity").is_not_null() & (pl.col("achieved_flops") > 0))
    intensities = placed.get_column("intensity").to_list()
    low = 10 ** math.floor(math.log10(min([*intensities, 0.1])))
    high = 10 ** math.ceil(math.log10(max([*intensities, 1000.0])))
    figure = go.Figure(_roofs(kernels, low, high))
    for row in placed.iter_rows(named=True):
        figure.add_scatter(
            name=f"{row['op_class']} {row['dtype']}",
            x=[row["intensity"]],
            y=[row["achieved_flops"]],
            mode="markers+text",
            text=[row["op_class"]],
            textposition="top center",
            marker={"size": 11, "color": CLASS_COLOURS.get(row["op_class"], OKABE_ITO[7])},
            hovertemplate=(
                f"{row['op_class']} ({row['dtype']}): %{{y:.3s}}FLOP/s at %{{x:.3g}} FLOP/byte; "
                f"{row['bound'] or 'unplaced'}<extra></extra>"
            ),
        )
    name = kernels.device.name or "unknown device"
    figure.update_layout(
        title=f"Operator classes on the roofline of {name}",
        xaxis={"title": "arithmetic intensity (FLOP/byte)", "type": "log"},
        yaxis={"title": "achieved FLOP/s", "type": "log"},
        legend={"orientation": "h", "y": -0.3},
        **LAYOUT,
    )
    return figure


def kernel_figures(analysis: RunAnalysis) -> dict[str, go.Figure]:
    """The section's figures by element id (the roofline only when some class has FLOPs and bytes)."""
    kernels = analysis.kernels
    if kernels is None or kernels.per_rank.height == 0:
        return {}
    found = {"fig-kernel-classes": class_bars(kernels)}
    if kernels.roofline.filter(pl.col("intensity").is_not_null()).height:
        found["fig-roofline"] = roofline_figure(kernels)
    return found
