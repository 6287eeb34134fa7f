"""Which gloo process group ran a host collective op, where the trace names none (docs/metrics.md, "Host
timeline", process groups of gloo ops).

A gloo collective runs on a worker thread of its process group (`pt_gloo_runloop`); each `ProcessGroupGloo`
starts its `THREADS_PER_POOL` workers when it is created, one after the other, so their thread ids are
consecutive unless another process took ids between them, and groups created later have larger ids: ids
count up from the process's own and wrap past the kernel's `pid_max` to small ones, so a thread's creation
order is its id's distance past the process id, modulo the wrap (`_creation_order`). A rank's
worker threads (the threads of its gloo ops that run no `c10d::*` op: a send or a receive runs on the calling
thread) are therefore cut into *pools*: threads that ran an op of the same name and shapes are one pool (a
group's calls land on either of its workers); a thread left alone is paired with the next lone thread in
thread order (`THREADS_PER_POOL` a pool: FSDP's gathers may run on one worker, its reduce-scatters on the
other). Pool k (0-based, by its first thread id) is numbered stream `GLOO_POOL_STREAM + k` on the host
timeline: the matching's fallback group, equal across SPMD ranks that create their groups in the same order,
as NCCL's streams are. `traceview.collectives.calls` maps a pool to the rank's process group of the
same creation order when the counts leave one way to do it.
"""

from __future__ import annotations

import polars as pl

from traceview.core.vocab import CPU_ONLY_CALL

GLOO_POOL_STREAM = 100
"""The host timeline's stream of gloo pool 0; pool k is `GLOO_POOL_STREAM + k`."""
CALLER_OPS = r"^c10d::|^ProfilerStep#"
"""Ops that run on a calling thread (the one that enqueues collectives), never on a gloo worker."""
THREADS_PER_POOL = 2
"""Worker threads a `ProcessGroupGloo` starts (PyTorch's default `threads` option)."""
PID_SPAN = 1 << 22
"""Linux's largest `pid_max`: a thread id below its process's id was handed out after the ids wrapped."""


def _creation_order(columns: list[str]) -> pl.Expr:
    """The order in which a process started its threads: the thread id's distance past the process id (`pid`,
    when `columns` hold it), ids below it (given out after the kernel's ids wrapped) after every other."""
    tid = pl.col("tid").cast(pl.Int64, strict=False)
    if "pid" not in columns:
        return tid
    past = tid - pl.col("pid").cast(pl.Int64, strict=False)
    return pl.coalesce(pl.when(past >= 0).then(past).otherwise(past + PID_SPAN), tid)


def pool_ordinals(ops: pl.DataFrame, threads: pl.DataFrame | None = None) -> pl.DataFrame:
    """`tid` -> `pool` (0-based) of the gloo worker threads among `ops` (host ops with `name`, `tid`): the
    threads that run gloo ops but no `c10d::*` op and no step annotation of `threads` (every host op): a send
    or a receive runs on the calling thread, which enqueues the rest and is no worker."""
    gloo = pl.col("name").str.contains(CPU_ONLY_CALL)
    caller = pl.col("name").str.contains(CALLER_OPS)
    callers = (threads if threads is not None else ops).filter(caller).select("tid")
    workers = (
        ops.filter(gloo)
        .join(callers.unique(), on="tid", how="anti")
        .with_columns(_creation_order(ops.columns).alias("_born"))
        .drop_nulls("_born")
    )
    tids = workers.select("_born", "tid").unique("_born").sort("_born")
    alone = tids.with_columns(pl.int_range(pl.len()).cast(pl.Int64).alias("_pool"))
    signatures = workers.select(
        "tid", pl.concat_str("name", pl.col("input_dims").fill_null("")).alias("_sig")
    )
    merged = _paired(_merged(alone, signatures.unique()))
    first = merged.group_by("_pool").agg(pl.col("_born").min().alias("_first"))
    return merged.join(first, on="_pool").select(
        "tid", (pl.col("_first").rank("dense") - 1).cast(pl.Int64).alias("pool")
    )


