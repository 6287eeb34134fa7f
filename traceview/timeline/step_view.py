"""The timeline behind the report's step view: per step and rank, merged segments of each activity class.

For a handful of steps (the median step first among them) every rank's device activity inside its step window
becomes disjoint segments per lane: `compute` (union of compute kernels), `comm` per collective (union of that
collective's kernels), `memory` (copies and sets) and `idle` (no device activity at all, as in `budget`).
Times are on the run's aligned clock and given relative to the step's origin, the earliest window start of
that step among the ranks, so one axis shows every rank and skew reads directly.

The segment count is bounded (`MAX_SEGMENTS` in all, `MAX_SEGMENTS_PER_GROUP` per group): when a (rank, step,
lane, label) group has more segments than its share, the smallest gaps between its segments are bridged (busy
lanes; `covered_us` keeps the time really busy, so the page draws a bridged segment fainter) or the shortest
idle segments dropped, until it fits; `Timeline.bridged_gap_us` says how large a bridged gap got, so the page
can say so.
"""

from __future__ import annotations

from functools import cache

import polars as pl

from traceview.core.intervals import clipped, group_starts, sorted_reach
from traceview.core.records import record
from traceview.core.vocab import canonical_collective_expr

MAX_SEGMENTS = 12_000
"""Segments drawn in the timeline figure over all offered steps and ranks."""
MIN_SEGMENTS_PER_GROUP = 8
"""A (rank, step, lane, label) group always keeps at least this many segments."""
MAX_SEGMENTS_PER_GROUP = 256
"""A (rank, step, lane, label) group keeps at most this many segments (a few pixels each in the step view):
one rank's segments grow with its steps and collectives, never with its events."""
MAX_STEPS = 9
"""Steps offered by the step picker (the median, fastest and slowest among them)."""
MAX_RANKS = 32
"""Ranks drawn at most: past it, the slowest, the fastest and evenly spaced ones between (`shown_ranks`)."""
SLOWEST_SHOWN, FASTEST_SHOWN = 12, 4
LANES = ("compute", "comm", "memory", "idle")
KEYS = ["rank", "step", "lane", "label"]
SEGMENT_SCHEMA = {
    "rank": pl.Int64,
    "step": pl.Int64,
    "lane": pl.Utf8,
    "label": pl.Utf8,
    "start_us": pl.Float64,
    "end_us": pl.Float64,
    "covered_us": pl.Float64,
    "kernels": pl.Int64,
    "longest_kernel": pl.Utf8,
    "process_group": pl.Utf8,
}


@record
class Timeline:
    """Merged activity segments of the offered steps.

    `segments`: SEGMENT_SCHEMA, times in us since the step's origin; `covered_us` is the time inside the
    segment that really is of its label (less than its length where gaps were bridged). `steps`: columns
    `step`, `origin_us` (aligned clock), `since_run_start_us` (the origin's time since the run's start: the
    earliest step window of any rank), `median_step_us` (median over ranks of the window length), `ranks`, in
    step order.
    `median_step`: the step whose median length is the median over steps (the lower one of an even count).
    """

    segments: pl.DataFrame
    steps: pl.DataFrame
    median_step: int | None
    raw_segments: int
    drawn_segments: int
    bridged_gap_us: float
    ranks_total: int = 0
    ranks_shown: tuple[int, ...] = ()

    @property
    def offered_steps(self) -> list[int]:
        """The steps the report lets the reader pick, in step order."""
        return [int(s) for s in self.steps.get_column("step").to_list()]


def step_lengths(per_step: pl.DataFrame) -> pl.DataFrame:
    """Per step: `median_step_us` over ranks and the count of ranks, sorted by (length, step)."""
    return (
        per_step.group_by("step")
        .agg(pl.col("step_us").median().alias("median_step_us"), pl.len().alias("ranks"))
        .sort(["median_step_us", "step"])
    )


