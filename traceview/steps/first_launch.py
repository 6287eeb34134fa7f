"""When each host step starts launching (docs/metrics.md, "Across ranks", cause `late launch`): per CPU
`ProfilerStep#N` of a rank, its start and the first launch of device work inside it.

A rank whose host spends longer than its peers before its first launch of a step (a sleep, data loading or a
synchronisation at the start of the step) makes every later collective of the step late; the difference is
visible on its own timeline, whatever the device does. On a host timeline the "launches" are the host
operators' own starts (`traceview.events.host_timeline`).
"""

from __future__ import annotations

import polars as pl

from traceview.model.trace import CALL_KEY

FIRST_LAUNCH_SCHEMA = {
    "rank": pl.Int64,
    "step": pl.Int64,
    "host_start_us": pl.Float64,
    "first_launch_us": pl.Float64,
}


_CPU_STEPS = (
    pl.col("source") == "cpu",
    ("rank", "step", pl.col("start_us").alias("host_start_us"), pl.col("end_us").alias("_end")),
)


_CORRELATED = pl.col("correlation").is_not_null()
_LAUNCH = ("rank", "correlation", "launch_us")
_INSIDE = pl.col("step").is_not_null() & (pl.col("launch_us") < pl.col("_end"))
_FIRST_LAUNCH = pl.col("launch_us").min().alias("first_launch_us")


def first_launch_plan(steps: pl.DataFrame, events: pl.LazyFrame, launches: pl.DataFrame) -> pl.LazyFrame:
    """Per rank and CPU step (`steps`: `RankTrace.steps` with `rank`, of one or many ranks),
    `host_start_us` and `first_launch_us`, the earliest launch (`launches`: rank, correlation, launch_us) of a
    device event (`events`: rank, correlation) inside the step; steps with no launch are left out. Columns
    `FIRST_LAUNCH_SCHEMA`, by rank and step; a lazy query, for a caller to collect with others."""
    where, columns = _CPU_STEPS
    cpu = steps.lazy().filter(where).select(*columns).sort("host_start_us")
    launched = (  # the launches of device work: a semi join with the events' ids (no unique of them)
        launches.lazy()
        .select(_LAUNCH)
        .join(events.filter(_CORRELATED).select(CALL_KEY), on=CALL_KEY, how="semi")
        .drop_nulls("launch_us")
        .sort("launch_us")
    )
    placed = launched.join_asof(
        cpu, left_on="launch_us", right_on="host_start_us", by="rank", check_sortedness=False
    )
    return (
        placed.filter(_INSIDE)
        .group_by("rank", "step", "host_start_us")
        .agg(_FIRST_LAUNCH)
        .select(list(FIRST_LAUNCH_SCHEMA))
        .cast(FIRST_LAUNCH_SCHEMA)  # type: ignore[arg-type]
        .sort("rank", "step")
    )
