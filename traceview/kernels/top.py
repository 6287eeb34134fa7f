"""The heaviest kernels of a rank, bounded (docs/metrics.md, "Kernels and operators").

- `top_kernels`: per (rank, kernel name) over every device event of the trace, steps or not: the class, the
  key (`traceview.events.kernel_keys`), the count, total, median, p99 and longest duration; the `TOP_KERNELS`
  names of largest total per rank.
- `key_steps`: per (rank, step, key) inside the step windows (cut as the time budget cuts them): the pieces
  and their summed duration, for the `TOP_KEYS` keys of largest total per rank. The slow rank's explanation
  and `kernels --step` read it; what it leaves out of a class is that class's remainder (`kernel_sum_us` of
  the class rows less the keys').
"""

from __future__ import annotations

import polars as pl

TOP_KERNELS = 24
"""Kernel names kept per rank (`top_kernels`)."""
TOP_KEYS = 24
"""Kernel keys kept per rank, per step (`key_steps`)."""

TOP_KERNEL_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64(),
    "name": pl.Utf8(),
    "key": pl.Utf8(),
    "kernel_class": pl.Utf8(),
    "count": pl.Int64(),
    "total_us": pl.Float64(),
    "median_us": pl.Float64(),
    "p99_us": pl.Float64(),
    "max_us": pl.Float64(),
}
KEY_STEP_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64(),
    "step": pl.Int64(),
    "key": pl.Utf8(),
    "kernel_class": pl.Utf8(),
    "name": pl.Utf8(),
    "kernels": pl.Int64(),
    "kernel_sum_us": pl.Float64(),
}


def first_seen(events: pl.DataFrame) -> pl.LazyFrame:
    """Per (rank, name_id) of classed device events (one rank's, or several stacked): `_seen`, the row of
    the name's first event. Ordered by it, a rank's names come in the order they first appear in its own
    events whatever other ranks share the frame (`name_id` numbers the names of the whole frame); the ties
    below are broken by it (a query)."""
    rows = events.lazy().select("rank", "name_id").with_row_index("_seen")
    return rows.group_by("rank", "name_id").agg(pl.col("_seen").min())


def _largest(frame: pl.LazyFrame, value: str, bound: int) -> pl.LazyFrame:
    """The `bound` rows of largest `value` per rank (ties by the frame's order)."""
    ranked = pl.col(value).rank("ordinal", descending=True).over("rank")
    return frame.filter(ranked <= bound)


_DURATION = pl.col("end_us") - pl.col("start_us")
_KERNEL_FIGURES = (
    pl.len().cast(pl.Int64).alias("count"),
    _DURATION.sum().alias("total_us"),
    _DURATION.median().alias("median_us"),
    _DURATION.quantile(0.99, "linear").alias("p99_us"),
    _DURATION.max().alias("max_us"),
)
_NAMED = ("name_id", "name", "key", "kernel_class")
_RANK_SEEN = ["rank", "_seen"]


def top_kernels(
    events: pl.DataFrame, names: pl.DataFrame, seen: pl.LazyFrame, bound: int = TOP_KERNELS
) -> pl.LazyFrame:
    """Per (rank, name) of classed device events (`name_id`; `names`: the table of names, keys and classes;
    `seen`: `first_seen(events)`): count, total, median, p99, max (a query)."""
    if events.height == 0:
        return pl.LazyFrame(schema=TOP_KERNEL_SCHEMA)
    grouped = events.lazy().group_by("rank", "name_id").agg(_KERNEL_FIGURES)
    ordered = grouped.join(seen, on=["rank", "name_id"]).sort(_RANK_SEEN)
    named = _largest(ordered, "total_us", bound).join(names.lazy().select(_NAMED), on="name_id")
    return named.sort(["rank", "total_us", "name", "_seen"], descending=[False, True, False, False]).select(
        list(TOP_KERNEL_SCHEMA)
    )


_PIECES = ("rank", "step", "key_id", "name_id", _DURATION.alias("_dur"))
_KEY_TOTAL = pl.col("_dur").sum().alias("_total")
_KEY_FIGURES = (pl.len().cast(pl.Int64).alias("kernels"), pl.col("_dur").sum().alias("kernel_sum_us"))


def key_steps(
    clipped: pl.DataFrame, names: pl.DataFrame, seen: pl.LazyFrame, bound: int = TOP_KEYS
) -> pl.LazyFrame:
    """Per (rank, step, key) of the windowed events (`key_id`, `name_id`): pieces and summed duration, the
    `bound` keys of largest total per rank; `name` is the key's name of largest time, the first seen of
    equal ones (`seen`: `first_seen` of the events clipped) (a query)."""
    if clipped.height == 0:
        return pl.LazyFrame(schema=KEY_STEP_SCHEMA)
    with_dur = clipped.lazy().select(_PIECES)
    totals = with_dur.group_by("rank", "key_id").agg(_KEY_TOTAL).sort("rank", "key_id")
    largest = _largest(totals, "_total", bound).select("rank", "key_id")
    kept = with_dur.join(largest, on=["rank", "key_id"], maintain_order="left")
    named = names.lazy()
    heaviest = (
        kept.group_by("rank", "key_id", "name_id")
        .agg(pl.col("_dur").sum())
        .join(seen, on=["rank", "name_id"])
        .sort(["rank", "key_id", "_dur", "_seen"], descending=[False, False, True, False])
        .group_by("rank", "key_id", maintain_order=True)
        .agg(pl.col("name_id").first())
        .join(named.select("name_id", "name", "kernel_class"), on="name_id")
        .join(named.select("key_id", "key").unique("key_id"), on="key_id")
    )
    steps = kept.group_by("rank", "step", "key_id").agg(_KEY_FIGURES)
    return (
        steps.join(heaviest, on=["rank", "key_id"]).sort("rank", "step", "key").select(list(KEY_STEP_SCHEMA))
    )
