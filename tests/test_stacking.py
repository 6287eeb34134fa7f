"""Frames of several ranks stacked (`traceview.core.frames`, `traceview.model.stacking`): the same rows and
types as a relaxed concat, each row with its rank, the rank column cut in the frames' chunks when they have
several; a run's ranks checked together, the first fault named."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import cast

import polars as pl
import pytest

from traceview.core.errors import TraceviewError
from traceview.core.frames import repeated, strictly_stacked, vstacked
from traceview.model.stacking import stacked_rows
from traceview.model.trace import (
    CPU_SCHEMA,
    GPU_SCHEMA,
    STEP_SCHEMA,
    RankTrace,
    Run,
    TraceMeta,
    checked,
    empty_frame,
)


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
    assert strictly_stacked([ints, floats]) is None
    assert strictly_stacked([ints, nulls]) is not None  # a null column takes the other's type


def test_repeated_values_skip_zero_counts() -> None:
    assert repeated("rank", [3, 4, 5], [2, 0, 1], pl.Int64).to_list() == [3, 3, 5]
    assert repeated("rank", [3], [2], pl.Int64).to_list() == [3, 3]
    assert repeated("rank", [3], [0], pl.Int64).dtype == pl.Int64
    assert repeated("rank", [3], [0], pl.Int64).len() == 0
    assert repeated("rank", [3, 4], [0, 0], pl.Int64).len() == 0
    chunked = repeated("rank", [3, 4, 5], [2, 0, 1], pl.Int64, chunked=True)
    assert chunked.to_list() == [3, 3, 5]
    assert chunked.chunk_lengths() == [2, 1]  # a chunk per value (polars keeps no empty chunk)
    assert repeated("rank", [], [], pl.Int64, chunked=True).len() == 0
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


def _trace(
    rank: int, gpu: Sequence[tuple[float | None, float]], steps: Sequence[tuple[float, float]] = ()
) -> RankTrace:
    """A rank with device events and steps of (start, end) only, every other column null."""

    def frame(rows: Sequence[tuple[float | None, float]], schema: Mapping[str, pl.DataType]) -> pl.DataFrame:
        times = pl.DataFrame(rows, schema={"start_us": pl.Float64, "end_us": pl.Float64}, orient="row")
        return times.select(
            pl.col(c) if c in times.columns else pl.lit(None, t).alias(c) for c, t in schema.items()
        )

    meta = TraceMeta(rank=rank, rank_source="distributedInfo")
    return RankTrace(
        f"rank{rank}.json",
        meta,
        frame(gpu, GPU_SCHEMA),
        empty_frame(CPU_SCHEMA),
        frame(steps, STEP_SCHEMA),
        "gpu",
    )


def test_a_run_of_many_ranks_names_the_first_rank_whose_events_end_before_they_start() -> None:
    good = [_trace(rank, [(0.0, 2.0), (3.0, 5.0)], [(0.0, 5.0)]) for rank in range(40)]
    backwards = _trace(40, [(0.0, 2.0), (9.0, 4.0), (8.0, 7.0)])
    unstarted = _trace(41, [(None, 2.0)])
    assert Run(ranks=(*good, unstarted)).ranks  # built unchecked
    with pytest.raises(TraceviewError, match=r"rank41\.json \(rank 41\) gpu: events without a start time"):
        Run(ranks=(*good, unstarted)).validate()
    with pytest.raises(TraceviewError, match=r"rank40\.json \(rank 40\) gpu: 2 events end before they start"):
        Run(ranks=(*good, backwards, unstarted)).validate()
    with pytest.raises(TraceviewError, match=r"rank40\.json \(rank 40\) gpu: 2 events end before they start"):
        backwards.validate()
    bad_step = _trace(3, [(0.0, 1.0)], [(5.0, 4.0)])
    with pytest.raises(TraceviewError, match=r"rank3\.json \(rank 3\) steps: 1 events end before they start"):
        Run(ranks=(*good[:3], bad_step)).validate()
    assert Run(ranks=tuple(good)).validate().rank_ids == list(range(40))


def test_ranks_checked_in_groups_of_bounded_rows_and_a_large_rank_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import traceview.model.trace as trace_module

    monkeypatch.setattr(trace_module, "STACKED_ROWS", 4)
    sized = [pl.DataFrame({"start_us": [0.0] * n, "end_us": [1.0] * n}) for n in (1, 2, 9, 1, 1, 3, 0)]
    assert trace_module._groups(sized) == [[0, 1], [2], [3, 4], [5, 6]]
    assert trace_module._groups([]) == []
    ranks = [_trace(r, [(0.0, 1.0)] * n) for r, n in enumerate((1, 2, 9, 1, 1, 3))]
    assert Run(ranks=tuple(ranks)).validate().rank_ids == list(range(6))
    ranks[4] = _trace(4, [(0.0, 1.0), (3.0, 2.0)])
    with pytest.raises(TraceviewError, match=r"rank4\.json \(rank 4\) gpu: 1 events end before they start"):
        Run(ranks=tuple(ranks)).validate()
    ranks[2] = _trace(2, [(0.0, 1.0)] * 8 + [(None, 1.0)])
    with pytest.raises(TraceviewError, match=r"rank2\.json \(rank 2\) gpu: events without a start time"):
        Run(ranks=tuple(ranks)).validate()


def test_a_batch_checked_together_gives_each_trace_or_its_own_error() -> None:
    good = _trace(0, [(0.0, 1.0)])
    backwards = _trace(1, [(0.0, 1.0), (5.0, 2.0)])
    unsourced = dataclasses.replace(_trace(2, [(0.0, 1.0)]), step_source="sideways")
    also_good = _trace(3, [(2.0, 3.0)], [(0.0, 4.0)])
    outcomes = checked([good, backwards, unsourced, also_good])
    assert outcomes[0] is good
    assert outcomes[3] is also_good
    assert str(outcomes[1]) == "rank1.json (rank 1) gpu: 1 events end before they start"
    assert "unknown step source 'sideways'" in str(outcomes[2])
    for trace, outcome in zip([backwards, unsourced], outcomes[1:3], strict=True):
        with pytest.raises(TraceviewError) as alone:
            trace.validate()
        assert str(alone.value) == str(outcome)
