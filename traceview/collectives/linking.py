"""Each communication kernel linked to the collective call it belongs to (docs/metrics.md, "Collectives"):
the candidates (`comm_anchors`), their calls (`linked_calls`) and the copy-engine transfers among the memory
copies (`with_copy_engine`). Used by `traceview.collectives.kernels`; every function adds to one lazy query
(the kernels' and the calls'), so the linking costs one query however many families and candidates.
"""

from __future__ import annotations

import functools

import polars as pl

from traceview.collectives.calls import CALL_COLUMNS, arg_fields
from traceview.core.vocab import CALL_FAMILIES, CPU_ONLY_CALL, DEVICE_CALL

LINKED_BY = ("kernel args", "correlation", "external id", "unlinked", "cpu call", "stream")
"""Values of `linked_by`; `cpu call` marks the rows of CPU-only (gloo) collective calls (the row is the
call); `stream` a copy-engine transfer known by the stream it runs on (a communication kernel's)."""

SPLITS = ("in_split", "out_split")
"""The all-to-all split sizes a kernel's or a call's args may carry."""

FAMILIES = tuple(family for family, _ in CALL_FAMILIES)


def _kernel_anchors(events: pl.LazyFrame, launches: pl.LazyFrame) -> pl.LazyFrame:
    """Each communication kernel and memory copy of `events`, with its own args prefixed `k_`, anchored at
    its launch."""
    return (
        events.with_row_index("event_row")
        .filter((pl.col("event_class") == "comm") | (pl.col("kind") == "memcpy"))
        .select(*_anchor_columns())
        .join(launches, on=["rank", "correlation"], how="left", maintain_order="left")
        .with_columns(pl.lit(True).alias("on_device"), pl.col("launch_us").alias("anchor_us"))
    )


@functools.cache
def _anchor_columns() -> tuple[pl.Expr | str, ...]:
    """The columns of a kernel anchor: the event's own, its args prefixed `k_`."""
    return (
        "rank",
        "name",
        "kind",
        "start_us",
        "end_us",
        "stream",
        "correlation",
        "external_id",
        "algorithm",
        "protocol",
        "reduce_op",
        "kernel_collective",
        "kernel_dtype",
        "kernel_specialization",
        "comm_library",
        "comm_kind",
        pl.col("event_row").cast(pl.Int64),
        pl.lit(None, pl.Utf8).alias("host_tid"),
        pl.col("collective_name").is_not_null().alias("has_args"),
        *[expr.name.prefix("k_") for expr in arg_fields()],
        *[pl.col(c).name.prefix("k_") for c in ("group_size", "pg_name", "pg_desc", "seq", *SPLITS)],
    )


def comm_anchors(
    events: pl.LazyFrame, calls: pl.LazyFrame, launches: pl.LazyFrame, host_ranks: list[int]
) -> pl.LazyFrame:
    """One row per candidate result row: each communication kernel and each memory copy (a copy-engine
    transfer when it is a collective's: `with_copy_engine`), with its own args prefixed `k_` and anchored at
    its launch, and each CPU-only call (anchored at its own start) of a rank not on its host timeline
    (`host_ranks`, whose CPU-only calls are already kernels there). `event_row` is the row's position in
    `events`; `anchor_id` numbers the candidates."""
    cpu_only = calls.filter(
        (pl.col("family") == "backend")
        & pl.col("name").str.contains(CPU_ONLY_CALL)
        & ~pl.col("rank").is_in(host_ranks)
    ).select(
        "rank",
        "name",
        "start_us",
        "end_us",
        "pid",
        "tid",
        pl.col("start_us").alias("anchor_us"),
        pl.lit(False).alias("on_device"),
        pl.lit(False).alias("has_args"),
        pl.lit("host").alias("comm_kind"),
        pl.col("tid").alias("host_tid"),
    )
    both = pl.concat([_kernel_anchors(events, launches), cpu_only], how="diagonal_relaxed")
    return both.with_row_index("anchor_id")


COMMUNICATOR_LIBRARIES = ("nccl", "rccl", "msccl")
"""Libraries whose kernels run on a communicator's own streams: a copy on such a stream may be one of the
library's copy-engine collectives (NCCL >= 2.28 launches none but batched copies). PyTorch's symmetric memory,
custom all-reduce and the expert-parallel libraries run on the caller's (compute) stream."""


