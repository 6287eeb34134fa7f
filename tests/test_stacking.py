"""Frames of several ranks stacked (`traceview.model.stacking`): the same rows and types as a relaxed concat,
each row with its rank, the rank column cut in the frames' chunks when they have several."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import polars as pl

from traceview.model.stacking import repeated, stacked_rows, vstacked
from traceview.model.trace import RankTrace


def traces(*ranks: int) -> list[RankTrace]:
    return [cast(RankTrace, SimpleNamespace(rank=rank)) for rank in ranks]


def test_same_types_stack_as_a_relaxed_concat_and_differing_ones_are_relaxed() -> None:
    ints = pl.DataFrame({"x": [1, 2]})
    floats = pl.DataFrame({"x": [0.5]})
    nulls = pl.DataFrame({"x": [None]})
    for frames in ([ints, ints], [ints, floats], [floats, ints], [nulls, ints], [ints, nulls]):
        expected = pl.concat(frames, how="vertical_relaxed")
        found = vstacked(frames)
        assert found.schema == expected.schema
        assert found.equals(expected)
    assert vstacked([ints, floats]).get_column("x").to_list() == [1.0, 2.0, 0.5]


def test_repeated_values_skip_zero_counts() -> None:
    assert repeated("rank", [3, 4, 5], [2, 0, 1], pl.Int64).to_list() == [3, 3, 5]
    assert repeated("rank", [3], [2], pl.Int64).to_list() == [3, 3]
    assert repeated("rank", [3], [0], pl.Int64).dtype == pl.Int64
    assert repeated("rank", [3], [0], pl.Int64).len() == 0
    assert repeated("rank", [3, 4], [0, 0], pl.Int64).len() == 0
    assert repeated("rank", [], [], pl.Int64).len() == 0


def test_one_chunk_frames_stack_into_one_chunk_with_each_rows_rank() -> None:
    frames = {
        0: pl.DataFrame({"t": [1.0, 2.0]}),
        1: pl.DataFrame({"t": []}, schema={"t": pl.Float64}),
        2: pl.DataFrame({"t": [3.0]}),
    }
    found = stacked_rows(traces(7, 8, 9), lambda trace: frames[trace.rank - 7])
    assert found.get_column("rank").to_list() == [7, 7, 9]
    assert found.get_column("t").to_list() == [1.0, 2.0, 3.0]
    assert [found.get_column(name).n_chunks() for name in found.columns] == [1, 1]


def test_rank_column_cut_in_the_chunks_of_frames_read_in_pieces() -> None:
    pieces = pl.concat([pl.DataFrame({"t": [1.0, 2.0]}), pl.DataFrame({"t": [3.0]})], rechunk=False)
    alone = pl.DataFrame({"t": [4.0]})
    found = stacked_rows(traces(5, 6), lambda trace: pieces if trace.rank == 5 else alone)
    assert found.get_column("rank").to_list() == [5, 5, 5, 6]
    assert found.get_column("rank").chunk_lengths() == found.get_column("t").chunk_lengths() == [2, 1, 1]
