"""A large batch's critical path walked in parts (docs/metrics.md, "Critical path", Memory): runs of whole
step windows, each with the intervals that reach into it and the collectives it owns, so that the path's
segments, their running sums and their holders are held for one part at a time, not for every event at once.

The parts are exact: each (rank, step) lies in one part, and what the path of a window reads is in its part.
The intervals are made disjoint (`sweep._extending`) over the whole batch first, then each part keeps those
that overlap its windows' extent (the one covering a moment of a window overlaps it); a collective belongs to
the window holding its entry (`nodes.nodes_plan`: the latest window start at or before it), so a part owns
the entries from its first window's start to the next part's (from any time for a rank's first part).
"""

from __future__ import annotations

import polars as pl

PART_ROWS = 400_000
"""A batch whose path reads more intervals than this is walked in parts of about this many (by windows, each
part as many as the others): a part's segments and running sums hold about 100 bytes an interval, each part
costs its queries once (about 15 ms)."""
_BOUND = float("inf")


def window_parts(windows: pl.DataFrame, intervals: int) -> list[pl.DataFrame]:
    """`windows` (rank, step, window_start_us, window_end_us) cut into runs of consecutive windows, by rank
    then start, about `PART_ROWS` of the batch's `intervals` each; one part (the windows as given) for a
    batch of fewer."""
    count = min(windows.height, -(-intervals // PART_ROWS))
    if count < 2:
        return [windows]
    ordered = windows.sort("rank", "window_start_us", maintain_order=True)
    size = -(-ordered.height // count)
    return [ordered.slice(start, size) for start in range(0, ordered.height, size)]


def part_bounds(parts: list[pl.DataFrame]) -> list[pl.DataFrame]:
    """Per part, per rank of its windows: their extent (`_lo`, `_hi`) and the entries its collectives own
    (`_from`, `_to`: from the part's first window start, any time for the rank's first part, to the rank's
    next part's first window start, any time for its last)."""
    spans = pl.concat(
        [
            part.group_by("rank").agg(
                pl.col("window_start_us").min().alias("_lo"),
                pl.col("window_end_us").max().alias("_hi"),
                pl.lit(index, pl.Int64).alias("_part"),
            )
            for index, part in enumerate(parts)
        ]
    ).sort("rank", "_part")
    first = pl.col("_part") == pl.col("_part").min().over("rank")
    owned = spans.with_columns(
        pl.when(first).then(-_BOUND).otherwise(pl.col("_lo")).alias("_from"),
        pl.col("_lo").shift(-1).over("rank").fill_null(_BOUND).alias("_to"),
    )
    return [owned.filter(pl.col("_part") == index).drop("_part") for index in range(len(parts))]


def _keyed(bounds: pl.DataFrame, frame: pl.LazyFrame, columns: list[str]) -> pl.LazyFrame:
    """`bounds`' `columns` with its `rank` of `frame`'s type (for a join on it)."""
    rank = frame.collect_schema()["rank"]
    return bounds.lazy().select(pl.col("rank").cast(rank), *columns)


def intervals_in(intervals: pl.LazyFrame, bounds: pl.DataFrame) -> pl.LazyFrame:
    """The `intervals` (rank, start_us, end_us, ...) that overlap their rank's windows in a part
    (`part_bounds`)."""
    extent = _keyed(bounds, intervals, ["_lo", "_hi"])
    inside = (pl.col("end_us") > pl.col("_lo")) & (pl.col("start_us") < pl.col("_hi"))
    return intervals.join(extent, on="rank", how="inner").filter(inside).drop("_lo", "_hi")


def entries_in(rows: pl.LazyFrame, bounds: pl.DataFrame) -> pl.LazyFrame:
    """The communication `rows` (rank, start_us, ...) whose entry a part owns (`part_bounds`)."""
    owned = _keyed(bounds, rows, ["_from", "_to"])
    inside = (pl.col("start_us") >= pl.col("_from")) & (pl.col("start_us") < pl.col("_to"))
    return rows.join(owned, on="rank", how="inner").filter(inside).drop("_from", "_to")
