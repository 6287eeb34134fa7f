"""Event classes of docs/metrics.md section 2: every device event is compute, communication or memory.

Communication kernels are recognised by the kernel-name pattern table of `traceview.events.kernel_names` (plus any
patterns the user adds: `--comm-pattern` rows, and `--compute-pattern` rows that say a name is compute); a name
that only looks like communication is communication of library `suspected`. The decision is made once per
distinct kernel name and joined back.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from traceview.events.kernel_names import KernelPattern, decode_kernel_names
from traceview.model.trace import RankTrace

EVENT_CLASSES = ("compute", "comm", "memory")


def classify_gpu(trace: RankTrace, extra_patterns: Sequence[KernelPattern] = ()) -> pl.DataFrame:
    """The rank's device events with `rank` and `event_class` (compute | comm | memory) and the decoded
    kernel-name fields (`comm_library`, `kernel_collective`, `algorithm`, `protocol`, `reduce_op`,
    `kernel_dtype`)."""
    gpu = trace.gpu
    decoded = decode_kernel_names(gpu.get_column("name").unique(), extra_patterns)
    return (
        gpu.join(decoded, on="name", how="left")
        .with_columns(
            pl.lit(trace.rank, dtype=pl.Int64).alias("rank"),
            pl.when(pl.col("kind") != "kernel")
            .then(pl.lit("memory"))
            .when(pl.col("is_comm").fill_null(False))
            .then(pl.lit("comm"))
            .otherwise(pl.lit("compute"))
            .alias("event_class"),
        )
        .drop("is_comm")
    )
