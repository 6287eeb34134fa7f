"""Plotly figures built from analysis results (no computation beyond unit conversion and formatting).

Text that comes from a trace (kernel and process-group names) is HTML-escaped before it reaches a plotly text
field: plotly draws a subset of HTML in hover labels, and `&lt;` there is shown as `<`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
import polars as pl

from traceview.core.durations import duration_text
from traceview.core.records import record
from traceview.reduce.analysis import RunAnalysis
from traceview.timeline.step_view import Timeline

OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
"""The Okabe-Ito palette: eight colours told apart with every common colour-vision deficiency; every figure
draws from it, from `TINTS` and from greys (idle, unknowns); heatmaps use Viridis and RdBu."""
TINTS = ("#80CFB9", "#2B7A9E")
"""Lighter bluish green (compute overlapped with communication) and darker blue (Recv beside Send)."""
NOISE_FLOOR_MS = 0.001
"""Chart values below 1 us are float rounding of `ts + dur`, not time: drawn as 0 (tables keep the figures).
"""


def chart_ms(column: str) -> pl.Expr:
    """A time column in us as a chart draws it: in ms, values below `NOISE_FLOOR_MS` drawn as 0."""
    ms = pl.col(column) / 1000
    return pl.when(ms.abs() < NOISE_FLOOR_MS).then(0.0).otherwise(ms).alias(column)


BUDGET_PARTS = (
    ("compute only", "#009E73"),
    ("compute overlapped with comm", "#80CFB9"),
    ("exposed comm", "#E69F00"),
    ("idle", "#c7c7c7"),
)
LAYOUT = {"margin": {"l": 60, "r": 20, "t": 64, "b": 50}, "height": 360}
"""Every figure's top margin holds, from the top: the mode bar (its own strip, 0-26 px), then the title."""
THEME: Mapping[str, Any] = {
    "layout": {
        "font": {
            "family": "system-ui, -apple-system, 'Segoe UI', sans-serif",
            "size": 12,
            "color": "#1d232a",
        },
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "colorway": list(OKABE_ITO),
        "modebar": {"orientation": "h"},
        "xaxis": {"gridcolor": "#ebf0f8", "zerolinecolor": "#ebf0f8", "automargin": True},
        "yaxis": {"gridcolor": "#ebf0f8", "zerolinecolor": "#ebf0f8", "automargin": True},
        "hoverlabel": {"align": "left"},
        "title": {
            "x": 0.01,
            "xanchor": "left",
            "xref": "container",
            "yref": "container",
            "y": 1.0,
            "yanchor": "top",
            "pad": {"t": 30},
            "font": {"size": 14},
        },
    }
}
"""The page's own small plotly template (replaces plotly's, which is large and changes between versions)."""

LABEL_COLOURS: Mapping[str, str] = {
    "idle": "#dfe3e8",
    "memory": "#CC79A7",
    "compute": "#009E73",
    "AllReduce": "#E69F00",
    "AllGather": "#0072B2",
    "ReduceScatter": "#D55E00",
    "AllToAll": "#CC79A7",
    "Broadcast": "#000000",
    "Reduce": "#F0E442",
    "SendRecv": "#56B4E9",
    "Send": "#56B4E9",
    "Recv": "#2B7A9E",
    "Barrier": "#999999",
}
OTHER_COLOUR = "#a0a0a0"
LANE_GEOMETRY: Mapping[str, tuple[float, float]] = {
    "idle": (-0.45, 0.9),
    "compute": (-0.4, 0.4),
    "comm": (0.0, 0.4),
    "memory": (0.4, 0.05),
}
"""Per lane, (offset, width) of its bars in a rank's row: compute above the middle, communication below."""


MAX_RANK_BARS = 32
"""Past this many ranks a per-rank bar chart becomes a distribution (one box per series), outliers named."""


