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

from collections.abc import Sequence

import polars as pl

from traceview.model.trace import CALL_KEY
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


def _in_steps(rows: pl.LazyFrame, steps: pl.DataFrame, stepped: Sequence[int]) -> pl.LazyFrame:
    """`rows` (with `rank`) with the CPU step of their rank whose window holds their start; `WHOLE_TRACE` for
    the rows of ranks without CPU steps (those not in `stepped`)."""
    cpu = (
        steps.lazy()
        .filter(pl.col("source") == "cpu")
        .select("rank", "step", "start_us", pl.col("end_us").alias("_end"))
        .sort("start_us")
    )
    placed = rows.sort("start_us").join_asof(cpu, on="start_us", by="rank", check_sortedness=False)
    has_steps = pl.col("rank").is_in(
        pl.Series([list(stepped)], dtype=pl.List(pl.Int64))
    )  # one list, no query
    inside = pl.col("step").is_not_null() & (pl.col("start_us") < pl.col("_end"))
    return (
        placed.filter(~has_steps | inside)
        .with_columns(pl.when(has_steps).then(pl.col("step")).otherwise(pl.lit(WHOLE_TRACE, pl.Int64)))
        .drop("_end")
    )


def graph_step_plan(
    cpu: pl.DataFrame, steps: pl.DataFrame, device: pl.LazyFrame, stepped: Sequence[int]
) -> pl.LazyFrame:
    """Per rank and step (`cpu`: host rows, `steps`: `RankTrace.steps`, `device`: device events, each with
    `rank`, of one or many ranks; `stepped`: the ranks with CPU steps), the launches, how many of them ran,
    the graph replays and whether it is a capture step (module docstring). Columns `GRAPH_SCHEMA`, by rank and
    step; a lazy query, for a caller to collect with others."""
    marked = cpu.lazy().filter(_RUNTIME).select("rank", "start_us", "correlation", *_KINDS)
    placed = _in_steps(marked, steps, stepped).cache()  # read twice: every call, then the launches that ran
    ran = (  # a semi join with the device's ids: no unique of them, no join of every call
        placed.filter(pl.col("launch"))
        .join(device.select(CALL_KEY), on=CALL_KEY, how="semi")
        .group_by("rank", "step")
        .agg(pl.len().alias("launches_ran"))
    )
    counts = (
        placed.group_by("rank", "step")
        .agg(*_COUNTS)
        .join(ran, on=["rank", "step"], how="left")
        .with_columns(pl.col("launches_ran").fill_null(0))
        .with_columns(_CAPTURE)
    )
    return counts.select(list(GRAPH_SCHEMA)).cast(GRAPH_SCHEMA).sort("rank", "step")  # type: ignore[arg-type]


_RUNTIME = pl.col("kind") == "runtime"
_KINDS = (
    pl.col("name").str.contains(LAUNCH_CALLS).alias("launch"),
    pl.col("name").str.contains(CAPTURE_CALLS).alias("capture"),
    pl.col("name").str.contains(GRAPH_LAUNCH).alias("replay"),
)
_COUNTS = (
    pl.col("launch").sum().alias("launches"),
    pl.col("replay").sum().alias("graph_replays"),
    pl.col("capture").any().alias("_capture"),
)
_STARVED = (pl.col("launches") >= MIN_LAUNCHES) & (
    pl.col("launches_ran") <= RAN_SHARE_MAX * pl.col("launches")
)
_CAPTURE = (pl.col("_capture") | _STARVED).alias("graph_capture")
