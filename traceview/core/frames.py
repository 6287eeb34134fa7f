"""Frames put together without a polars query: stacked one above the other (`vstacked`), and a column of
values repeated (`repeated`). The reduce and the run's checks stack thousands of small frames, where a query
each (about 0.2 to 0.3 ms) would be most of their cost."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl


def vstacked(frames: Sequence[pl.DataFrame], *, rechunk: bool = False) -> pl.DataFrame:
    """`frames` (at least one) one above the other, each column of the type common to the frames': without a
    query when their types are the same (the reduce stacks thousands of small frames; a relaxed concat is a
    query each), relaxed to the common type otherwise (a strict concat refuses differing types, never
    changes one)."""
    try:
        return pl.concat(frames, how="vertical", rechunk=rechunk)
    except (pl.exceptions.SchemaError, pl.exceptions.ShapeError):
        return pl.concat(frames, how="vertical_relaxed", rechunk=rechunk)


def repeated(name: str, values: Sequence[int], counts: Sequence[int], dtype: type[pl.DataType]) -> pl.Series:
    """Each of `values` `counts[i]` times, in one chunk (no query; one value repeated directly, about 50
    times faster than the general path's list column, whose cost is fixed)."""
    if len(values) == 1:
        return pl.Series(name, values, dtype).new_from_index(0, counts[0])
    times = pl.Series(counts, dtype=pl.UInt32)
    some = times > 0  # an empty list would explode into a null row
    listed = pl.Series(name, values, dtype).filter(some).repeat_by(times.filter(some))
    return listed.explode() if listed.len() else pl.Series(name, [], dtype)