def with_copy_engine(frame: pl.LazyFrame, user_copies: pl.LazyFrame) -> pl.LazyFrame:
    """The linked candidates with the memory copies that are not a collective's left out. A copy is a
    copy-engine transfer (`comm_kind` copy engine) when what launched it says so: its launch lies inside a
    collective call (`linked_by` correlation: NCCL's own calls, `cudaMemcpyBatchAsync` or stream memory
    operations of a collective), or (`stream`) it runs on a communicator's stream (one carrying kernels of
    `COMMUNICATOR_LIBRARIES`) and was not launched by the user's code (`user_copies`: a launch inside a
    PyTorch operator such as `aten::copy_`); never by its name."""
    is_copy = pl.col("kind") == "memcpy"
    comm_streams = (
        frame.filter(
            ~is_copy
            & pl.col("on_device")
            & pl.col("stream").is_not_null()
            & pl.col("comm_library").is_in(COMMUNICATOR_LIBRARIES)
        )
        .select("rank", "stream", pl.lit(True).alias("_comm_stream"))
        .unique()
    )
    joined = frame.join(comm_streams, on=["rank", "stream"], how="left", maintain_order="left").join(
        user_copies, on=["rank", "correlation"], how="left", maintain_order="left"
    )
    by_call = pl.col("linked_by") == "correlation"
    by_stream = pl.col("_comm_stream").fill_null(False) & ~pl.col("user_copy").fill_null(False)
    device_call = pl.col("backend_name").str.contains(DEVICE_CALL).fill_null(False)
    return (
        joined.filter(~is_copy.fill_null(False) | by_call | by_stream)
        .with_columns(
            pl.when(is_copy & ~by_call)
            .then(pl.lit("stream"))
            .otherwise(pl.col("linked_by"))
            .alias("linked_by"),
            pl.when(is_copy).then(pl.lit("copy engine")).otherwise(pl.col("comm_kind")).alias("comm_kind"),
            (is_copy & by_call & ~device_call).fill_null(False).alias("staging_copy"),
            pl.coalesce(  # a host op's thread: its own, or on a host timeline the thread that "launched" it
                pl.col("host_tid"), pl.when(pl.col("comm_kind") == "host").then(pl.col("tid"))
            ).alias("host_tid"),
        )
        .drop("_comm_stream", "user_copy")
    )


def _link_family(anchors: pl.LazyFrame, calls: pl.LazyFrame, family: str) -> pl.LazyFrame:
    """`anchor_id`, `<family>_in`: the innermost call of `family` that contains the anchor on its pid/tid (an
    as-of join on the start, then the end checked), `<family>_ext`: the call of `family` with the same
    External id."""
    keys = ["rank", "pid", "tid"]
    own = calls.filter(pl.col("family") == family).select(
        *keys,
        "call_row",
        "external_id",
        pl.col("start_us").alias("anchor_us"),
        pl.col("end_us").alias("_end"),
    )
    timed = (
        anchors.filter(pl.col("anchor_us").is_not_null())
        .select("anchor_id", *keys, "anchor_us")
        .sort("anchor_us")
    )
    inside = timed.join_asof(
        own.drop("external_id").sort("anchor_us"),
        on="anchor_us",
        by=keys,
        strategy="backward",
        check_sortedness=False,
    ).select(
        "anchor_id",
        pl.when(pl.col("anchor_us") <= pl.col("_end")).then(pl.col("call_row")).alias(f"{family}_in"),
    )
    by_id = (
        own.drop_nulls("external_id")
        .unique(["rank", "external_id"], keep="first")
        .select("rank", "external_id", pl.col("call_row").alias(f"{family}_ext"))
    )
    return (
        anchors.select("anchor_id", "rank", "external_id")
        .join(inside, on="anchor_id", how="left", maintain_order="left")
        .join(by_id, on=["rank", "external_id"], how="left", maintain_order="left")
        .drop("rank", "external_id")
    )


def _linked_by(any_in: pl.Expr, any_ext: pl.Expr) -> pl.Expr:
    """How a candidate was linked (`LINKED_BY`, before the copy engine is told apart)."""
    return (
        pl.when(~pl.col("on_device"))
        .then(pl.lit("cpu call"))
        .when(pl.col("has_args"))
        .then(pl.lit("kernel args"))
        .when(any_in)
        .then(pl.lit("correlation"))
        .when(any_ext)
        .then(pl.lit("external id"))
        .otherwise(pl.lit("unlinked"))
        .alias("linked_by")
    )


def linked_calls(anchors: pl.LazyFrame, calls: pl.LazyFrame) -> pl.LazyFrame:
    """Anchors with `linked_by` and, per family, the linked call's fields prefixed `<family>_`."""
    frame = anchors
    for family in FAMILIES:
        frame = frame.join(
            _link_family(anchors, calls, family), on="anchor_id", how="left", maintain_order="left"
        )
    linked_by, rows = _link_choice()
    frame = frame.with_columns(linked_by).with_columns(rows)
    fields = calls.select(CALL_COLUMNS)
    for family in FAMILIES:
        frame = frame.join(
            fields.select(pl.all().name.prefix(f"{family}_")),
            left_on=f"{family}_row",
            right_on=f"{family}_call_row",
            how="left",
            maintain_order="left",
        )
    return frame


@functools.cache
def _link_choice() -> tuple[pl.Expr, tuple[pl.Expr, ...]]:
    """`linked_by`, and per family the row of the linked call (`<family>_row`: the call around the anchor,
    else the call of its External id)."""
    any_in = pl.any_horizontal(pl.col(f"{f}_in").is_not_null() for f in FAMILIES)
    any_ext = pl.any_horizontal(pl.col(f"{f}_ext").is_not_null() for f in FAMILIES)
    rows = tuple(
        pl.when(any_in).then(pl.col(f"{f}_in")).otherwise(pl.col(f"{f}_ext")).alias(f"{f}_row")
        for f in FAMILIES
    )
    return _linked_by(any_in, any_ext), rows