def offered_steps(lengths: pl.DataFrame, max_steps: int = MAX_STEPS) -> tuple[int | None, list[int]]:
    """(median step, steps to offer): evenly spaced in length order, fastest, median and slowest included."""
    order = [int(s) for s in lengths.get_column("step").to_list()]
    if not order:
        return None, []
    median = order[(len(order) - 1) // 2]
    count = min(max_steps, len(order))
    picks = {order[round(i * (len(order) - 1) / max(count - 1, 1))] for i in range(count)}
    return median, sorted(picks | {median})


@cache
def _label_columns() -> tuple[pl.Expr, ...]:
    """The columns of `_labelled`, built once (the collective lookup is a large expression)."""
    collective = pl.coalesce(
        canonical_collective_expr(pl.col("collective_name")), pl.col("kernel_collective")
    )
    group = pl.coalesce(pl.col("pg_desc"), pl.col("pg_name"))
    return (
        pl.col("rank"),
        pl.col("start_us"),
        pl.col("end_us"),
        pl.col("name"),
        pl.col("event_class").alias("lane"),
        pl.when(pl.col("event_class") == "comm")
        .then(collective.fill_null("unknown collective"))
        .otherwise(pl.col("event_class"))
        .alias("label"),
        pl.when(pl.col("event_class") == "comm").then(group).alias("process_group"),
    )


def _labelled(events: pl.LazyFrame) -> pl.LazyFrame:
    """Device events with their lane, label (the collective of a comm event) and process group."""
    return events.select(_label_columns())


_NEW_SEGMENT = (pl.col("start_us") > sorted_reach(KEYS)).fill_null(value=True)
_SEGMENT = _NEW_SEGMENT.cum_sum().set_sorted().alias("_segment")
"""Per row of events sorted by `KEYS`, then start: its merged segment's number, over the whole frame (a
group's first row starts one). Flagged sorted, so that the merge's group-by slices the rows instead of
hashing them (its aggregations are exact: first, least, largest, count)."""
_MERGED = [
    *(pl.col(key).first() for key in KEYS),
    pl.col("start_us").min(),
    pl.col("end_us").max(),
    pl.len().cast(pl.Int64).alias("kernels"),
    pl.col("name")
    .sort_by(pl.col("end_us") - pl.col("start_us"), descending=True)
    .first()
    .alias("longest_kernel"),
    pl.col("process_group").drop_nulls().first().alias("process_group"),
]
_COVERED = (pl.col("end_us") - pl.col("start_us")).alias("covered_us")


def _merge(clipped: pl.LazyFrame) -> pl.LazyFrame:
    """Disjoint segments per (rank, step, lane, label) (`SEGMENT_SCHEMA`, unsorted) with the count of events
    merged and the name of the longest one: their union by sort and cumulative max."""
    return (
        clipped.sort([*KEYS, "start_us"])
        .with_columns(_SEGMENT)
        .group_by("_segment")
        .agg(_MERGED)
        .with_columns(_COVERED)
        .select(list(SEGMENT_SCHEMA))
    )


_EDGES = [
    [pl.col("rank"), pl.col("step"), pl.col(c).alias("start_us"), pl.col(c).alias("end_us")]
    for c in ("window_start_us", "window_end_us")
]
_BUSY = [pl.col("rank"), pl.col("step"), pl.col("start_us"), pl.col("end_us")]
_HOLE = pl.col("start_us") > pl.col("_reach")
_IDLE_ROW = [
    pl.col("rank"),
    pl.col("step"),
    pl.lit("idle").alias("lane"),
    pl.lit("idle").alias("label"),
    pl.col("_reach").alias("start_us"),
    pl.col("start_us").alias("end_us"),
    (pl.col("start_us") - pl.col("_reach")).alias("covered_us"),
    pl.lit(0, dtype=pl.Int64).alias("kernels"),
    pl.lit(None, dtype=pl.Utf8).alias("longest_kernel"),
    pl.lit(None, dtype=pl.Utf8).alias("process_group"),
]


def _idle(activity: pl.LazyFrame, windows: pl.LazyFrame) -> pl.LazyFrame:
    """Holes in all device activity inside each window, the edges of the window included (zero-length
    intervals at both edges): where a row starts past the reach of the rows before it."""
    edges = [windows.select(edge) for edge in _EDGES]
    busy = pl.concat([activity.select(_BUSY), *edges], how="vertical_relaxed")
    return (
        busy.sort("rank", "step", "start_us")
        .with_columns(sorted_reach(["rank", "step"]).alias("_reach"))
        .filter(_HOLE)
        .select(_IDLE_ROW)
    )


def _bounded(
    segments: pl.LazyFrame, per_group: int | pl.Expr, presorted: bool = False
) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """At most `per_group` segments per group (unsorted, or sorted by `KEYS` then start when `presorted`; a
    column: per row): the smallest gaps bridged (idle: the shortest dropped); with the largest gap bridged per
    (rank, step), where any was (`rank`, `step`, `bridged_gap_us`). The groups are numbered from their
    starts in that order, and every window and grouping is by those numbers."""
    first = group_starts(KEYS)
    ordered = (segments if presorted else segments.sort([*KEYS, "start_us"])).with_columns(
        first.cum_sum().set_sorted().alias("_group"),  # sorted: the windows over it slice the rows
        pl.when(~first).then(pl.col("start_us") - pl.col("end_us").shift(1)).alias("_gap"),
        (pl.col("end_us") - pl.col("start_us")).alias("_length"),
    )
    idle = ordered.filter(pl.col("lane") == "idle").filter(
        pl.col("_length").rank("ordinal", descending=True).over("_group") <= per_group
    )
    busy = ordered.filter(pl.col("lane") != "idle")
    boundary = pl.col("_gap").is_null() | (
        pl.col("_gap").rank("ordinal", descending=True).over("_group") < per_group
    )
    busy = busy.with_columns(boundary.alias("_boundary"))
    bridged = (
        busy.filter(~pl.col("_boundary"))
        .group_by("rank", "step")
        .agg(pl.col("_gap").max().cast(pl.Float64).alias("bridged_gap_us"))
    )
    merged = (
        busy.with_columns(pl.col("_boundary").cum_sum().alias("_segment"))  # a group's first row is one
        .group_by("_segment")
        .agg(
            *(pl.col(key).first() for key in KEYS),
            pl.col("start_us").min(),
            pl.col("end_us").max(),
            pl.col("covered_us").sum(),
            pl.col("kernels").sum(),
            pl.col("longest_kernel").sort_by("_length", descending=True).first(),
            pl.col("process_group").drop_nulls().first(),
        )
    )
    frames = [merged.select(list(SEGMENT_SCHEMA)), idle.select(list(SEGMENT_SCHEMA))]
    return pl.concat(frames), bridged


def shown_ranks(per_step: pl.DataFrame, median_step: int, max_ranks: int = MAX_RANKS) -> list[int]:
    """The ranks the timeline draws: all of them up to `max_ranks`; past it, by their length of the median
    step, the `SLOWEST_SHOWN` slowest, the `FASTEST_SHOWN` fastest and evenly spaced ones between."""
    ordered = (
        per_step.filter(pl.col("step") == median_step)
        .sort(["step_us", "rank"], descending=[True, False])
        .get_column("rank")
        .to_list()
    )
    if len(ordered) <= max_ranks:
        return sorted(ordered)
    middle = ordered[SLOWEST_SHOWN:-FASTEST_SHOWN]
    between = max_ranks - SLOWEST_SHOWN - FASTEST_SHOWN
    spaced = [middle[round(i * (len(middle) - 1) / max(between - 1, 1))] for i in range(between)]
    return sorted({*ordered[:SLOWEST_SHOWN], *spaced, *ordered[-FASTEST_SHOWN:]})


def empty_timeline() -> Timeline:
    """A timeline with no steps (a run without device activity)."""
    return Timeline(pl.DataFrame(schema=SEGMENT_SCHEMA), pl.DataFrame(), None, 0, 0, 0.0)


COUNT_SCHEMA = {
    "rank": pl.Int64,
    "step": pl.Int64,
    "raw_segments": pl.Int64,
    "groups": pl.Int64,
    "bridged_gap_us": pl.Float64,
}


_COUNTED = [
    pl.col("_segments").sum().cast(pl.Int64).alias("raw_segments"),
    pl.len().cast(pl.Int64).alias("groups"),
    pl.lit(0.0).alias("bridged_gap_us"),
    pl.col("_segments").max().alias("_largest"),
]


def _counts(segments: pl.LazyFrame) -> pl.LazyFrame:
    """Per (rank, step): `COUNT_SCHEMA` with nothing bridged, and the segments of its largest group
    (`_largest`)."""
    return (
        segments.group_by(KEYS)
        .agg(pl.len().alias("_segments"))
        .group_by("rank", "step")
        .agg(_COUNTED)
        .sort("rank", "step")
    )


def rank_segments(
    events: pl.DataFrame, windows: pl.DataFrame, ranks_in_run: int = 1
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """One rank's merged segments of every step (absolute times, `SEGMENT_SCHEMA`), bounded so that the run's
    timeline (`timeline_from_segments`) can still draw its share, and per (rank, step) the count of merged
    segments before bounding and of (lane, label) groups (`COUNT_SCHEMA`). When no group needs bounding, each
    keeps its segments as they are and the bounding's queries are skipped (then one query in all)."""
    if events.height == 0 or windows.height == 0:
        return pl.DataFrame(schema=SEGMENT_SCHEMA), pl.DataFrame(schema=COUNT_SCHEMA)
    window_rows = windows.lazy()
    cut = clipped(_labelled(events.lazy()), window_rows, ["rank"])
    merged_rows = pl.concat([_merge(cut), _idle(cut, window_rows)]).cache()
    counted = _counts(merged_rows).with_columns(_per_group(ranks_in_run))
    segments, counts = pl.collect_all([merged_rows.sort([*KEYS, "start_us"]), counted])  # held once, in order
    largest, allowed = counts.get_column("_largest"), counts.get_column("_per_group")
    over = counts.get_column("rank").filter(largest > allowed).unique().to_list()  # Series: no query
    if not over:  # every group keeps its segments
        return segments, counts.drop("_largest", "_per_group")
    each = counts.get_column("rank").is_first_distinct()  # a row per rank (Series: no query)
    ranks, shares = (counts.get_column(c).filter(each) for c in ("rank", "_per_group"))
    share = pl.col("rank").replace_strict(ranks, shares)
    bounding = segments.lazy().filter(pl.col("rank").is_in(over))  # still in order
    bounded, bridged = _bounded(bounding.with_columns(share.alias("_per_group")), pl.col("_per_group"), True)
    kept = segments.lazy().filter(~pl.col("rank").is_in(over))
    with_bridged = (
        counts.lazy()
        .drop("bridged_gap_us")
        .join(bridged, on=["rank", "step"], how="left")
        .with_columns(pl.col("bridged_gap_us").fill_null(0.0))
        .select(list(COUNT_SCHEMA))
        .sort("rank", "step")
    )
    drawn = pl.concat([bounded, kept]).sort([*KEYS, "start_us"])
    return tuple(pl.collect_all([drawn, with_bridged]))  # type: ignore[return-value]


def _per_group(ranks_in_run: int) -> pl.Expr:
    """Per rank, the segments each of its (step, lane, label) groups may keep: the timeline's budget
    (`MAX_SEGMENTS`) shared among the run's ranks, the rank's steps (at most `MAX_STEPS`) and its groups
    (as many as its step with fewest), within `MIN_SEGMENTS_PER_GROUP` and `MAX_SEGMENTS_PER_GROUP`."""
    steps = pl.len().over("rank").clip(upper_bound=MAX_STEPS)
    least = pl.col("groups").min().over("rank")
    share = pl.max_horizontal(
        pl.lit(MIN_SEGMENTS_PER_GROUP), pl.lit(MAX_SEGMENTS) // (ranks_in_run * least * steps).clip(1)
    )
    return pl.min_horizontal(share, pl.lit(MAX_SEGMENTS_PER_GROUP)).alias("_per_group")


def timeline_from_segments(
    segments: pl.DataFrame,
    counts: pl.DataFrame,
    windows: pl.DataFrame,
    per_step: pl.DataFrame,
    max_segments: int = MAX_SEGMENTS,
    max_steps: int = MAX_STEPS,
) -> Timeline:
    """The timeline of the offered steps from every rank's `rank_segments` (on the aligned clock), the step
    windows (aligned) and the budget's `per_step`."""
    lengths = step_lengths(per_step)
    median, picks = offered_steps(lengths, max_steps)
    if median is None or segments.height == 0:
        return empty_timeline()
    ranks = shown_ranks(per_step, median)
    chosen = windows.filter(pl.col("step").is_in(picks))
    offered = segments.filter(pl.col("step").is_in(picks) & pl.col("rank").is_in(ranks))
    offered_counts = counts.filter(pl.col("step").is_in(picks) & pl.col("rank").is_in(ranks))
    groups = max(int(offered_counts.get_column("groups").sum()), 1)
    share = min(max(MIN_SEGMENTS_PER_GROUP, max_segments // groups), MAX_SEGMENTS_PER_GROUP)
    bounded_plan, bridged_plan = _bounded(offered.lazy(), share)
    bounded, bridged_here = pl.collect_all([bounded_plan, bridged_plan])
    bridged_before = offered_counts.get_column("bridged_gap_us").max()
    bridged = max(
        float(bridged_before) if isinstance(bridged_before, int | float) else 0.0,
        float(bridged_here.get_column("bridged_gap_us").max() or 0.0),  # type: ignore[arg-type]
    )
    origins = chosen.group_by("step").agg(pl.col("window_start_us").min().alias("origin_us"))
    relative = (
        bounded.join(origins, on="step")
        .with_columns(pl.col("start_us") - pl.col("origin_us"), pl.col("end_us") - pl.col("origin_us"))
        .select(list(SEGMENT_SCHEMA))
        .sort([*KEYS, "start_us"])
    )
    run_start = pl.lit(windows.get_column("window_start_us").min(), pl.Float64)  # the run's start, aligned
    steps = (
        origins.join(lengths, on="step")
        .sort("step")
        .with_columns((pl.col("origin_us") - run_start).alias("since_run_start_us"))
        .select("step", "origin_us", "since_run_start_us", "median_step_us", "ranks")
    )
    raw = int(offered_counts.get_column("raw_segments").sum())
    total = per_step.get_column("rank").n_unique()
    return Timeline(relative, steps, median, raw, relative.height, bridged, total, tuple(ranks))


def timeline(
    events: pl.DataFrame,
    windows: pl.DataFrame,
    per_step: pl.DataFrame,
    max_segments: int = MAX_SEGMENTS,
    max_steps: int = MAX_STEPS,
) -> Timeline:
    """The timeline of the offered steps from classified events, step windows and the budget's `per_step`
    (every rank at once: `rank_segments` then `timeline_from_segments`)."""
    segments, counts = rank_segments(events, windows, 1)
    return timeline_from_segments(segments, counts, windows, per_step, max_segments, max_steps)
