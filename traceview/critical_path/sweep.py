"""The map's part of the critical path (docs/metrics.md, "Critical path"): per (rank, step), each moment of
the step window W given to one category, by one sweep over the boundaries of every event, and the events that
held the most time (the holders), named.

The graph is not materialised: its edges decide which node the path passes through at each moment, and the
rules that follow from them are applied to every moment at once. Stream order and launch-to-device edges
make a running device event the path's node while it runs (the device is the step's last dependency while
it works); while the device idles, the next device event waits on its launch, so the path is on the
launching thread: the innermost of its host rows at that moment (a blocking runtime call, a launch, an
operator, an annotation), or on no recorded event (`other`). Host collectives (gloo, MPI) are comm nodes:
open until the reduce resolves which part of them waited for a peer.

Each interval becomes two points (+1 at its start, -1 at its end, in its priority's column); a point's
running sums say which priorities are open from it to the next point; the lowest open priority holds that
segment. Every interval is cut to its window first, so each window's sums return to zero and the running
sums need no grouping.
"""

from __future__ import annotations

import polars as pl

from traceview.core.intervals import clipped
from traceview.critical_path.categories import (
    CATEGORY_COLUMNS,
    OTHER,
    PATH_ORDER,
    device_priority,
    host_priority,
)

KEYS = ["rank", "step"]
PER_STEP_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64(),
    "step": pl.Int64(),
    "step_us": pl.Float64(),
    **{column: pl.Float64() for column in CATEGORY_COLUMNS},
}
HOLDER_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64(),
    "category": pl.Utf8(),
    "name": pl.Utf8(),
    "held_us": pl.Float64(),
    "calls": pl.Int64(),
    "steps": pl.Int64(),
    "longest_step": pl.Int64(),
    "longest_step_us": pl.Float64(),
}
"""A holder per (rank, category, name): the time it held over the rank's steps, how many distinct events,
in how many steps, and the step where it held the most (the drill-down's link)."""
MAX_NAME_CHARS = 200
HELD_MIN_US = 0.001
"""A holder of less time over the rank's steps is float rounding of `ts + dur` (ns timestamps): not listed
(its time still counts in the per-step rows)."""
_INTERVAL = ["rank", "start_us", "end_us", "name", "priority"]
_NAMELESS = pl.lit("(no event recorded)")


def launching_threads(cpu: pl.LazyFrame, device: pl.LazyFrame) -> pl.LazyFrame:
    """(rank, tid) of every thread whose runtime calls launched a device event (by correlation)."""
    launched = device.select("rank", "correlation").drop_nulls().unique()
    runtime = cpu.filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null())
    return runtime.join(launched, on=["rank", "correlation"], how="semi").select("rank", "tid").unique()


def host_intervals(cpu: pl.LazyFrame, threads: pl.LazyFrame) -> pl.LazyFrame:
    """The host rows the path may pass through: those of the launching threads; every thread's on a rank
    whose launches the trace does not link to device work (an inferred edge, said in the notes)."""
    linked = cpu.join(threads, on=["rank", "tid"], how="semi")
    unlinked = cpu.join(threads.select("rank").unique(), on="rank", how="anti")
    rows = pl.concat([linked, unlinked]).with_columns(host_priority().alias("priority"))
    return rows.filter(pl.col("priority").is_not_null()).select(_INTERVAL)


def device_intervals(events: pl.LazyFrame) -> pl.LazyFrame:
    """Classified device events (with `kernel_class`) and host collectives as path intervals."""
    return events.with_columns(device_priority().alias("priority")).select(_INTERVAL)


def _points(cut: pl.LazyFrame, windows: pl.LazyFrame) -> pl.LazyFrame:
    """Two points per cut interval and one per window edge (no priority), sorted by (rank, step, time)."""
    point = [*KEYS, "priority"]
    edge = pl.lit(None, pl.Int32).alias("priority")
    return pl.concat(
        [
            cut.select(*point, pl.col("start_us").alias("t"), pl.lit(1, pl.Int32).alias("d")),
            cut.select(*point, pl.col("end_us").alias("t"), pl.lit(-1, pl.Int32).alias("d")),
            *(
                windows.select(*KEYS, edge, pl.col(bound).alias("t"), pl.lit(0, pl.Int32).alias("d"))
                for bound in ("window_start_us", "window_end_us")
            ),
        ]
    ).sort([*KEYS, "t"])


def _holding() -> pl.Expr:
    """Per point, the lowest priority open from it on (null when none is)."""
    opened = [
        pl.when((pl.col("d") * (pl.col("priority") == index).fill_null(False)).cum_sum() > 0).then(index)
        for index in range(len(PATH_ORDER))
    ]
    return pl.min_horizontal(opened).alias("priority")


def path_segments(intervals: pl.LazyFrame, windows: pl.LazyFrame) -> pl.LazyFrame:
    """The path of every window: rank, step, t (segment start), priority (null: nothing recorded), seg_us."""
    cut = clipped(intervals, windows, ["rank"])
    points = _points(cut, windows)
    length = (pl.col("t").shift(-1).over(KEYS) - pl.col("t")).fill_null(0.0)
    return (
        points.with_columns(_holding(), length.alias("seg_us"))
        .filter(pl.col("seg_us") > 0)
        .select(*KEYS, "t", "priority", "seg_us")
    )


