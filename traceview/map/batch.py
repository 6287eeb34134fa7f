"""Many small ranks summarised as one batch (`traceview.map.rank_summary.summarize_many`): their frames
stacked with a `rank` column, each analysis run once for all, the results split back by rank.

A polars query costs about the same on a hundred rows as on one (its call, its plan, the hand-off to polars'
threads: `benchmarks/query_overhead.py`), so a rank of a few hundred events costs its queries, not its rows;
stacked, K such ranks cost the queries of one. The ranks of a batch must differ (each analysis groups by
`rank`); each keeps its own clock.
"""

from __future__ import annotations

from collections.abc import Sequence

BATCH_RANKS = 64
"""At most this many ranks are summarised together: a batch's queries cost about 10 ms whatever its ranks, so
64 tiny ranks pay 0.2 ms each for them where 16 paid 0.6 (1,024 tiny ranks in one process on one core: 6.3
against 7.8 ms of CPU per rank, docs/scaling.md); the bytes bound below keeps a batch's parses small."""
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
