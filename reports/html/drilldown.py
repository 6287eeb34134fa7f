"""The report's drill-down: from a run-level figure to the rank, the step and the kernel behind it.

- A step x rank heatmap (step time, exposed communication, wait for peers); clicking a cell shows that rank's
  step against the median rank's: their figures side by side and, for the steps and ranks the timeline kept,
  their activity on one axis. The page reads `#cell=RANK-STEP` too, so a cell can be linked to.
- The collectives by cost: per (process group, collective, message size) the time over all ranks, with the
  instances that cost the most behind each row.

Every number comes from the analyses (`TimeBudget`, `Timeline`, and the drill-down figures of
`traceview.timeline.drilldown`: waits per step, median ranks, collectives by cost); here they are only joined,
pivoted and embedded as data the page's script reads.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
import polars as pl
from traceview.reports.html.figures import LABEL_COLOURS, LANE_GEOMETRY, LAYOUT, OTHER_COLOUR, chart_ms

from traceview.reduce.results import RunAnalysis
from traceview.timeline.drilldown import COST_KEYS

HEATMAP_METRICS: tuple[tuple[str, str], ...] = (
    ("step_us", "step time"),
    ("comp_us", "compute (T_comp)"),
    ("exposed_comm_us", "exposed communication"),
    ("wait_us", "wait for later peers"),
)
"""The heatmap's metrics: (column of `cells`, name); the menu switches between them."""
OPENING_METRIC: tuple[tuple[str, str | None, str], ...] = (
    ("straggler-bound", "slow compute", "comp_us"),
    ("straggler-bound", None, "wait_us"),
    ("waiting-bound", None, "wait_us"),
    ("communication-bound", None, "exposed_comm_us"),
)
"""(verdict label, the straggler's cause or None for any, metric): the heatmap opens on the first row that
fits the run's verdict, the metric that shows its problem (a synchronous job's step time is the same on
every rank: it hides the straggler); `step_us` when none fits."""


def opening_metric(analysis: RunAnalysis) -> str:
    """The heatmap metric the page opens on (`OPENING_METRIC`)."""
    causes: set[str | None] = {None}
    if analysis.crossrank is not None:
        stragglers = analysis.crossrank.per_rank.filter(pl.col("straggler"))
        causes |= set(stragglers.get_column("cause").to_list())
    label = analysis.verdict.label
    return next(
        (metric for rule, cause, metric in OPENING_METRIC if rule == label and cause in causes), "step_us"
    )


CELL_FIGURES = ("step_us", "comp_us", "comm_us", "exposed_comm_us", "idle_us", "wait_us")


def cells(analysis: RunAnalysis) -> pl.DataFrame:
    """Per (rank, step): the budget's figures beside the rank's wait for later peers in that step (us)."""
    per_step = analysis.budget.per_step.select("rank", "step", *CELL_FIGURES[:-1])
    if analysis.drilldown is None:
        return per_step.with_columns(pl.lit(0.0).alias("wait_us"))
    return per_step.join(analysis.drilldown.step_waits, on=["rank", "step"], how="left")


