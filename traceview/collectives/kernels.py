"""Every communication kernel linked to its collective call, with bytes, algbw and busbw (docs/metrics.md
section 2 and "Collectives").

`comm_kernels(run, events)` returns one row per communication kernel per rank (and one per CPU-only gloo
collective call, `on_device=False`) with the columns of `COMM_KERNEL_SCHEMA`, a contract other analyses build
on (cross-rank matching, the alpha-beta prediction).

Linking, per kernel (all vectorised: joins and `join_asof`):

1. `kernel args`: newer traces copy the call's args (`Collective name`, `In msg nelems`, ...) onto the kernel.
2. `correlation`: the kernel's correlation id names its runtime launch; the collective calls that contain the
   launch on the same pid/tid are found by an as-of join on the start time plus an end-time check, one join
   per call family (`CALL_FAMILIES`): the `c10d::*` operator, `record_param_comms` and the backend annotation
   (`nccl:*`, `gloo:*`, ...), which nest in that order.
3. `external id`: a kernel whose launch no call contains (or is not in the trace) is matched to a call with
   the same `External id`.

Each field is then taken from the first source that has it (`kernel args`, `record_param_comms`, the backend
annotation, the `c10d::*` operator, the kernel name: see `_merged_fields`). Old traces without comm args get
their bytes from `Input Dims` and `Input type` (every tensor of a backend annotation is an input, so coalesced
calls sum their tensors; `c10d::*` base operators name their output and input tensors, `C10D_TENSOR_ARGS`).
The process group comes from the args, else `distributedInfo.pg_config` (by name, the only group, or the
only group of that size). Whatever stays unknown is null, never guessed.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import polars as pl

from traceview.collectives.calls import collective_calls, launches, makes_calls
from traceview.collectives.groups import config_groups_query, with_process_groups, without_process_groups
from traceview.collectives.linking import FAMILIES, SPLITS, comm_anchors, linked_calls, with_copy_engine
from traceview.collectives.user_copies import USER_COPY_SCHEMA, user_copy_launches
from traceview.core.costmodel import bandwidth_exprs, size_expr
from traceview.core.vocab import CPU_ONLY_CALL, dtype_size_expr
from traceview.events.kernel_names import DECODED_SCHEMA
from traceview.model.trace import GPU_SCHEMA, Run

COMM_KERNEL_SCHEMA: Mapping[str, pl.DataType] = {
    "rank": pl.Int64(),
    "name": pl.Utf8(),
    "start_us": pl.Float64(),
    "end_us": pl.Float64(),
    "dur_us": pl.Float64(),
    "stream": pl.Int64(),
    "correlation": pl.Int64(),
    "on_device": pl.Boolean(),
    "collective": pl.Utf8(),
    "algorithm": pl.Utf8(),
    "protocol": pl.Utf8(),
    "reduce_op": pl.Utf8(),
    "dtype": pl.Utf8(),
    "elem_size": pl.Int64(),
    "in_bytes": pl.Int64(),
    "out_bytes": pl.Int64(),
    "size_bytes": pl.Int64(),
    "group_size": pl.Int64(),
    "pg_key": pl.Utf8(),
    "pg_name": pl.Utf8(),
    "pg_desc": pl.Utf8(),
    "pg_ranks": pl.Utf8(),
    "seq": pl.Int64(),
    "call_name": pl.Utf8(),
    "call_start_us": pl.Float64(),
    "call_end_us": pl.Float64(),
    "launch_us": pl.Float64(),
    "linked_by": pl.Utf8(),
    "algbw_Bps": pl.Float64(),
    "busbw_Bps": pl.Float64(),
}
"""The per-kernel contract: these columns, in this order, with these types."""

EXTRA_SCHEMA: Mapping[str, pl.DataType] = {
    "bytes_source": pl.Utf8(),  # kernel args | call args (record_param_comms) | input dims | null
    "pg_source": pl.Utf8(),  # args | pg_config name | pg_config only group | pg_config size | null
    "call_kernels": pl.Int64(),  # kernels linked to the same call on the rank (1 for unlinked kernels)
    "first_in_call": pl.Boolean(),  # the call's first kernel: count calls and bytes on these rows only
    "comm_kind": pl.Utf8(),  # device | copy engine | host (traceview.events.classify.COMM_KINDS)
    "moves_data": pl.Boolean(),  # false for a copy or host op of a group of one rank: it moves nothing
    "event_row": pl.Int64(),  # the row's position in the classified events (null for a host op)
    "host_tid": pl.Utf8(),  # the host thread of a host op (null for device rows)
    "group_size_assumed": pl.Boolean(),  # n is the world size: the call names no group (the default assumed)
    # a copy of a host collective's data (gloo with device tensors): part of its
    "staging_copy": pl.Boolean(),
    # communication time, not a call of its own
    "in_split": pl.Utf8(),  # an all-to-all's split sizes (`In split size`, rows of dim 0), null when unsaid
    "out_split": pl.Utf8(),
    # the NCCL >= 2.19 kernel a name says it was compiled for (`RING_LL`): not the algorithm that ran
    "kernel_specialization": pl.Utf8(),
    "algorithm_source": pl.Utf8(),  # where `algorithm`/`protocol` come from: kernel_name | null (unknown)
}
"""Columns after the contract ones: where bytes and group came from, and the call each kernel belongs to."""


KERNEL_NAME_SOURCE = "kernel_name"
"""`algorithm_source` of an algorithm/protocol read from a kernel name that says what ran (NCCL <= 2.18, RCCL
specialized kernels); the NCCL_DEBUG log and NCCL Inspector are the other sources."""


def _first(column: str, sources: tuple[str, ...]) -> pl.Expr:
    return pl.coalesce([pl.col(f"{source}_{column}") for source in sources])


def _merged_fields(frame: pl.LazyFrame) -> pl.LazyFrame:
    """Each field from its first source: the kernel's args, then record_param_comms, the backend annotation,
    the c10d op (bytes from args before bytes from Input Dims), the kernel name last."""
    return frame.with_columns(*_merged_exprs())


@functools.cache
def _merged_exprs() -> tuple[pl.Expr, ...]:
    """The columns of `_merged_fields` (built once: they depend on no argument)."""
    args, calls, families = ("k", "rpc", "backend", "c10d"), ("rpc", "backend", "c10d"), FAMILIES
    args_in, args_out = _first("in_bytes", args), _first("out_bytes", args)
    dims_in, dims_out = _first("dims_in", calls), _first("dims_out", calls)
    return (
        pl.coalesce(_first("collective", args), pl.col("kernel_collective")).alias("collective"),
        pl.when(pl.col("algorithm").is_not_null() | pl.col("protocol").is_not_null())
        .then(pl.lit(KERNEL_NAME_SOURCE))
        .alias("algorithm_source"),
        pl.coalesce(_first("dtype", args), _first("dims_dtype", calls), pl.col("kernel_dtype")).alias(
            "dtype"
        ),
        pl.coalesce(args_in, dims_in).alias("in_bytes"),
        pl.coalesce(args_out, dims_out).alias("out_bytes"),
        pl.when(pl.col("k_in_bytes").is_not_null() | pl.col("k_out_bytes").is_not_null())
        .then(pl.lit("kernel args"))
        .when(args_in.is_not_null() | args_out.is_not_null())
        .then(pl.lit("call args"))
        .when(dims_in.is_not_null() | dims_out.is_not_null())
        .then(pl.lit("input dims"))
        .alias("bytes_source"),
        *[_first(c, args).alias(c) for c in ("group_size", "pg_name", "pg_desc", "pg_ranks", "seq")],
        *[_listed(_first(c, args)).alias(c) for c in SPLITS],
        pl.coalesce(pl.col(f"{f}_name") for f in families).alias("call_name"),
        pl.coalesce(pl.col(f"{f}_start_us") for f in families).alias("call_start_us"),
        pl.coalesce(pl.col(f"{f}_end_us") for f in families).alias("call_end_us"),
    )


def _listed(splits: pl.Expr) -> pl.Expr:
    """Split sizes as written (`"[3, 5]"`); null for an empty list (`"[]"`: an even split)."""
    return pl.when(splits.str.contains(r"\d")).then(splits)


def _group_size_from_shapes() -> pl.Expr:
    """n where the args do not say it: the number of ranks listed, else the AllGather output / input ratio
    (ReduceScatter input / output), which the collective fixes exactly."""
    ins, outs = pl.col("in_bytes"), pl.col("out_bytes")
    ratio = (
        pl.when((pl.col("collective") == "AllGather") & (ins > 0) & (outs % ins == 0))
        .then(outs // ins)
        .when((pl.col("collective") == "ReduceScatter") & (outs > 0) & (ins % outs == 0))
        .then(ins // outs)
    )
    counted = pl.col("pg_ranks").str.count_matches(r"-?\d+").cast(pl.Int64)
    return pl.coalesce(pl.col("group_size"), pl.when(counted > 0).then(counted), ratio).alias("group_size")


def _bandwidths() -> tuple[pl.Expr, ...]:
    """algbw and busbw of each kernel (t its duration), by `costmodel.bandwidth_exprs` (docs/metrics.md,
    "Collectives")."""
    algbw, busbw = bandwidth_exprs(
        pl.col("collective"), pl.col("group_size"), pl.col("size_bytes"), pl.col("dur_us")
    )
    return (algbw.alias("algbw_Bps"), busbw.alias("busbw_Bps"))


POINT_TO_POINT = ("SendRecv", "Send", "Recv")
"""Collectives of two ranks whatever their group: their n is 2."""


def _default_group() -> tuple[pl.Expr, ...]:
    """n where neither the args nor the shapes say it: 2 for point to point; for a call of no named process
    group (PyTorch before 1.13 records none), the world size: the default group is assumed
    (`group_size_assumed`), as the prediction assumes it, so busbw and the model read one n."""
    unnamed = (
        pl.col("group_size").is_null()
        & pl.col("pg_name").is_null()
        & pl.col("pg_ranks").is_null()
        & ~pl.col("collective").is_in(POINT_TO_POINT).fill_null(False)
        & pl.col("world_size").is_not_null()
    )
    return (
        pl.coalesce(
            pl.col("group_size"),
            pl.when(pl.col("collective").is_in(POINT_TO_POINT)).then(pl.lit(2, pl.Int64)),
            pl.when(unnamed).then(pl.col("world_size")),
        ).alias("group_size"),
        unnamed.alias("group_size_assumed"),
    )


def _world_sizes(run: Run) -> pl.DataFrame:
    """`rank`, `world_size` (null when the trace does not say) of every rank of `run`."""
    rows = [(trace.rank, trace.meta.world_size) for trace in run]
    return pl.DataFrame(rows, schema={"rank": pl.Int64, "world_size": pl.Int64}, orient="row")


def _moves_data() -> pl.Expr:
    """False for a copy-engine transfer or a host op of a collective among one rank (its group size, else the
    world size, is 1): a collective at world size 1 moves nothing (NCCL runs no kernel for it; gloo copies
    locally). Device kernels are communication by their name."""
    alone = pl.coalesce(pl.col("group_size"), pl.col("world_size")) == 1
    on_host_or_copy = pl.col("comm_kind").is_in(["copy engine", "host"])
    return (~(on_host_or_copy & alone.fill_null(False))).alias("moves_data")


def _call_membership() -> tuple[pl.Expr, ...]:
    """How many kernels share the row's call, and whether the row is the call's first (unlinked: alone)."""
    call = ["rank", "call_name", "call_start_us"]
    linked = pl.col("call_start_us").is_not_null()
    return (
        pl.when(linked).then(pl.len().over(call)).otherwise(1).cast(pl.Int64).alias("call_kernels"),
        (
            pl.when(linked).then(pl.col("start_us").rank("ordinal").over(call) == 1).otherwise(True)
            & ~pl.col("staging_copy").fill_null(False)
        ).alias("first_in_call"),
    )


_EVENT_SCHEMA: Mapping[str, pl.DataType] = {
    **GPU_SCHEMA,
    **{c: t for c, t in DECODED_SCHEMA.items() if c not in ("name", "is_comm")},
    "rank": pl.Int64(),
    "event_class": pl.Utf8(),
    "comm_kind": pl.Utf8(),
}


def _with_event_columns(events: pl.DataFrame) -> pl.LazyFrame:
    """`events` with every column of classified events (an empty run gives a frame without columns)."""
    missing = [pl.lit(None, dtype).alias(c) for c, dtype in _EVENT_SCHEMA.items() if c not in events.columns]
    return events.lazy().with_columns(missing)


@functools.cache
def _no_comm_kernels() -> pl.DataFrame:
    return pl.DataFrame(schema={**COMM_KERNEL_SCHEMA, **EXTRA_SCHEMA})


def empty_comm_kernels() -> pl.DataFrame:
    """A frame with no rows and the columns of `COMM_KERNEL_SCHEMA` then `EXTRA_SCHEMA`."""
    return _no_comm_kernels().clone()


def _has_comm(events: pl.DataFrame) -> bool:
    """Whether an event is classed communication (without one, and without a collective call, there is no
    candidate: a memory copy is a collective's only by its call or by a communication kernel's stream)."""
    return "event_class" in events.columns and bool((events.get_column("event_class") == "comm").any())


def _kernel_figures(merged: pl.LazyFrame, run: Run, pools: bool) -> pl.LazyFrame:
    """The linked rows with their process group, n, bytes, call membership and bandwidths, in the columns of
    `COMM_KERNEL_SCHEMA` then `EXTRA_SCHEMA`, sorted by rank and start (`pools`: whether a row is a CPU-only
    op, whose group its worker pool may tell)."""
    grouped = (
        with_process_groups(merged, config_groups_query(run), pools)
        if any(trace.meta.process_groups for trace in run)
        else without_process_groups(merged)
    )
    frame = grouped.join(_world_sizes(run).lazy(), on="rank", how="left", maintain_order="left")
    for stage in _figure_stages():
        frame = frame.with_columns(*stage)
    return frame.select(_contract_columns()).sort("rank", "start_us", maintain_order=True)


@functools.cache
def _figure_stages() -> tuple[tuple[pl.Expr, ...], ...]:
    """The columns `_kernel_figures` adds, stage by stage (each reads those before it)."""
    return (
        (_group_size_from_shapes(), (pl.col("end_us") - pl.col("start_us")).alias("dur_us")),
        _default_group(),
        (
            size_expr(),
            dtype_size_expr(pl.col("dtype")).alias("elem_size"),
            pl.coalesce(pl.col("pg_name"), pl.col("pg_ranks"), pl.lit("unknown")).alias("pg_key"),
            *_call_membership(),
        ),
        _bandwidths(),
        (_moves_data(),),
    )


@functools.cache
def _contract_columns() -> tuple[pl.Expr, ...]:
    """The columns of `COMM_KERNEL_SCHEMA` then `EXTRA_SCHEMA`, each cast to its type."""
    return tuple(pl.col(c).cast(t) for c, t in {**COMM_KERNEL_SCHEMA, **EXTRA_SCHEMA}.items())


def comm_kernels(run: Run, events: pl.DataFrame, launch_rows: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per communication kernel per rank, and per CPU-only (gloo) collective call, linked to its call.

    `events` is `traceview.budget.time_budget.classified_events(run, patterns)`, `launch_rows` is
    `traceview.collectives.calls.launches(run)` (computed here when not given). Columns: `COMM_KERNEL_SCHEMA`,
    then `EXTRA_SCHEMA`; rows sorted by rank and start. Unknown values are null (see the module docstring).
    Four queries: the calls, the candidates, their links, their figures (each reads the frames before it);
    none for a rank without a communication event or a host op named like a call (`makes_calls`)."""
    if not run.ranks or not (_has_comm(events) or makes_calls(run)):
        return empty_comm_kernels()
    calls = collective_calls(run).lazy()
    host_ranks = [trace.rank for trace in run if trace.meta.timeline == "host"]
    launch_rows = launches(run) if launch_rows is None else launch_rows
    anchors = comm_anchors(_with_event_columns(events), calls, launch_rows.lazy(), host_ranks).collect()
    if anchors.height == 0:
        return empty_comm_kernels()
    copies = anchors.filter(pl.col("kind") == "memcpy")  # the only rows whose launch `user_copies` judges
    user_copies = (
        user_copy_launches(run, copies) if copies.height else pl.DataFrame(schema=USER_COPY_SCHEMA)
    ).lazy()
    linked = with_copy_engine(linked_calls(anchors.lazy(), calls), user_copies).collect()
    if linked.height == 0:
        return empty_comm_kernels()
    pools = bool(linked.get_column("name").str.contains(CPU_ONLY_CALL).any())
    return _kernel_figures(_merged_fields(linked.lazy()), run, pools).collect()
