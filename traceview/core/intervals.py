"""Interval algebra on polars frames: unions by sort and cumulative max, and clipping into windows.

Every function takes a frame with `start_us`/`end_us` columns and group keys, and never loops over rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

import polars as pl

from traceview.core.records import record

START, END = "start_us", "end_us"


def _within(expr: pl.Expr, by: Sequence[str]) -> pl.Expr:
    """`expr` evaluated per group of `by` (over the whole frame when there are no keys)."""
    return expr.over(list(by)) if by else expr


def group_starts(by: Sequence[str]) -> pl.Expr:
    """Per row of a frame sorted by `by`: whether it starts a group (its keys differ from the row before; with
    no keys, the first row)."""
    if not by:
        return pl.int_range(pl.len()) == 0
    return pl.any_horizontal([pl.col(key).ne_missing(pl.col(key).shift(1)) for key in by])


def sorted_reach(by: Sequence[str]) -> pl.Expr:
    """Per row of a frame sorted by `by`, then start: the largest end of the rows before it in its group (none
    for a group's first row): the running maximum per group number (one integer, not the keys; flagged
    sorted, so that the window slices the rows instead of hashing them), shifted outside the window."""
    first = group_starts(by)
    return pl.when(~first).then(pl.col(END).cum_max().over(first.cum_sum().set_sorted()).shift(1))


def _reach(by: Sequence[str]) -> pl.Expr:
    """Per row (sorted by start within each group): the largest end of the rows before it; a window over the
    keys themselves, as `merged` nests it in one (`sorted_reach` numbers the groups with a window of its
    own)."""
    return _within(pl.col(END).cum_max().shift(1), by)


def _uncovered_part(by: Sequence[str]) -> pl.Expr:
    """Per row (sorted by start within each group): the part of [start, end) that no earlier row covers.

    Earlier rows all start at or before this one, so what they cover from `start` on is [start, reach) with
    reach = the largest earlier end.
    """
    return (pl.col(END) - pl.max_horizontal(pl.col(START), _reach(by).fill_null(pl.col(START)))).clip(
        lower_bound=0.0
    )


def union_length(frame: pl.DataFrame, by: Sequence[str], name: str = "length_us") -> pl.DataFrame:
    """Length of the union of the intervals of each group: columns `by` + `name`."""
    return union_lengths(frame.lazy(), by, name).collect()


def union_lengths(
    frame: pl.LazyFrame, by: Sequence[str], name: str = "length_us", *extra: pl.Expr
) -> pl.LazyFrame:
    """`union_length` as part of a lazy query, with one column per `extra` aggregation over each group."""
    return (
        frame.sort([*by, START])
        .with_columns(_uncovered_part(by).alias(name))
        .group_by(list(by))
        .agg(pl.col(name).sum(), *extra)
    )


def merge_intervals(frame: pl.DataFrame, by: Sequence[str], *extra: pl.Expr) -> pl.DataFrame:
    """The union of each group's intervals as disjoint, sorted segments: columns `by`, `start_us`, `end_us`,
    then one column per `extra` aggregation over the intervals each segment merged."""
    return merged(frame.lazy(), by, *extra).collect()


def merged(frame: pl.LazyFrame, by: Sequence[str], *extra: pl.Expr) -> pl.LazyFrame:
    """`merge_intervals` as part of a lazy query."""
    new_segment = (pl.col(START) > _reach(by)).fill_null(True)
    return (
        frame.sort([*by, START])
        .with_columns(_within(new_segment.cast(pl.Int64).cum_sum(), by).alias("_segment"))
        .group_by([*by, "_segment"])
        .agg(pl.col(START).min(), pl.col(END).max(), *extra)
        .sort([*by, START])
        .drop("_segment")
    )


def gaps(segments: pl.DataFrame, by: Sequence[str]) -> pl.DataFrame:
    """The holes between consecutive disjoint segments of each group: columns `by`, `start_us`, `end_us`."""
    return (
        segments.lazy()
        .sort([*by, START])
        .with_columns(_within(pl.col(END).shift(1), by).alias("_previous_end"))
        .filter(pl.col("_previous_end").is_not_null() & (pl.col(START) > pl.col("_previous_end")))
        .select([*by, pl.col("_previous_end").alias(START), pl.col(START).alias(END)])
        .collect()
    )


def _window_at(frame: pl.LazyFrame, time: str, starts: pl.LazyFrame, by: list[str] | None) -> pl.LazyFrame:
    """`frame` with the index of the last window starting at or before `time` (null: before every window)."""
    return (
        frame.sort(time)
        .join_asof(starts, left_on=time, right_on="window_start_us", by=by, check_sortedness=False)
        .drop("window_start_us")
    )


@record
class _Clipping:
    """The expressions `clipped` uses for one tuple of group keys, built once (`_clipping`)."""

    order: list[str]
    numbered: pl.Expr
    first: list[pl.Expr]
    last: list[pl.Expr]
    keys: list[str]


@cache
def _clipping(by: tuple[str, ...]) -> _Clipping:
    keys = [pl.col(key) for key in by]
    starts = [*keys, pl.col("window_start_us")]
    return _Clipping(
        order=[*by, "window_start_us"],
        numbered=pl.int_range(pl.len()).over(list(by)).alias("_window"),
        first=[*starts, pl.col("_window").alias("_first")],
        last=[*starts, pl.col("_window").alias("_last")],
        keys=[*by, "_window"],
    )


_SPANNED = pl.int_ranges(pl.col("_first").fill_null(0), pl.col("_last") + 1).alias("_window")
_ENDED = pl.col("_last").is_not_null()
_CUT_TIMES = (
    pl.max_horizontal(START, "window_start_us").alias(START),
    pl.min_horizontal(END, "window_end_us").alias(END),
)
_NOT_EMPTY = pl.col(END) > pl.col(START)


def clip_to_windows(events: pl.DataFrame, windows: pl.DataFrame, by: Sequence[str]) -> pl.DataFrame:
    """Each event cut into the windows it overlaps (an event spanning two windows counts in both).

    `windows` has columns `by`, `step`, `window_start_us`, `window_end_us`, with windows of one group not
    overlapping. Returns the events' columns with `step` added and times clipped to the window. One query.
    """
    return clipped(events.lazy(), windows.lazy(), by).collect()


def clipped(
    events: pl.LazyFrame, windows: pl.LazyFrame, by: Sequence[str], edges: bool = False
) -> pl.LazyFrame:
    """`clip_to_windows` as part of a lazy query; `edges`: each clipped event keeps its window's
    `window_start_us` and `window_end_us`."""
    use = _clipping(tuple(by))
    keys = list(by) or None
    ordered = windows.sort(use.order).with_columns(use.numbered)
    first = _window_at(events, START, ordered.select(use.first), keys)
    both = _window_at(first, END, ordered.select(use.last), keys)
    exploded = both.filter(_ENDED).with_columns(_SPANNED).explode("_window").drop("_first", "_last")
    cut = exploded.join(ordered, on=use.keys, how="inner").with_columns(_CUT_TIMES).filter(_NOT_EMPTY)
    return cut.drop("_window") if edges else cut.drop("_window", "window_start_us", "window_end_us")
