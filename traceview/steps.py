"""Step windows on the device clock, per rank (SPEC section 4).

- The trace has `ProfilerStep#N` GPU annotations: those are the windows.
- It has CPU `ProfilerStep#N` only: each device event belongs to the step whose CPU window contains the runtime
  call that launched it (matched by correlation id; an event without a launch falls back to its own start time).
  A step ends when its last device work ends: window N runs from the end of step N-1 to the end of step N (the
  first from its own first device activity). So the device time between steps, the input pipeline's gap
  included, is charged to the step it precedes, pipelined steps (the next step's prefetch running under this
  one) are not cut in two, and nothing is lost between windows.
- No steps: the whole trace is one step, numbered `WHOLE_TRACE`, from its first device activity to its last.
"""

from __future__ import annotations

import polars as pl

from traceview.model import RankTrace

WHOLE_TRACE = -1
WINDOW_SCHEMA = {
    "rank": pl.Int64,
    "step": pl.Int64,
    "window_start_us": pl.Float64,
    "window_end_us": pl.Float64,
}


def step_windows(trace: RankTrace) -> pl.DataFrame:
    """Device-clock windows of the rank's steps: columns `rank`, `step`, `window_start_us`, `window_end_us`."""
    if trace.gpu.height == 0:
        return pl.DataFrame(schema=WINDOW_SCHEMA)
    if trace.step_source == "gpu":
        windows = trace.steps.select(
            "step", pl.col("start_us").alias("window_start_us"), pl.col("end_us").alias("window_end_us")
        )
    elif trace.step_source == "cpu":
        windows = _windows_from_launches(trace)
    else:
        windows = trace.gpu.select(
            pl.lit(WHOLE_TRACE, dtype=pl.Int64).alias("step"),
            pl.col("start_us").min().alias("window_start_us"),
            pl.col("end_us").max().alias("window_end_us"),
        )
    return windows.with_columns(pl.lit(trace.rank, dtype=pl.Int64).alias("rank")).select(list(WINDOW_SCHEMA))


def device_event_steps(trace: RankTrace) -> pl.DataFrame:
    """Each device event's CPU step (by its launch), columns `correlation`, `start_us`, `end_us`, `step`."""
    launches = (
        trace.cpu.filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null())
        .select("correlation", pl.col("start_us").alias("launch_us"))
        .unique("correlation", keep="first")
    )
    steps = trace.steps.sort("start_us").select(
        "step", pl.col("start_us").alias("step_start"), pl.col("end_us").alias("step_end")
    )
    return (
        trace.gpu.select("correlation", "start_us", "end_us")
        .join(launches, on="correlation", how="left")
        .with_columns(pl.coalesce("launch_us", "start_us").alias("at_us"))
        .sort("at_us")
        .join_asof(steps, left_on="at_us", right_on="step_start")
        .filter(pl.col("step").is_not_null() & (pl.col("at_us") <= pl.col("step_end")))
        .select("correlation", "start_us", "end_us", "step")
    )


def _windows_from_launches(trace: RankTrace) -> pl.DataFrame:
    ends = (
        device_event_steps(trace)
        .group_by("step")
        .agg(pl.col("start_us").min().alias("first_start"), pl.col("end_us").max().alias("window_end_us"))
        .sort("step")
        .with_columns(pl.col("window_end_us").cum_max())
    )
    return (
        ends.with_columns(
            pl.col("window_end_us").shift(1).fill_null(pl.col("first_start")).alias("window_start_us")
        )
        .select("step", "window_start_us", "window_end_us")
        .filter(pl.col("window_end_us") > pl.col("window_start_us"))
    )