def rank_bars(
    per_rank: pl.DataFrame,
    bars: Sequence[tuple[str, str, str]],
    title: str,
    barmode: str = "stack",
    yaxis_title: str | None = None,
    floor: float = 0.0,
    outliers: Outliers | None = None,
) -> go.Figure:
    """One bar per rank for each (legend name, column, colour) of `bars`, stacked or grouped; values whose
    magnitude is below `floor` are drawn as 0 (`NOISE_FLOOR_MS` for times in ms). Past `MAX_RANK_BARS` ranks,
    `rank_distribution` instead, with the analysis' `outliers` named."""
    if per_rank.height > MAX_RANK_BARS:
        return rank_distribution(per_rank, bars, title, outliers, yaxis_title, floor)
    ranks = per_rank.get_column("rank").to_list()
    figure = go.Figure()
    for name, column, colour in bars:
        values = per_rank.select(pl.when(pl.col(column).abs() < floor).then(0.0).otherwise(pl.col(column)))
        figure.add_bar(name=name, x=ranks, y=values.to_series().to_list(), marker_color=colour)
    figure.update_layout(
        barmode=barmode, title=title, xaxis_title="rank", legend={"orientation": "h", "y": -0.25}, **LAYOUT
    )
    if yaxis_title is not None:
        figure.update_layout(yaxis_title=yaxis_title)
    return figure


@record
class Outliers:
    """The named outliers an analysis published (`traceview.core.outliers`), in its unit; `scale` turns a
    value into the chart's (1e-3: us to ms)."""

    table: pl.DataFrame
    scale: float = 1.0

    def of(self, column: str) -> list[tuple[float, list[int]]]:
        """(value in the chart's unit, ranks) of the figure `column`."""
        rows = self.table.filter(pl.col("figure") == column).select("value", "ranks").iter_rows()
        return [(float(value) * self.scale, list(ranks)) for value, ranks in rows]


