"""The holders of the critical path (docs/metrics.md, "Critical path"): per (rank, category, name), the time
the events of that name held on the rank's path, summed over its steps; at most `HOLDERS_PER_RANK` a rank
by name, the rest in one row.

The path's named segments are first summed per (rank, priority, name code, step) (`holder_steps_plan`):
a priority is one category, a code one name (`name_code_plans`), and integers are cheaper to group by than
names. Each step belongs to one part of a batch's path however it is cut (`traceview.critical_path.chunks`),
so the parts' rows are stacked, named and summed over steps once (`holders_of_steps`).
"""

from __future__ import annotations

from functools import cache

import polars as pl

from traceview.critical_path.categories import OTHER, PATH_ORDER

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
HOLDERS_PER_RANK = 8
"""Holders a rank keeps by name; the rest are summed into one row (category `rest`)."""
REST = "rest"
_NAMELESS = pl.lit("(no event recorded)")


@cache
def _category() -> pl.Expr:
    """A segment's category, from its priority (`PATH_ORDER`; null: `other`)."""
    by_priority = dict(enumerate(PATH_ORDER))
    return (
        pl.col("priority").replace_strict(by_priority, default=OTHER, return_dtype=pl.Utf8).alias("category")
    )


def name_code_plans(intervals: pl.LazyFrame) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """`intervals` (with `name`) with `code`, the code of its name made step-free (`ProfilerStep#7` ->
    `ProfilerStep`) and cut to `MAX_NAME_CHARS`; and those names by code (`_name`, a row a code). Each
    distinct name is cleaned once; the path's segments are summed by code (integers), their names read for
    the holders alone. Plans, collected with the intervals (no query of their own)."""
    cleaned = pl.col("name").fill_null("").str.replace(r"#\d+$", "").str.slice(0, MAX_NAME_CHARS)
    distinct = intervals.select("name").unique(maintain_order=True).with_columns(cleaned.alias("_name"))
    table = distinct.select("_name").unique(maintain_order=True).with_row_index("code")
    coded = distinct.join(table, on="_name", how="left").select("name", "code")
    with_codes = intervals.join(coded, on="name", how="left", nulls_equal=True, maintain_order="left")
    return with_codes, table.select("_name")


def holder_steps_plan(named: pl.LazyFrame, codes: pl.Series) -> pl.LazyFrame:
    """Per (rank, priority, name code, step) the time held (`held_us`) and the distinct events holding it
    (`calls`); `codes` gives each interval's (`iid`, its row) name code (`name_code_plans`). A priority is one
    category and a code one name, so these are the holders' rows per step (`holders_of_steps` names them)."""
    per_interval = named.group_by("rank", "priority", "iid", "step").agg(pl.col("seg_us").sum())
    return (
        per_interval.with_columns(pl.lit(codes).gather(pl.col("iid")).alias("code"))
        .group_by("rank", "priority", "code", "step")
        .agg(pl.col("seg_us").sum().alias("held_us"), pl.len().cast(pl.Int64).alias("calls"))
    )


def holders_of_steps(per_step: pl.LazyFrame, names: pl.Series) -> pl.LazyFrame:
    """Per (rank, category, name) of `holder_steps_plan`'s rows, the time it held over the rank's steps
    (`HOLDER_SCHEMA`), the longest first; `names` the names by code (`name_code_plans`)."""
    name = pl.when(pl.col("code").is_null()).then(_NAMELESS).otherwise(pl.lit(names).gather(pl.col("code")))
    longest = pl.col("held_us").arg_max()  # the first step of the most, the rows in step order
    return (
        per_step.with_columns(name.alias("name"), _category())
        .sort("rank", "category", "name", "step")
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


def bounded_holders(holders: pl.LazyFrame) -> pl.LazyFrame:
    """Per rank, its `HOLDERS_PER_RANK` holders of the most time (`holders` sorted by rank, then time, the
    longest first) and one `rest` row summing the others."""
    place = pl.int_range(pl.len()) - pl.col("rank").search_sorted(pl.col("rank"))  # rows sorted by rank
    ranked = holders.with_columns(place.alias("_place"))
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
    return pl.concat([kept, rest]).sort("rank", maintain_order=True)
