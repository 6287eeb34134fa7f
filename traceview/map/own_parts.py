"""The map's parts of a batch of ranks that no analysis module computes: each rank's first launch per step,
its graph-capture steps, its compact host rows, the launch marks of its communication kernels, its all-to-all
calls and its extent; every part keyed by `rank`, the batch's queries in one `pl.collect_all`
(`traceview.map.rank_summary` splits them by rank).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import polars as pl

from traceview.events.classify import HOST_KIND
from traceview.map.compact import compact_cpu
from traceview.model.trace import RankTrace
from traceview.moe.splits import alltoall_calls, has_alltoall
from traceview.steps.first_launch import FIRST_LAUNCH_SCHEMA, first_launch_plan
from traceview.steps.graphs import graph_step_plan


class OwnParts(NamedTuple):
    """The batch's own parts, every frame keyed by `rank` (`own_parts`)."""

    first_launches: pl.DataFrame
    graphs: pl.DataFrame
    compact_cpu: pl.DataFrame
    launch_marks: pl.DataFrame
    alltoall_calls: pl.DataFrame | None  # None: no rank of the batch has any (`has_alltoall`)


def own_parts(
    traces: Sequence[RankTrace],
    steps: pl.DataFrame,
    cpu: pl.DataFrame,
    frames: tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame],
    compact_found: Sequence[pl.DataFrame],
) -> OwnParts:
    """The own parts of the batch of `traces`, from their `steps` and host rows `cpu` stacked with `rank`,
    the batch's `frames` (events after `comm_events`, communication kernels, device launches) and
    `compact_found` (`traceview.map.compact.compact_inputs` of `cpu`, collected). One query."""
    events, kernels, launch_rows = frames
    device = events.lazy().filter(_ON_DEVICE)
    any_device = bool((events.get_column("kind") != HOST_KIND).any()) and launch_rows.height > 0
    stepped = [trace.rank for trace in traces if (trace.steps.get_column("source") == "cpu").any()]
    plans = [
        first_launch_plan(steps, device, launch_rows) if any_device else _NO_LAUNCHES.lazy(),
        graph_step_plan(cpu, steps, device, stepped),
        compact_cpu(cpu, compact_found),
        launch_marks(events, kernels),
        *([alltoall_calls(kernels)] if has_alltoall(kernels) else []),
    ]
    first, graphs, compact, marks, *calls = pl.collect_all(plans)
    return OwnParts(first, graphs, compact, marks, calls[0] if calls else None)


def launch_marks(events: pl.DataFrame, kernels: pl.DataFrame) -> pl.LazyFrame:
    """Per communication kernel: the end of its rank's last compute kernel that ended at or before its start,
    as a compute row (`rank`, `event_class`, `end_us`), by rank and time. An as-of join over these marks
    gives every launch gap that one over all compute kernels gives (the latest compute end before a time only
    grows with the time). A lazy query."""
    if events.height == 0:
        return _EMPTY_MARKS.lazy()
    compute = events.lazy().filter(_COMPUTE).select("rank", pl.col("end_us").alias("_end")).sort("_end")
    starts = kernels.lazy().filter(pl.col("on_device")).select("rank", "start_us").unique().sort("start_us")
    marks = starts.join_asof(compute, left_on="start_us", right_on="_end", by="rank", check_sortedness=False)
    return marks.drop_nulls("_end").select(*_MARK_ROW).unique().sort("rank", "end_us")


def extent(trace: RankTrace) -> pl.DataFrame:
    """`rank`, `trace_start_us`, `trace_end_us`: what the profiler recorded, host and device,
    first to last (no query: column minima and maxima)."""
    starts = [frame.get_column("start_us").min() for frame in (trace.gpu, trace.cpu)]
    ends = [frame.get_column("end_us").max() for frame in (trace.gpu, trace.cpu)]
    first = min((t for t in starts if t is not None), default=None)
    last = max((t for t in ends if t is not None), default=None)
    return pl.DataFrame(
        {"rank": [trace.rank], "trace_start_us": [first], "trace_end_us": [last]}, schema=_EXTENT
    )


_ON_DEVICE = pl.col("kind") != HOST_KIND
_COMPUTE = pl.col("event_class") == "compute"
_MARK_ROW = ("rank", pl.lit("compute").alias("event_class"), pl.col("_end").alias("end_us"))
_EMPTY_MARKS = pl.DataFrame(schema={"rank": pl.Int64, "event_class": pl.Utf8, "end_us": pl.Float64})
_NO_LAUNCHES = pl.DataFrame(schema=FIRST_LAUNCH_SCHEMA)
_EXTENT = {"rank": pl.Int64, "trace_start_us": pl.Float64, "trace_end_us": pl.Float64}
