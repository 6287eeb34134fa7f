"""The host timeline: a rank whose trace holds no device activity (a CPU-only job, gloo on CPU tensors) is
analysed on its host operators (docs/metrics.md, "Host timeline").

`on_host_timeline(trace)` returns a trace with device events unchanged, and so a trace of a device job whose
device activity was not recorded (`DEVICE_BACKENDS`: its backend, or a collective op of such a backend,
`nccl:all_reduce`): its host ops only enqueue work, so it stays "no device activity". Any other trace without
device events is given a device frame made of its host operators, in the shape the device path reads, so
steps, the time budget, matching, stragglers, bubbles and the prediction run on it unchanged:

- communication rows: the rank's collective ops of the first family of `HOST_COMM_RULES` it records (the
  backend's own op that runs the collective on the host, `gloo:all_reduce`, else `record_param_comms`, named
  `record_param_comms:<collective>` there, else the `c10d::*` collective op), with their comm args;
- compute rows: the outermost host operators that neither are nor contain a collective call (any
  `traceview.core.vocab.CALL_FAMILIES` op, `c10d::wait` included), on every thread;
- each row is "launched" at its own start on its own thread (a runtime row with a fresh correlation id), so
  it links to the collective calls around it as a kernel does and belongs to the step it starts in.

The kernel-name table (`traceview.events.kernel_table.HOST_COLLECTIVE_PATTERNS`) classes the collective ops as
communication. The trace's `meta.timeline` becomes `host`, which the report states.
"""

from __future__ import annotations

from dataclasses import replace

import polars as pl

from traceview.core.vocab import (
    CALL_FAMILIES,
    CPU_ONLY_CALL,
    DEVICE_BACKENDS,
    DEVICE_CALL,
    canonical_collective_expr,
)
from traceview.events.gloo_pools import enqueued_collectives, pool_streams
from traceview.model.trace import CPU_SCHEMA, GPU_SCHEMA, RankTrace

HOST = "host"
DEVICE = "device"
HOST_COMM_RULES: tuple[tuple[str, str], ...] = (
    ("backend op", CPU_ONLY_CALL),
    ("record_param_comms", r"^record_param_comms$"),
    ("c10d op", r"^c10d::"),
)
"""(what, name regex) of the host ops that are communication, innermost first: a rank's communication rows are
the ops of the first rule that matches any of its ops (only ops naming a known collective, or carrying one in
their args)."""
LAUNCH_NAME = "traceview::host_launch"
"""Name of the runtime rows that launch the host timeline's rows (one per row, at its start)."""
CORRELATION_BASE = 1 << 48
"""Correlation ids of the host timeline's launches start here, above any id a profiler hands out."""
COMPUTE_STREAM, COMM_STREAM = 1, 0
"""The `stream` of compute and of communication rows: one lane each, equal on every rank (the matching's
fallback group when a call names no process group); a gloo op's stream is its worker pool's
(`traceview.events.gloo_pools`)."""


def _is_call() -> pl.Expr:
    """Is the host op a collective call of any family (`CALL_FAMILIES`)?"""
    return pl.any_horizontal(pl.col("name").str.contains(regex) for _, regex in CALL_FAMILIES)


def _comm_ops(ops: pl.LazyFrame) -> pl.LazyFrame:
    """The ops of the first `HOST_COMM_RULES` rule that matches a collective op of the rank."""
    named = pl.coalesce(
        canonical_collective_expr(pl.col("collective_name")), canonical_collective_expr(pl.col("name"))
    )
    matches = [pl.col("name").str.contains(regex) for _, regex in HOST_COMM_RULES]
    first_rule = pl.coalesce([pl.when(match.any()).then(match) for match in matches]).fill_null(False)
    return (
        ops.filter(named.is_not_null())
        .filter(first_rule)
        .with_columns(
            pl.when(pl.col("name") == "record_param_comms")
            .then(pl.format("record_param_comms:{}", pl.col("collective_name")))
            .otherwise(pl.col("name"))
            .alias("name")
        )
    )


