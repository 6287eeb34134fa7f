"""Many small ranks summarised as one batch (`traceview.map.rank_summary.summarize_many`): their frames
stacked with a `rank` column, each analysis run once for all, the results split back by rank.

A polars query costs about the same on a hundred rows as on one (its call, its plan, the hand-off to polars'
threads: `benchmarks/query_overhead.py`), so a rank of a few hundred events costs its queries, not its rows;
stacked, K such ranks cost the queries of one. The ranks of a batch must differ (each analysis groups by
`rank`); each keeps its own clock.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import accumulate

import polars as pl

from traceview.model.trace import RankTrace

BATCH_RANKS = 16
"""At most this many ranks are summarised together."""
BATCH_BYTES = 1 << 20
"""A batch's files hold at most this many bytes together (a larger file is a batch of its own): a worker holds
a batch's parses at once, and a rank of a megabyte costs its rows more than its queries."""


def batches_of_sizes(sizes: Sequence[int], workers: int | None = None) -> list[range]:
    """The positions of files of `sizes` bytes cut into consecutive batches of at most `BATCH_RANKS` files and
    `BATCH_BYTES` together (a larger file alone), and, for a pool of `workers` processes (None: no pool),
    small enough that each worker gets at least four."""
    share = BATCH_RANKS if workers is None else len(sizes) // (4 * workers)
    most = max(1, min(BATCH_RANKS, share))
    starts: list[int] = []
    held = 0
    for index, size in enumerate(sizes):
        if not starts or index - starts[-1] >= most or held + size > BATCH_BYTES:
            starts.append(index)
            held = 0
        held += size
    return [range(start, end) for start, end in zip(starts, [*starts[1:], len(sizes)], strict=True)]


def distinct_rank_batches(traces: Sequence[RankTrace]) -> Iterator[list[RankTrace]]:
    """`traces` in order, cut into runs of distinct ranks: a trace claiming a rank already in the batch starts
    the next one (two files of one rank are never stacked)."""
    batch: list[RankTrace] = []
    seen: set[int] = set()
    for trace in traces:
        if trace.rank in seen:
            yield batch
            batch, seen = [], set()
        batch.append(trace)
        seen.add(trace.rank)
    if batch:
        yield batch


def by_rank(frame: pl.DataFrame, ranks: Sequence[int]) -> list[pl.DataFrame]:
    """The rows of `frame` of each of `ranks`, in its order (an empty frame for a rank without rows): slices
    when each rank's rows are together (the batch's frames are built rank by rank or sorted by rank), else
    partitions."""
    if len(ranks) == 1:
        return [frame]
    runs = frame.lazy().select(pl.col("rank").rle()).unnest("rank").collect()  # the runs' `len`, `value`
    values = runs.get_column("value").to_list()
    if len(set(values)) < len(values):  # a rank's rows apart
        parts = frame.partition_by("rank", as_dict=True, maintain_order=True)
        return [parts[(rank,)] if (rank,) in parts else frame.clear() for rank in ranks]
    lengths = runs.get_column("len").to_list()
    starts = dict(zip(values, accumulate([0, *lengths]), strict=False))
    spans = dict(zip(values, lengths, strict=True))
    return [frame.slice(starts[rank], spans[rank]) if rank in spans else frame.clear() for rank in ranks]


def stacked(
    frames: Sequence[pl.DataFrame], schema: Mapping[str, pl.DataType] | Mapping[str, type]
) -> pl.DataFrame:
    """`frames` one above the other (`schema`'s empty frame for none; one frame as it is)."""
    return pl.concat(frames, how="vertical_relaxed") if frames else pl.DataFrame(schema=schema)


def row_offsets(traces: Sequence[RankTrace]) -> dict[int, int]:
    """Per rank, where its device events start among the batch's, stacked in order."""
    starts = accumulate((trace.gpu.height for trace in traces), initial=0)
    return {trace.rank: start for trace, start in zip(traces, starts, strict=False)}
