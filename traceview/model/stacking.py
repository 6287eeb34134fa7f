"""Frames of many ranks stacked one above the other, each row with its `rank`, and split back by rank.

A batch of ranks (`traceview.map.batch`) is analysed as one frame per kind: the analyses group by `rank`, and
their results are split back into each rank's rows here, by slices where each rank's rows are together (no
query per rank).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import accumulate

import polars as pl

from traceview.core.frames import labelled, repeated, vstacked
from traceview.model.trace import RANK_FRAMES, RankTrace, Run, empty_frame


def by_rank(frame: pl.DataFrame, ranks: Sequence[int]) -> list[pl.DataFrame]:
    """The rows of `frame` of each of `ranks`, in its order (an empty frame for a rank without rows): slices
    when each rank's rows are together (the batch's frames are built rank by rank or sorted by rank), else
    partitions. Rows laid out rank by rank are found without a query (`_laid_out`, for batches of up to
    `LAID_OUT_RANKS` ranks: a pass over the column per rank)."""
    if len(ranks) == 1:
        return [frame]
    spans = _laid_out(frame.get_column("rank"), ranks) if len(ranks) <= LAID_OUT_RANKS else None
    if spans is None:
        runs = frame.get_column("rank").rechunk().rle().struct.unnest()  # runs' `len`, `value` (one chunk)
        values = runs.get_column("value").to_list()
        if len(set(values)) < len(values):  # a rank's rows apart
            parts = frame.partition_by("rank", as_dict=True, maintain_order=True)
            return [parts[(rank,)] if (rank,) in parts else frame.clear() for rank in ranks]
        lengths = runs.get_column("len").to_list()
        spans = dict(zip(values, zip(accumulate([0, *lengths]), lengths, strict=False), strict=True))
    return [frame.slice(*spans[rank]) if rank in spans else frame.clear() for rank in ranks]


LAID_OUT_RANKS = 16
"""The most ranks `by_rank` finds by a pass over the rank column per rank rather than by one query."""


def _laid_out(column: pl.Series, ranks: Sequence[int]) -> dict[int, tuple[int, int]] | None:
    """Per rank with rows, its (first row, rows) when every row of `column` belongs to one of `ranks` and
    each rank's rows follow one another (the runs read from their first rows, then checked); else None.
    Series operations only (a pass over the column per rank), no query."""
    counts = {rank: int((column == rank).sum()) for rank in dict.fromkeys(ranks)}
    if sum(counts.values()) != column.len():
        return None
    spans: dict[int, tuple[int, int]] = {}
    start = 0
    while start < column.len():
        rank = column[start]
        if rank in spans or not bool((column.slice(start, counts[rank]) == rank).all()):
            return None
        spans[rank] = (start, counts[rank])
        start += counts[rank]
    return spans


def stacked(
    frames: Sequence[pl.DataFrame], schema: Mapping[str, pl.DataType] | Mapping[str, type]
) -> pl.DataFrame:
    """`frames` one above the other (`schema`'s empty frame for none; one frame as it is)."""
    return vstacked(frames) if frames else pl.DataFrame(schema=schema)


def row_offsets(traces: Sequence[RankTrace]) -> dict[int, int]:
    """Per rank, where its device events start among the batch's, stacked in order."""
    starts = accumulate((trace.gpu.height for trace in traces), initial=0)
    return {trace.rank: start for trace, start in zip(traces, starts, strict=False)}


def stacked_rows(traces: Sequence[RankTrace], frame: Callable[[RankTrace], pl.DataFrame]) -> pl.DataFrame:
    """The frames `frame` gives of `traces`, one above the other, with the `rank` of each row's trace
    (`traceview.core.frames.labelled`: no query)."""
    return labelled([frame(trace) for trace in traces], "rank", [trace.rank for trace in traces])


def ranked_frame(run: Run, part: str) -> pl.DataFrame:
    """The frame `part` (gpu, cpu or steps) of every rank of `run`, with the rank's `rank`, as one frame
    (`stacked_rows` of the ranks that have rows), stacked once per run (`Run.stacked_frames`: the reduce's
    analyses read the host frame three times)."""
    if part not in run.stacked_frames:
        run.stacked_frames[part] = _ranked_frame(run, part)
    return run.stacked_frames[part]


def _ranked_frame(run: Run, part: str) -> pl.DataFrame:
    traces = [trace for trace in run if getattr(trace, part).height]
    if not traces:
        return empty_frame({**RANK_FRAMES[part], "rank": pl.Int64()})
    return stacked_rows(traces, lambda trace: getattr(trace, part))


def rank_column(traces: Sequence[RankTrace], heights: Sequence[int]) -> pl.Series | pl.Expr:
    """The `rank` column of frames of `traces` stacked, `heights[i]` rows of the i-th (a literal for one;
    no query)."""
    if len(traces) == 1:
        return pl.lit(traces[0].rank, pl.Int64).alias("rank")
    return repeated("rank", [trace.rank for trace in traces], heights, pl.Int64, chunked=True)


def stacked_plan(traces: Sequence[RankTrace], frame: Callable[[RankTrace], pl.DataFrame]) -> pl.LazyFrame:
    """`stacked_rows` as a lazy plan, for a query to read (one trace's `rank` a literal the query broadcasts,
    not a column of one value a row)."""
    if len(traces) == 1:
        return frame(traces[0]).lazy().with_columns(pl.lit(traces[0].rank, pl.Int64).alias("rank"))
    return stacked_rows(traces, frame).lazy()


def distinct_rank_rounds(traces: Sequence[RankTrace]) -> list[list[int]]:
    """The positions of `traces` in rounds of distinct ranks, each trace in the first round without its rank:
    one round unless a rank is claimed twice (two traces of one rank are never stacked)."""
    rounds: list[list[int]] = []
    taken: list[set[int]] = []
    for position, trace in enumerate(traces):
        k = next((k for k, ranks in enumerate(taken) if trace.rank not in ranks), len(rounds))
        if k == len(rounds):
            rounds.append([])
            taken.append(set())
        rounds[k].append(position)
        taken[k].add(trace.rank)
    return rounds