def _compute_ops(ops: pl.LazyFrame) -> pl.LazyFrame:
    """The outermost operators, per thread, that neither are nor contain a collective call."""
    thread = ["pid", "tid"]
    calls = (
        ops.filter(_is_call()).select(*thread, pl.col("start_us").alias("_call_start")).sort("_call_start")
    )
    candidates = ops.filter((pl.col("kind") == "op") & ~_is_call()).sort("start_us")
    with_next_call = candidates.join_asof(
        calls,
        left_on="start_us",
        right_on="_call_start",
        by=thread,
        strategy="forward",
        check_sortedness=False,
    )
    holds_call = pl.col("_call_start").is_not_null() & (pl.col("_call_start") < pl.col("end_us"))
    kept = (
        with_next_call.filter(~holds_call)
        .drop("_call_start")
        .sort([*thread, "start_us", "end_us"], descending=[False, False, False, True], nulls_last=True)
    )
    reach = pl.col("end_us").cum_max().shift(1).over(thread)
    return kept.filter(reach.is_null() | (pl.col("start_us") >= reach))


def _device_rows(ops: pl.DataFrame, stream: int | pl.Series, first_id: int) -> pl.LazyFrame:
    """`ops` as device rows (`GPU_SCHEMA`) on `stream` (one, or one per row) with correlation ids from
    `first_id`."""
    columns = [c for c in GPU_SCHEMA if c in ops.columns and c not in ("kind", "correlation", "stream")]
    streams = pl.lit(stream, pl.Int64) if isinstance(stream, int) else pl.lit(stream).cast(pl.Int64)
    return (
        ops.lazy()
        .select(
            pl.lit("kernel").alias("kind"),
            *columns,
            pl.lit(None, pl.Int64).alias("device"),
            streams.alias("stream"),
            (pl.int_range(pl.len(), dtype=pl.Int64) + first_id).alias("correlation"),
        )
        .select([pl.col(c).cast(t) for c, t in GPU_SCHEMA.items()])
    )


def _launch_rows(ops: pl.DataFrame, first_id: int) -> pl.LazyFrame:
    """One runtime row per op, at its start on its own thread, with the correlation ids of `_device_rows`
    (`CPU_SCHEMA`)."""
    return (
        ops.lazy()
        .select(
            *[pl.lit(None, t).alias(c) for c, t in CPU_SCHEMA.items() if c not in _LAUNCH_COLUMNS],
            pl.lit("runtime", pl.Utf8).alias("kind"),
            pl.lit(LAUNCH_NAME, pl.Utf8).alias("name"),
            pl.col("start_us").cast(pl.Float64),
            pl.col("start_us").cast(pl.Float64).alias("end_us"),
            pl.col("pid").cast(pl.Utf8),
            pl.col("tid").cast(pl.Utf8),
            (pl.int_range(pl.len(), dtype=pl.Int64) + first_id).alias("correlation"),
        )
        .select(list(CPU_SCHEMA))
    )


_LAUNCH_COLUMNS = ("kind", "name", "start_us", "end_us", "pid", "tid", "correlation")


def on_host_timeline(trace: RankTrace) -> RankTrace:
    """`trace` itself when it holds device events (or has no host operators either); else the trace on its
    host timeline (module docstring), `meta.timeline` = `host`."""
    if trace.gpu.height or trace.meta.timeline == HOST or trace.meta.backend.lower() in DEVICE_BACKENDS:
        return trace
    found = trace.cpu.lazy().filter(pl.col("kind") != "runtime")
    device_call = found.select(pl.col("name").str.contains(DEVICE_CALL).any())
    ops, device_called, comm, compute = pl.collect_all(
        [found, device_call, _comm_ops(found), _compute_ops(found)],
    )
    if device_called.item():
        return trace
    if comm.height + compute.height == 0:
        return trace
    comm = comm.with_columns(enqueued_collectives(comm, ops))  # gloo's reduce-scatter runs as an all-reduce
    comm_stream = pool_streams(comm, ops, COMM_STREAM)  # a gloo op's stream is its worker pool's (gloo_pools)
    first_compute = CORRELATION_BASE + comm.height
    gpu = pl.concat(
        [
            _device_rows(comm, comm_stream, CORRELATION_BASE),
            _device_rows(compute, COMPUTE_STREAM, first_compute),
        ]
    )
    launches = [_launch_rows(comm, CORRELATION_BASE), _launch_rows(compute, first_compute)]
    cpu = pl.concat([trace.cpu.lazy(), *launches])
    gpu_rows, cpu_rows = pl.collect_all(
        [gpu.sort("start_us", maintain_order=True), cpu.sort("start_us", maintain_order=True)],
    )
    return replace(trace, gpu=gpu_rows, cpu=cpu_rows, meta=replace(trace.meta, timeline=HOST))