def outlier_label(ranks: Sequence[int], shown: int = 4) -> str:
    """ "rank 5", or "ranks 5, 13, 21, 29 (+124)"."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    more = f" (+{len(ranks) - shown})" if len(ranks) > shown else ""
    return "ranks " + ", ".join(str(r) for r in ranks[:shown]) + more


def rank_distribution(
    per_rank: pl.DataFrame,
    bars: Sequence[tuple[str, str, str]],
    title: str,
    outliers: Outliers | None = None,
    yaxis_title: str | None = None,
    floor: float = 0.0,
) -> go.Figure:
    """The per-rank figures of many ranks as one box per series (every rank a point on hover), the outliers
    the analysis named beside their points: readable from dozens to thousands of ranks."""
    figure = go.Figure()
    for name, column, colour in bars:
        values = per_rank.select(
            "rank", pl.when(pl.col(column).abs() < floor).then(0.0).otherwise(pl.col(column)).alias(column)
        )
        figure.add_box(
            name=name,
            y=values.get_column(column).to_list(),
            text=[f"rank {r}" for r in values.get_column("rank").to_list()],
            boxpoints="outliers",
            marker_color=colour,
            hovertemplate="%{text}: %{y:.4g}<extra></extra>",
        )
        for value, ranks in outliers.of(column) if outliers is not None else ():
            figure.add_annotation(
                x=name,
                y=value,
                text=outlier_label(ranks),
                showarrow=False,
                xanchor="left",
                xshift=12,
                font={"size": 10},
            )
    figure.update_layout(
        title=f"{title}: {per_rank.height} ranks, outliers named",
        showlegend=False,
        yaxis_title=yaxis_title or "",
        **LAYOUT,
    )
    return figure


def budget_bars(analysis: RunAnalysis) -> go.Figure:
    """Stacked bars per rank: the median step split into compute, overlapped, exposed comm and idle (ms)."""
    budget = analysis.budget
    if budget.per_rank.height > MAX_RANK_BARS:  # a distribution of the budget's own figures, not of a stack
        columns = ("comp_us", "overlap_us", "exposed_comm_us", "idle_us")
        series = [
            (name, column, colour) for (name, colour), column in zip(BUDGET_PARTS, columns, strict=True)
        ]
        in_ms = budget.per_rank.with_columns(pl.col(c) / 1000 for c in columns)
        outliers = Outliers(budget.outliers, 1e-3)
        return rank_distribution(in_ms, series, "Median step per rank", outliers, "ms", NOISE_FLOOR_MS)
    per_rank = budget.per_rank.with_columns(
        ((pl.col("comp_us") - pl.col("overlap_us")) / 1000).alias("compute only"),
        (pl.col("overlap_us") / 1000).alias("compute overlapped with comm"),
        (pl.col("exposed_comm_us") / 1000).alias("exposed comm"),
        (pl.col("idle_us") / 1000).alias("idle"),
    )
    parts = [(part, part, colour) for part, colour in BUDGET_PARTS]
    return rank_bars(per_rank, parts, "Median step per rank", yaxis_title="ms", floor=NOISE_FLOOR_MS)


def gamma_bars(analysis: RunAnalysis) -> go.Figure:
    """Measured and exposed gamma per rank, with the break-even line at 1 (the gamma model, docs/metrics.md
    "Predicted gamma")."""
    bars = (
        ("measured gamma (T_comm / T_comp)", "gamma", "#0072B2"),
        ("exposed gamma (exposed comm / T_comp)", "exposed_gamma", "#E69F00"),
    )
    title = "Gamma per rank (median over steps)"
    outliers = Outliers(analysis.budget.outliers)
    figure = rank_bars(analysis.budget.per_rank, bars, title, barmode="group", outliers=outliers)
    figure.add_hline(y=1.0, line_dash="dash", line_color="#D55E00", annotation_text="break-even: gamma = 1")
    return figure


def escaped(column: str) -> pl.Expr:
    """A text column with `&`, `<` and `>` written as HTML entities (plotly shows them as the characters)."""
    return (
        pl.col(column)
        .fill_null("")
        .str.replace_all("&", "&amp;", literal=True)
        .str.replace_all("<", "&lt;", literal=True)
        .str.replace_all(">", "&gt;", literal=True)
    )


def _hover_text() -> pl.Expr:
    ms = [(pl.col(c) / 1000).round(3).cast(pl.Utf8) for c in ("start_us", "end_us", "length_us")]
    where = pl.format("rank {} · {}", pl.col("rank"), escaped("label"))
    group = pl.when(pl.col("process_group").is_not_null()).then(pl.format(" on {}", escaped("process_group")))
    kernels = pl.when(pl.col("kernels") > 0).then(
        pl.format(
            "<br>{} event(s); longest: {}", pl.col("kernels"), escaped("longest_kernel").str.slice(0, 120)
        )
    )
    covered = (pl.col("covered_us") / 1000).round(3).cast(pl.Utf8)
    bridged = pl.when(pl.col("covered_us") < pl.col("length_us")).then(
        pl.format("<br>merged to bound the page: {} ms of it is {}", covered, escaped("label"))
    )
    return pl.concat_str(
        [
            where,
            group.fill_null(""),
            pl.format("<br>{} to {} ms ({} ms)", *ms),
            bridged.fill_null(""),
            kernels.fill_null(""),
        ]
    )


def _label_order(labels: list[str]) -> list[str]:
    known = [label for label in LABEL_COLOURS if label in labels]
    return known + sorted(set(labels) - set(known))


def _step_traces(segments: pl.DataFrame, step: int, labels: list[str], visible: bool) -> list[go.Bar]:
    traces = []
    for label in labels:
        rows = segments.filter((pl.col("step") == step) & (pl.col("label") == label))
        lane = rows.item(0, "lane") if rows.height else "comm"
        offset, width = LANE_GEOMETRY.get(lane, LANE_GEOMETRY["comm"])
        traces.append(
            go.Bar(
                name=label,
                legendgroup=label,
                orientation="h",
                y=[f"rank {r}" for r in rows.get_column("rank").to_list()],
                base=rows.select(chart_ms("start_us").round(4)).to_series().to_list(),
                x=rows.select(chart_ms("length_us").round(4)).to_series().to_list(),
                offset=offset,
                width=width,
                marker={
                    "color": LABEL_COLOURS.get(label, OTHER_COLOUR),
                    "line": {"width": 0},
                    "opacity": rows.get_column("occupancy").to_list(),
                },
                hovertext=rows.get_column("hover").to_list(),
                hovertemplate="%{hovertext}<extra></extra>",
                visible=visible,
            )
        )
    return traces


def _step_title(step: int, length_us: float, median: bool) -> str:
    which = "the median step" if median else "a chosen step"
    return f"Step {step} on every rank ({which}; median length {duration_text(length_us)})"


def _drawn_segments(timeline: Timeline) -> pl.DataFrame:
    """The timeline's segments as drawn, in ms from the run's start: each step's segments moved by its
    origin's time, with their length, hover text and occupancy (the bar's opacity)."""
    offsets = timeline.steps.select("step", "since_run_start_us")
    segments = (
        timeline.segments.join(offsets, on="step", how="left")
        .with_columns(
            pl.col("start_us") + pl.col("since_run_start_us").fill_null(0.0),
            pl.col("end_us") + pl.col("since_run_start_us").fill_null(0.0),
        )
        .with_columns((pl.col("end_us") - pl.col("start_us")).alias("length_us"))
    )
    return segments.with_columns(
        _hover_text().alias("hover"),
        (pl.col("covered_us") / pl.col("length_us"))
        .clip(0.25, 1.0)
        .fill_nan(1.0)
        .round(2)
        .alias("occupancy"),
    )


def timeline_figure(timeline: Timeline) -> go.Figure:
    """One step of every rank on one aligned time axis; a menu picks another offered step."""
    segments = _drawn_segments(timeline)
    labels = _label_order(segments.get_column("label").unique().to_list())
    ranks = sorted(set(segments.get_column("rank").to_list()))
    steps = timeline.steps.rows(named=True)
    figure = go.Figure()
    buttons = []
    for index, row in enumerate(steps):
        is_median = row["step"] == timeline.median_step
        figure.add_traces(_step_traces(segments, row["step"], labels, is_median))
        visible = [i == index for i in range(len(steps)) for _ in labels]
        title = _step_title(row["step"], row["median_step_us"], is_median)
        length = duration_text(row["median_step_us"], decimals=1)
        label = f"step {row['step']} ({length}){' median' if is_median else ''}"
        layout = {"title.text": title, "updatemenus[0].active": index}
        buttons.append({"label": label, "method": "update", "args": [{"visible": visible}, layout]})
    median_row = next((i for i, r in enumerate(steps) if r["step"] == timeline.median_step), 0)
    figure.update_layout(
        title=_step_title(
            timeline.median_step or 0, steps[median_row]["median_step_us"] if steps else 0.0, True
        ),
        barmode="overlay",
        xaxis={"title": {"text": "ms from the run's start (aligned clocks)"}},
        yaxis={
            "type": "category",
            "categoryorder": "array",
            "categoryarray": [f"rank {r}" for r in ranks],
            "autorange": "reversed",
        },
        legend={"orientation": "h", "x": 0.0, "xanchor": "left", "y": 1.0, "yanchor": "bottom"},
        updatemenus=[
            {
                "buttons": buttons,
                "active": median_row,
                "x": 1.0,
                "xanchor": "right",
                "y": 1.0,
                "yanchor": "bottom",
                "pad": {"b": 4},
                "direction": "down",
                "showactive": True,
            }
        ],
        margin={"l": 70, "r": 20, "t": 92, "b": 50},
        height=min(max(330, 150 + 40 * len(ranks)), 1400),
    )
    return figure
