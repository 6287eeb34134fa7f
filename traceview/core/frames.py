"""Frames put together without a polars query: stacked one above the other (`vstacked`), a column of values
repeated (`repeated`), and the two together, each row labelled with its frame's value (`labelled`). The
reduce and the run's checks stack thousands of small frames, where a query each (about 0.2 to 0.3 ms) would
be most of their cost."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl


def strictly_stacked(frames: Sequence[pl.DataFrame], *, rechunk: bool = False) -> pl.DataFrame | None:
    """`frames` (at least one) one above the other without a query, when their columns and types are the
    same; None otherwise (a strict concat refuses differing types, never changes one)."""
    try:
        return pl.concat(frames, how="vertical", rechunk=rechunk)
    except (pl.exceptions.SchemaError, pl.exceptions.ShapeError):
        return None


def vstacked(frames: Sequence[pl.DataFrame], *, rechunk: bool = False) -> pl.DataFrame:
    """`frames` (at least one) one above the other, each column of the type common to the frames': without a
    query when their types are the same (`strictly_stacked`: the reduce stacks thousands of small frames; a
    relaxed concat is a query each), relaxed to the common type otherwise."""
    stacked = strictly_stacked(frames, rechunk=rechunk)
    return pl.concat(frames, how="vertical_relaxed", rechunk=rechunk) if stacked is None else stacked


def repeated(
    name: str,
    values: Sequence[int],
    counts: Sequence[int],
    dtype: type[pl.DataType],
    *,
    chunked: bool = False,
) -> pl.Series:
    """Each of `values` `counts[i]` times (no query): in one chunk, or, `chunked`, a chunk per value (to stand
    beside columns cut so). One value is repeated directly, about 50 times faster than the general one-chunk
    path's list column, whose cost is fixed."""
    if len(values) == 1 or chunked:
        one = [
            pl.Series(name, [value], dtype).new_from_index(0, n)
            for value, n in zip(values, counts, strict=True)
        ]
        if len(one) == 1:
            return one[0]
        return pl.concat(one, rechunk=False) if one else pl.Series(name, [], dtype)
    times = pl.Series(counts, dtype=pl.UInt32)
    some = times > 0  # an empty list would explode into a null row
    listed = pl.Series(name, values, dtype).filter(some).repeat_by(times.filter(some))
    return listed.explode() if listed.len() else pl.Series(name, [], dtype)


def labelled(frames: Sequence[pl.DataFrame], name: str, labels: Sequence[int]) -> pl.DataFrame:
    """`frames` (at least one) one above the other (`vstacked`), with an Int64 column `name` holding each
    row's frame's label (`labels[i]` for `frames[i]`; no query). Frames of one chunk each (small ones: a
    batch's tiny ranks, the reduce's summaries) become one chunk; otherwise the label column is cut in the
    frames' chunks, so that no query first copies the columns together (a big streamed rank's frames are
    dozens of chunks)."""
    chunks = [frame.to_series(0).chunk_lengths() if frame.width and frame.height else [0] for frame in frames]
    if all(len(lengths) == 1 for lengths in chunks):
        column = repeated(name, labels, [lengths[0] for lengths in chunks], pl.Int64)
        return vstacked(frames, rechunk=True).hstack([column])
    of_chunk = [label for label, lengths in zip(labels, chunks, strict=True) for _ in lengths]
    lengths = [length for of_frame in chunks for length in of_frame]
    return vstacked(frames).hstack([repeated(name, of_chunk, lengths, pl.Int64, chunked=True)])
