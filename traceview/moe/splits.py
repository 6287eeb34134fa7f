"""Each rank's all-to-all calls with their split sizes (the map's share of docs/metrics.md, "MoE balance"),
for a batch of ranks at once.

Per all-to-all call (its first on-device kernel): rank, step, group, start, duration, the split sizes it sent
and received (`In split size` / `Out split size`: rows of dim 0 per member of the group, in the group's rank
order) and its bytes. Where the kernels carry no splits but the rank's `c10d::alltoall_base_` ops do (gloo:
the worker's op is not linked to the call that enqueued it), the k-th such op gives the k-th all-to-all's
splits, when the rank has as many of one as of the other.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from traceview.across_ranks.matching import group_expr
from traceview.core.vocab import dtype_size_expr

ALLTOALL_CALL = r"^c10d::alltoall_base_$"
SPLIT_SCHEMA: Mapping[str, pl.DataType] = {
    "rank": pl.Int64(),
    "step": pl.Int64(),
    "group": pl.Utf8(),
    "pg_ranks": pl.Utf8(),
    "start_us": pl.Float64(),
    "dur_us": pl.Float64(),
    "in_split": pl.Utf8(),
    "out_split": pl.Utf8(),
    "in_bytes": pl.Int64(),
    "out_bytes": pl.Int64(),
}


def _tensor_bytes(index: int) -> pl.Expr:
    """The bytes of argument `index` of an op's `Input Dims` and `Input type` (`_op_dims`, `_op_types`; null
    when not a tensor)."""
    dims = pl.col("_op_dims").str.json_decode(pl.List(pl.List(pl.Int64))).list.get(index, null_on_oob=True)
    kind = pl.col("_op_types").str.json_decode(pl.List(pl.Utf8)).list.get(index, null_on_oob=True)
    return dims.list.eval(pl.element().product()).list.first() * dtype_size_expr(kind)


_NAMED_OP = pl.col("name").str.contains(ALLTOALL_CALL) & pl.col("in_split").is_not_null()
_ORDINAL = pl.int_range(pl.len()).over("rank").alias("_k")
_OP_COLUMNS = {
    "in_split": "_op_in",
    "out_split": "_op_out",
    "input_dims": "_op_dims",
    "input_types": "_op_types",
}


def _from_calls(rows: pl.LazyFrame, cpu: pl.DataFrame) -> pl.LazyFrame:
    """`rows` (each rank's, sorted by start) with the splits of their rank's `c10d::alltoall_base_` ops, the
    k-th op's to the k-th row, for the ranks whose rows have none and as many ops as rows; their bytes from
    the op's tensors (output, input), which it names unambiguously. One query for a batch of ranks."""
    ops = (
        cpu.lazy()
        .filter(_NAMED_OP)
        .select("rank", "start_us", *_OP_COLUMNS)
        .sort("rank", "start_us")
        .select("rank", _ORDINAL, *(pl.col(column).alias(alias) for column, alias in _OP_COLUMNS.items()))
    )
    counted = rows.group_by("rank").agg(pl.len().alias("_rows"), pl.col("in_split").is_not_null().any())
    op_counts = ops.group_by("rank").agg(pl.len().alias("_ops"))
    agree = ~pl.col("in_split") & (pl.col("_rows") == pl.col("_ops"))  # no splits of its own, counts equal
    taking = counted.join(op_counts, on="rank").filter(agree)
    return (
        rows.with_columns(_ORDINAL)
        .join(
            ops.join(taking.select("rank"), on="rank", how="semi"),
            on=["rank", "_k"],
            how="left",
            maintain_order="left",
        )
        .with_columns(
            pl.coalesce("in_split", "_op_in").alias("in_split"),
            pl.coalesce("out_split", "_op_out").alias("out_split"),
            pl.coalesce(_tensor_bytes(1), pl.col("in_bytes")).alias("in_bytes"),
            pl.coalesce(_tensor_bytes(0), pl.col("out_bytes")).alias("out_bytes"),
        )
        .drop("_k", *_OP_COLUMNS.values())
    )


_ALLTOALL_KERNEL = pl.col("first_in_call") & pl.col("on_device") & (pl.col("collective") == "AllToAll")
_EMPTY_SPLITS = pl.DataFrame(schema=SPLIT_SCHEMA)


def alltoall_calls(kernels: pl.DataFrame) -> pl.LazyFrame:
    """The first query of the rank's splits, for a caller to collect with others: the all-to-all calls (their
    first on-device kernel) with their `group`."""
    return kernels.lazy().filter(_ALLTOALL_KERNEL).with_columns(group_expr().alias("group"))


def has_alltoall(kernels: pl.DataFrame) -> bool:
    """Whether any of `kernels` is an all-to-all's (no query: a column comparison)."""
    return bool((kernels.get_column("collective") == "AllToAll").any())


def batch_splits(calls: pl.DataFrame | None, cpu: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """The all-to-all calls of a batch of ranks in their step windows, with their splits (module docstring),
    from the collected `alltoall_calls` (None: no rank has any, `has_alltoall`), the batch's host rows and
    step windows (each with `rank`); one query."""
    if calls is None or calls.height == 0 or windows.height == 0:
        return _EMPTY_SPLITS.clear()
    placed = _from_calls(calls.lazy().sort("rank", "start_us"), cpu).join_asof(
        windows.lazy().select("rank", "step", "window_start_us", "window_end_us").sort("window_start_us"),
        left_on="start_us",
        right_on="window_start_us",
        by="rank",
        check_sortedness=False,
    )
    inside = pl.col("step").is_not_null() & (pl.col("start_us") < pl.col("window_end_us"))
    return placed.filter(inside).select([pl.col(c).cast(t) for c, t in SPLIT_SCHEMA.items()]).collect()