def heatmap(table: pl.DataFrame, first: str = "step_us") -> go.Figure:
    """Step (columns) x rank (rows) heatmap of each metric of `HEATMAP_METRICS` (ms), one visible at a time:
    `first` when the page opens."""
    steps = sorted(table.get_column("step").unique().to_list())
    ranks = sorted(table.get_column("rank").unique().to_list())
    figure = go.Figure()
    for column, name in HEATMAP_METRICS:
        wide = table.select("rank", "step", chart_ms(column).alias("ms")).pivot(
            on="step", index="rank", values="ms", sort_columns=True
        )
        wide = pl.DataFrame({"rank": ranks}).join(wide, on="rank", how="left")
        present = set(wide.columns)  # once: `columns` builds a new list on every call
        figure.add_heatmap(
            z=wide.select([str(s) for s in steps if str(s) in present]).rows(),
            x=steps,
            y=ranks,
            name=name,
            visible=column == first,
            colorscale="Viridis",
            colorbar={"title": "ms"},
            hovertemplate="rank %{y}, step %{x}: %{z:.3f} ms<extra>" + name + "</extra>",
        )
    buttons = [
        {
            "label": name,
            "method": "update",
            "args": [
                {"visible": [i == j for j in range(len(HEATMAP_METRICS))]},
                {"title.text": f"{name.capitalize()} per rank and step (ms); click a cell"},
            ],
        }
        for i, (_, name) in enumerate(HEATMAP_METRICS)
    ]
    opening = dict(HEATMAP_METRICS)[first]
    figure.update_layout(
        title=f"{opening[0].upper()}{opening[1:]} per rank and step (ms); click a cell",
        xaxis={"title": "step", "type": "category"},
        yaxis={"title": "rank", "type": "category", "autorange": "reversed"},
        updatemenus=[
            {
                "buttons": buttons,
                "active": [c for c, _ in HEATMAP_METRICS].index(first),
                "x": 1.0,
                "xanchor": "right",
                "y": 1.0,
                "yanchor": "bottom",
            }
        ],
        **{**LAYOUT, "height": max(360, min(1100, 120 + 12 * len(ranks)))},
    )
    return figure


def _timeline_segments(analysis: RunAnalysis) -> tuple[dict[str, Any], list[str]]:
    """The timeline's kept segments as {step: {rank: [[lane, label, start_ms, end_ms, kernels, longest],
    ...]}} (`longest`: index of the segment's longest kernel name in the second value, -1 for none)."""
    timeline = analysis.timeline
    if timeline is None or timeline.segments.height == 0:
        return {}, []
    names = timeline.segments.get_column("longest_kernel").drop_nulls().unique().sort().to_list()
    index = pl.DataFrame({"longest_kernel": names, "longest": list(range(len(names)))})
    rows = timeline.segments.join(index, on="longest_kernel", how="left").select(
        "step",
        "rank",
        "lane",
        "label",
        chart_ms("start_us").round(4),
        chart_ms("end_us").round(4),
        "kernels",
        pl.col("longest").fill_null(-1),
    )
    found: dict[str, Any] = {}
    for step, rank, *segment in rows.iter_rows():  # bounded: the timeline's drawn segments
        found.setdefault(str(step), {}).setdefault(str(rank), []).append(segment)
    return found, names


def drill_data(analysis: RunAnalysis) -> dict[str, Any]:
    """What the page's script needs to answer a click: every cell's figures, each step's median rank, the
    kept timeline segments."""
    table = cells(analysis)
    medians = analysis.drilldown.median_ranks if analysis.drilldown else pl.DataFrame()
    segments, kernel_names = _timeline_segments(analysis)
    shown = table.select("rank", "step", *(chart_ms(name).round(4) for name in CELL_FIGURES))
    figures = {f"{rank}-{step}": values for rank, step, *values in shown.iter_rows()}
    return {
        "metrics": [column for column, _ in HEATMAP_METRICS],
        "colours": {**LABEL_COLOURS, "other": OTHER_COLOUR},
        "lanes": {lane: list(geometry) for lane, geometry in LANE_GEOMETRY.items()},
        "columns": [name.removesuffix("_us").replace("_", " ") for name in CELL_FIGURES],
        "cells": figures,
        "median_rank": {str(step): rank for step, rank in medians.iter_rows()},
        "segments": segments,
        "kernel_names": kernel_names,
    }


def collectives_by_cost(analysis: RunAnalysis) -> list[dict[str, Any]]:
    """The drill-down's collectives by cost, each row with the instances behind it, costliest first."""
    found = analysis.drilldown
    if found is None or found.by_cost.height == 0:
        return []
    instances: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in found.costly_instances.to_dicts():
        instances.setdefault(tuple(row[k] for k in COST_KEYS), []).append(row)
    return [
        {**row, "instances": instances.get(tuple(row[k] for k in COST_KEYS), [])}
        for row in found.by_cost.to_dicts()
    ]


def drilldown_figures(analysis: RunAnalysis) -> dict[str, go.Figure]:
    """The section's figure: the step x rank heatmap."""
    if not analysis.budget.per_step.height:
        return {}
    return {"fig-heatmap": heatmap(cells(analysis), opening_metric(analysis))}
