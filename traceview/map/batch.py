"""Many small ranks summarised as one batch (`traceview.map.rank_summary.summarize_many`): their frames
stacked with a `rank` column, each analysis run once for all, the results split back by rank.

A polars query costs about the same on a hundred rows as on one (its call, its plan, the hand-off to polars'
threads: `benchmarks/query_overhead.py`), so a rank of a few hundred events costs its queries, not its rows;
stacked, K such ranks cost the queries of one. The ranks of a batch must differ (each analysis groups by
`rank`); each keeps its own clock.

A batch is bounded by what its worker holds: the JSON text of its files (`text_size`: a gzip file's inflated
size, read from its trailer), which the decoded events follow, not by the bytes on disk (a gzip'd rank holds
ten to twenty times its size in text).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from traceview.core.location import Location, Url

BATCH_RANKS = 64
"""At most this many ranks are summarised together: a batch's queries cost about 10 ms whatever its ranks, so
64 tiny ranks pay 0.2 ms each for them where 16 paid 0.6 (1,024 tiny ranks in one process on one core: 6.3
against 7.8 ms of CPU per rank, docs/scaling.md); the text bound below keeps a batch's parses small."""
BATCH_TEXT_BYTES = 16 << 20
"""A batch's files hold at most this much JSON text together (a file with more is a batch of its own): a
worker holds a batch's parses at once (its decoded events, about half its text in memory on small ranks,
README), and past this a rank's rows cost more than its share of the batch's queries."""
GZIP_MAGIC = b"\x1f\x8b"
GZIP_MOST_RATIO = 1032
"""Deflate inflates a byte into at most this many: a gzip file's trailer (the text's size modulo 2^32) is
exact only below 2^32 / this many bytes on disk; a larger file is taken as a batch of its own."""
TEXT_PER_GZIP_BYTE = 16
"""A gzip file's text per byte on disk, where its trailer cannot be read (a URL): Kineto traces inflate
10 to 20 times."""


def text_size(file: Location, size: int) -> int:
    """The JSON text `file` (of `size` bytes on disk) holds: its size; a gzip file's inflated size from its
    trailer (ISIZE); estimated from its size where the trailer cannot be read. For scheduling only, never a
    result: a file that cannot be read counts its size (the parse says what is wrong with it)."""
    if isinstance(file, Url):
        return size * TEXT_PER_GZIP_BYTE if str(file).endswith(".gz") else size
    try:
        if not stat.S_ISREG(os.stat(file).st_mode):  # a FIFO, socket or device: never opened here
            return size
        with Path(file).open("rb") as handle:
            if handle.read(2) != GZIP_MAGIC or size < 6:
                return size
            if size > (1 << 32) // GZIP_MOST_RATIO:
                return max(size * TEXT_PER_GZIP_BYTE, BATCH_TEXT_BYTES + 1)
            handle.seek(-4, 2)
            return max(int.from_bytes(handle.read(4), "little"), size)
    except OSError:
        return size


def batches_of_sizes(sizes: Sequence[int], workers: int | None = None) -> list[range]:
    """The positions of files holding `sizes` bytes of text (`text_size`) cut into consecutive batches of at
    most `BATCH_RANKS` files and `BATCH_TEXT_BYTES` together (a larger file alone), and, for a pool of
    `workers` processes (None: no pool), small enough that each worker gets at least four."""
    share = BATCH_RANKS if workers is None else len(sizes) // (4 * workers)
    most = max(1, min(BATCH_RANKS, share))
    starts: list[int] = []
    held = 0
    for index, size in enumerate(sizes):
        if not starts or index - starts[-1] >= most or held + size > BATCH_TEXT_BYTES:
            starts.append(index)
            held = 0
        held += size
    return [range(start, end) for start, end in zip(starts, [*starts[1:], len(sizes)], strict=True)]