def _paired(merged: pl.DataFrame) -> pl.DataFrame:
    """Threads alone in their pool (no op shared with another) paired with the next such thread in thread
    order, `THREADS_PER_POOL` a pool, when no larger pool lies between them: a group whose two workers each
    ran a collective of its own (FSDP's gathers on one, its reduce-scatters on the other)."""
    sizes = merged.group_by("_pool").agg(pl.len().alias("_size"), pl.col("_born").min().alias("_first"))
    ordered = sizes.sort("_first").with_columns(
        (pl.col("_size") > 1).cum_sum().alias("_block"), (pl.col("_size") == 1).alias("_single")
    )
    singles = ordered.filter(pl.col("_single")).with_columns(
        (pl.int_range(pl.len()).over("_block") // THREADS_PER_POOL).alias("_pair")
    )
    lead = singles.group_by("_block", "_pair").agg(pl.col("_pool").min().alias("_lead"))
    renamed = singles.join(lead, on=["_block", "_pair"]).select("_pool", "_lead")
    return (
        merged.join(renamed, on="_pool", how="left")
        .with_columns(pl.coalesce("_lead", "_pool").alias("_pool"))
        .drop("_lead")
    )


def _merged(chunks: pl.DataFrame, signatures: pl.DataFrame) -> pl.DataFrame:
    """`chunks` (tid, _pool) with pools that share a signature (an op of one name and shapes) made one: the
    smallest pool number of each connected set, by repeated relabelling until nothing changes."""
    labelled = chunks
    for _ in range(len(chunks) + 1):
        edges = (
            signatures.join(labelled.select("tid", "_pool"), on="tid")
            .group_by("_sig")
            .agg(pl.col("_pool").min().alias("_low"), pl.col("_pool").unique().alias("_pools"))
        )
        lowest = edges.explode("_pools").group_by("_pools").agg(pl.col("_low").min())
        relabelled = (
            labelled.join(lowest, left_on="_pool", right_on="_pools", how="left")
            .with_columns(pl.min_horizontal("_pool", "_low").alias("_pool"))
            .drop("_low")
        )
        if relabelled.sort("tid").get_column("_pool").equals(labelled.sort("tid").get_column("_pool")):
            return relabelled
        labelled = relabelled
    return labelled


def pool_streams(ops: pl.DataFrame, threads: pl.DataFrame, default_stream: int) -> pl.Series:
    """The stream of each row of `ops` (in order): its gloo pool's, else `default_stream` (`threads`: every
    host op of the rank, which tell the calling threads from the workers)."""
    pools = pool_ordinals(ops, threads)
    placed = ops.select("tid").with_row_index("_row").join(pools, on="tid", how="left").sort("_row")
    return (
        placed.select((pl.col("pool") + GLOO_POOL_STREAM).fill_null(default_stream).cast(pl.Int64))
        .to_series()
        .alias("stream")
    )


def pool_of_stream(stream: pl.Expr) -> pl.Expr:
    """The gloo pool a host-timeline stream stands for (null for any other stream)."""
    return pl.when(stream >= GLOO_POOL_STREAM).then(stream - GLOO_POOL_STREAM)


ENQUEUED_AS: tuple[tuple[str, str, str], ...] = (
    # (gloo op, the c10d op that enqueued it, the collective the row then is)
    (
        "gloo:all_reduce",
        r"^c10d::(?:_reduce_scatter_base_|reduce_scatter_tensor_coalesced_|reduce_scatter_)$",
        "reduce_scatter",
    ),
)
"""gloo ops that run another collective: gloo has no reduce-scatter of its own, and its worker runs the
`c10d::_reduce_scatter_base_` enqueued on the main thread as an all-reduce of the full input."""
_TENSOR = r"\[[-0-9,\s]*\d[-0-9,\s]*\]"


def enqueued_collectives(comm: pl.DataFrame, ops: pl.DataFrame) -> pl.Series:
    """Per row of `comm` (in order): the collective of the c10d op that enqueued it when `ENQUEUED_AS` says it
    ran as another (the latest such op on any thread that started at or before it and names a tensor of the
    row's shape, with no op of the row's own kind between), else the row's own `collective_name`."""
    own = comm.with_row_index("_row").with_columns(
        pl.col("input_dims").str.extract(r"^\[\s*(" + _TENSOR + r")").alias("_shape")
    )
    found = own.select("_row", "collective_name")
    for gloo, enqueuing, collective in ENQUEUED_AS:
        kin = ops.filter(pl.col("name").str.contains(r"^c10d::") & pl.col("input_dims").is_not_null())
        tensors = (
            kin.select(
                "start_us",
                pl.col("name").str.contains(enqueuing).alias("_other"),
                pl.col("input_dims").str.extract_all(_TENSOR).alias("_shape"),
            )
            .explode("_shape")
            .drop_nulls("_shape")
            .sort("start_us")
        )
        rows = own.filter(pl.col("name") == gloo).drop_nulls("_shape").sort("start_us")
        placed = rows.join_asof(
            tensors, on="start_us", by="_shape", strategy="backward", check_sortedness=False
        )
        upgraded = placed.filter(pl.col("_other").fill_null(False)).select(
            "_row", pl.lit(collective).alias("_new")
        )
        found = found.join(upgraded, on="_row", how="left").select(
            "_row", pl.coalesce("_new", "collective_name").alias("collective_name")
        )
    return found.sort("_row").get_column("collective_name")
