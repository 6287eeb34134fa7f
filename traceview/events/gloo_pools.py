"""Which gloo process group ran a host collective op, where the trace names none (docs/metrics.md, "Host
timeline", process groups of gloo ops).

A gloo collective runs on a worker thread of its process group (`pt_gloo_runloop`); each `ProcessGroupGloo`
starts its `THREADS_PER_POOL` workers when it is created, one after the other, so their thread ids are
consecutive and groups created later have larger ids. A rank's worker threads are therefore cut into *pools*:
sorted thread ids, a new pool where an id is not the previous one plus 1 or where a pool already holds
`THREADS_PER_POOL` threads. Pool k (0-based, in thread order) is numbered stream `GLOO_POOL_STREAM + k` on the
host timeline: the matching's fallback group, equal across SPMD ranks that create their groups in the same
order, as NCCL's streams are. `traceview.collectives.calls` maps a pool to the rank's process group of the
same creation order when the counts leave one way to do it.
"""

from __future__ import annotations

import polars as pl

from traceview.core.vocab import CPU_ONLY_CALL

GLOO_POOL_STREAM = 100
"""The host timeline's stream of gloo pool 0; pool k is `GLOO_POOL_STREAM + k`."""
THREADS_PER_POOL = 2
"""Worker threads a `ProcessGroupGloo` starts (PyTorch's default `threads` option)."""


def pool_ordinals(ops: pl.DataFrame) -> pl.DataFrame:
    """`tid` -> `pool` (0-based) of the gloo worker threads among `ops` (host ops with `name`, `tid`)."""
    tids = (
        ops.filter(pl.col("name").str.contains(CPU_ONLY_CALL))
        .select(pl.col("tid").cast(pl.Int64, strict=False).alias("_tid"), "tid")
        .drop_nulls("_tid")
        .unique("_tid")
        .sort("_tid")
    )
    run = ((pl.col("_tid") - pl.col("_tid").shift(1)) != 1).fill_null(True).cum_sum()
    return (
        tids.with_columns(run.alias("_run"))
        .with_columns((pl.int_range(pl.len()).over("_run") // THREADS_PER_POOL).alias("_chunk"))
        .select(
            "tid",
            (pl.struct("_run", "_chunk").rank("dense") - 1).cast(pl.Int64).alias("pool"),
        )
    )


def pool_streams(ops: pl.DataFrame, default_stream: int) -> pl.Series:
    """The stream of each row of `ops` (in order): its gloo pool's, else `default_stream`."""
    pools = pool_ordinals(ops)
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
