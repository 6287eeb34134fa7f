"""Event classes of docs/metrics.md section 2: every device event is compute, communication or memory.

Communication kernels are recognised by the kernel-name pattern table of `traceview.events.kernel_names` (plus
any patterns the user adds: `--comm-pattern` rows, and `--compute-pattern` rows that say a name is compute); a
name that only looks like communication is communication of library `suspected`. The decision is made once per
distinct kernel name and joined back.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from traceview.events.kernel_names import KernelPattern, decode_kernel_names
from traceview.events.kernel_table import HOST_LIBRARIES
from traceview.model.stacking import rank_column
from traceview.model.trace import RankTrace

EVENT_CLASSES = ("compute", "comm", "memory")
HOST_KIND = "host"
"""`kind` of the host collective ops added to a rank's device events (`traceview.collectives.comm_events`;
device rows are kernel, memcpy, memset): they are communication but not device activity."""
COMM_KINDS = ("device", "copy engine", "host")
"""Where communication runs (docs/metrics.md section 4): a device kernel, a copy-engine transfer (a memory
copy of a collective call), a host op (gloo, MPI: the data moves on the host). The budget's split of T_comm
counts each moment by the first kind, in this order, that covers it."""


def classify_gpu(trace: RankTrace, extra_patterns: Sequence[KernelPattern] = ()) -> pl.DataFrame:
    """The rank's device events with `rank`, `event_class` (compute | comm | memory), `comm_kind` (device, or
    host for the collective ops of a host timeline; null but for communication) and the decoded kernel-name
    fields (`comm_library`, `kernel_collective`, `algorithm`, `protocol`, `reduce_op`, `kernel_dtype`,
    `kernel_specialization`). The
    copy-engine transfers of collective calls are found later, when calls are linked
    (`traceview.collectives.comm_events`)."""
    return classify_gpus([trace], extra_patterns)


def classify_gpus(traces: Sequence[RankTrace], extra_patterns: Sequence[KernelPattern] = ()) -> pl.DataFrame:
    """`classify_gpu` of several ranks, one above the other, in one query (each rank's times as they are)."""
    gpu = pl.concat([trace.gpu for trace in traces])  # one trace: its own frame
    decoded = decode_kernel_names(gpu.get_column("name"), extra_patterns)
    return (
        gpu.lazy()
        .join(decoded.lazy(), on="name", how="left", maintain_order="left")
        .with_columns(rank_column(traces, [trace.gpu.height for trace in traces]), _EVENT_CLASS)
        .with_columns(_COMM_KIND)
        .drop("is_comm")
        .collect()
    )


_EVENT_CLASS = (
    pl.when(pl.col("kind") != "kernel")
    .then(pl.lit("memory"))
    .when(pl.col("is_comm").fill_null(False))
    .then(pl.lit("comm"))
    .otherwise(pl.lit("compute"))
    .alias("event_class")
)
_COMM_KIND = (
    pl.when(pl.col("event_class") == "comm")
    .then(
        pl.when(pl.col("comm_library").is_in(list(HOST_LIBRARIES)))
        .then(pl.lit("host"))
        .otherwise(pl.lit("device"))
    )
    .alias("comm_kind")
)
