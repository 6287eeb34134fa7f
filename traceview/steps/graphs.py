"""CUDA and HIP graph capture steps (docs/metrics.md section 3, "Graph capture and replay").

While a stream captures a graph, the kernels launched into it do not run: the host records hundreds of
launches and the device executes almost nothing. Such a step says nothing of the run's pace (its device window
holds the few kernels that did run, and reads as short and busy), so the budget leaves it out of every median.
A graph replay (`cudaGraphLaunch`) runs every captured kernel, each under the replay's correlation id: those
kernels belong to the step that launched the replay, like any other, and count.

Per CPU step (the whole trace without step annotations), `graph_steps` counts the kernel launches on the host,
those whose kernel ran, the capture calls and the replays; a step is a capture step when it holds a capture
call (`cudaStreamBeginCapture`, `cudaStreamEndCapture`, `cudaGraphInstantiate`, the HIP and driver-API
spellings), or when at least `MIN_LAUNCHES` kernels were launched and at most `RAN_SHARE_MAX` of them ran.
"""

from __future__ import annotations

import polars as pl

from traceview.steps.windows import WHOLE_TRACE

CAPTURE_CALLS = r"(?i)^(?:cuda|hip|cu)(?:StreamBeginCapture|StreamEndCapture|GraphInstantiate)"
LAUNCH_CALLS = (
    r"(?i)^(?:cuda|hip|cu)(?:LaunchKernel|LaunchCooperativeKernel|LaunchKernelExC|ModuleLaunchKernel|"
    r"ExtModuleLaunchKernel|ExtLaunchKernel|LaunchKernelEx)"
)
GRAPH_LAUNCH = r"(?i)^(?:cuda|hip|cu)GraphLaunch"
MIN_LAUNCHES = 20
RAN_SHARE_MAX = 0.1
GRAPH_SCHEMA = {
    "rank": pl.Int64,
    "step": pl.Int64,
    "launches": pl.Int64,
    "launches_ran": pl.Int64,
    "graph_replays": pl.Int64,
    "graph_capture": pl.Boolean,
}


def _in_steps(rows: pl.LazyFrame, steps: pl.DataFrame) -> pl.LazyFrame:
    """`rows` with the CPU step whose window holds their start (`WHOLE_TRACE` without CPU steps)."""
    if not (steps.get_column("source") == "cpu").any():
        return rows.with_columns(pl.lit(WHOLE_TRACE, pl.Int64).alias("step"))
    cpu = (
        steps.lazy()
        .filter(pl.col("source") == "cpu")
        .select("step", "start_us", pl.col("end_us").alias("_end"))
    )
    placed = rows.sort("start_us").join_asof(cpu.sort("start_us"), on="start_us", check_sortedness=False)
    return placed.filter(pl.col("step").is_not_null() & (pl.col("start_us") < pl.col("_end"))).drop("_end")


def graph_steps(rank: int, cpu: pl.DataFrame, steps: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """Per step of the rank (`cpu`: its host rows; `steps`: `RankTrace.steps`; `events`: its device events),
    the launches, how many of them ran, the graph replays and whether it is a capture step (module
    docstring). Columns `GRAPH_SCHEMA`. One query."""
    return graph_step_plan(rank, cpu, steps, events.get_column("correlation")).collect()


_RUNTIME = pl.col("kind") == "runtime"
_KINDS = (
    pl.col("name").str.contains(LAUNCH_CALLS).alias("launch"),
    pl.col("name").str.contains(CAPTURE_CALLS).alias("capture"),
    pl.col("name").str.contains(GRAPH_LAUNCH).alias("replay"),
)
_COUNTS = (
    pl.col("launch").sum().alias("launches"),
    (pl.col("launch") & pl.col("ran")).sum().alias("launches_ran"),
    pl.col("replay").sum().alias("graph_replays"),
    pl.col("capture").any().alias("_capture"),
)
_STARVED = (pl.col("launches") >= MIN_LAUNCHES) & (
    pl.col("launches_ran") <= RAN_SHARE_MAX * pl.col("launches")
)
_CAPTURE = (pl.col("_capture") | _STARVED).alias("graph_capture")


def graph_step_plan(rank: int, cpu: pl.DataFrame, steps: pl.DataFrame, ran: pl.Series) -> pl.LazyFrame:
    """`graph_steps` as a lazy query, for a caller to collect with others; `ran`: the correlation ids of the
    device events."""
    ran_ids = pl.Series([ran])  # as one list, built without a query
    launch, capture, replay = _KINDS
    marked = (
        cpu.lazy()
        .filter(_RUNTIME)
        .select("start_us", launch, pl.col("correlation").is_in(ran_ids).alias("ran"), capture, replay)
    )
    counts = _in_steps(marked, steps).group_by("step").agg(*_COUNTS)
    return (
        counts.with_columns(pl.lit(rank, pl.Int64).alias("rank"), _CAPTURE)
        .select(list(GRAPH_SCHEMA))
        .cast(GRAPH_SCHEMA)  # type: ignore[arg-type]
        .sort("step")
    )