def _extending(intervals: pl.LazyFrame) -> pl.LazyFrame:
    """Per (rank, priority), the intervals that reach past every earlier one: the latest of them to start at
    or before a moment covers it whenever any interval of that priority does (docs/metrics.md). Of intervals
    that start together, the longest comes first (the outer one names the moment), then by name."""
    reach = pl.col("end_us").cum_max().shift(1).over("rank", "priority")
    return (
        intervals.sort(
            ["rank", "priority", "start_us", "end_us", "name"], descending=[False, False, False, True, False]
        )
        .filter((pl.col("end_us") > reach).fill_null(True))
        .select("rank", "priority", "start_us", "name")
    )


def named_segments(segments: pl.LazyFrame, intervals: pl.LazyFrame) -> pl.LazyFrame:
    """`segments` with the name of the event that held each and its start (`held_from`, to count calls)."""
    named = _extending(intervals).with_columns(pl.col("start_us").alias("held_from"))
    return (
        segments.sort("t")
        .join_asof(
            named.sort("start_us"),
            left_on="t",
            right_on="start_us",
            by=["rank", "priority"],
            strategy="backward",
            check_sortedness=False,
        )
        .with_columns(
            pl.when(pl.col("priority").is_null()).then(_NAMELESS).otherwise(pl.col("name")).alias("name"),
            _category().alias("category"),
        )
    )


def _category() -> pl.Expr:
    return pl.col("priority").replace_strict(dict(enumerate(PATH_ORDER)), default=OTHER, return_dtype=pl.Utf8)


def per_step_plan(named: pl.LazyFrame, windows: pl.LazyFrame) -> pl.LazyFrame:
    """Per window, its length and the time of each category (`CATEGORY_COLUMNS`; peer waits 0 until the
    reduce resolves them)."""
    sums = [
        pl.col("seg_us").filter(pl.col("category") == column.removesuffix("_us")).sum().alias(column)
        for column in CATEGORY_COLUMNS
    ]
    table = named.group_by(KEYS).agg(sums)
    step = (pl.col("window_end_us") - pl.col("window_start_us")).alias("step_us")
    return (
        windows.select(*KEYS, step)
        .join(table, on=KEYS, how="left")
        .with_columns(pl.col(CATEGORY_COLUMNS).fill_null(0.0))
        .select(list(PER_STEP_SCHEMA))
        .sort(KEYS)
    )


def holders_plan(named: pl.LazyFrame) -> pl.LazyFrame:
    """Per (rank, category, name) the time it held over the rank's steps (`HOLDER_SCHEMA`); names made
    step-free (`ProfilerStep#7` -> `ProfilerStep`) and cut to `MAX_NAME_CHARS`."""
    name = pl.col("name").fill_null("").str.replace(r"#\d+$", "").str.slice(0, MAX_NAME_CHARS)
    per_step = (
        named.with_columns(name.alias("name"))
        .group_by("rank", "category", "name", "step")
        .agg(
            pl.col("seg_us").sum().alias("held_us"),
            pl.col("held_from").n_unique().cast(pl.Int64).alias("calls"),
        )
    )
    longest = pl.col("held_us").arg_max()  # the first step of the most, the rows in step order
    return (
        per_step.sort("rank", "category", "name", "step")
        .group_by("rank", "category", "name", maintain_order=True)
        .agg(
            pl.col("held_us").sum(),
            pl.col("calls").sum(),
            pl.len().cast(pl.Int64).alias("steps"),
            pl.col("step").get(longest).alias("longest_step"),
            pl.col("held_us").get(longest).alias("longest_step_us"),
        )
        .filter(pl.col("held_us") >= HELD_MIN_US)
        .select(list(HOLDER_SCHEMA))
        .sort(["rank", "held_us", "category", "name"], descending=[False, True, False, False])
    )


def critical_path_plans(
    events: pl.DataFrame, cpu: pl.DataFrame, windows: pl.DataFrame
) -> tuple[pl.LazyFrame, pl.LazyFrame, pl.LazyFrame]:
    """The queries of a batch's path: per (rank, step) rows, holders, and the ranks whose host rows could
    not be tied to their launches (every thread read). `events` are classified with `kernel_class`; `cpu` the
    batch's host rows with `rank`."""
    device, host = events.lazy(), cpu.lazy()
    threads = launching_threads(host, device).cache()
    intervals = pl.concat([device_intervals(device), host_intervals(host, threads)]).cache()
    named = named_segments(path_segments(intervals, windows.lazy()), intervals).cache()
    unlinked = host.select("rank").unique().join(threads.select("rank").unique(), on="rank", how="anti")
    return per_step_plan(named, windows.lazy()), holders_plan(named), unlinked.sort("rank")


HOLDERS_PER_RANK = 8
"""Holders a rank keeps by name; the rest are summed into one row (category `rest`)."""
REST = "rest"


def bounded_holders(holders: pl.DataFrame) -> pl.DataFrame:
    """Per rank, its `HOLDERS_PER_RANK` holders of the most time (`holders` sorted by rank, then time, the
    longest first) and one `rest` row summing the others."""
    place = pl.int_range(pl.len()).over("rank")
    ranked = holders.lazy().with_columns(place.alias("_place"))
    kept = ranked.filter(pl.col("_place") < HOLDERS_PER_RANK).drop("_place")
    rest = (
        ranked.filter(pl.col("_place") >= HOLDERS_PER_RANK)
        .group_by("rank")
        .agg(
            pl.lit(REST).alias("category"),
            pl.format("{} more", pl.len()).alias("name"),
            pl.col("held_us").sum(),
            pl.col("calls").sum(),
            pl.col("steps").max(),
            pl.col("longest_step")
            .sort_by("longest_step_us", "longest_step", descending=[True, False])
            .first(),
            pl.col("longest_step_us").max(),
        )
        .select(list(HOLDER_SCHEMA))
    )
    return pl.concat([kept, rest]).sort("rank", maintain_order=True).collect()
