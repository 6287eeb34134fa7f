"""One rank's all-to-all calls with their split sizes (the map's share of docs/metrics.md, "MoE balance").

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


def _from_calls(rows: pl.DataFrame, cpu: pl.DataFrame) -> pl.LazyFrame:
    """`rows` with the splits of the rank's `c10d::alltoall_base_` ops, in order, where the rows have none and
    the counts agree; their bytes from the op's tensors (output, input), which it names unambiguously."""
    if rows.height == 0 or rows.get_column("in_split").is_not_null().any():
        return rows.lazy()
    named = pl.col("name").str.contains(ALLTOALL_CALL) & pl.col("in_split").is_not_null()
    ops = cpu.lazy().filter(named).sort("start_us").collect()
    if ops.height != rows.height:
        return rows.lazy()
    taken = {
        "in_split": "in_split",
        "out_split": "out_split",
        "input_dims": "_op_dims",
        "input_types": "_op_types",
    }
    return (
        rows.lazy()
        .sort("start_us")
        .with_columns(ops.get_column(column).alias(name) for column, name in taken.items())
        .with_columns(
            pl.coalesce(_tensor_bytes(1), pl.col("in_bytes")).alias("in_bytes"),
            pl.coalesce(_tensor_bytes(0), pl.col("out_bytes")).alias("out_bytes"),
        )
        .drop("_op_dims", "_op_types")
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


def splits_of(calls: pl.DataFrame | None, cpu: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """The rank's all-to-all calls in its step windows, with their splits (module docstring), from the
    collected `alltoall_calls` (None: the rank has none, `has_alltoall`)."""
    if calls is None or calls.height == 0 or windows.height == 0:
        return _EMPTY_SPLITS.clear()
    placed = (
        _from_calls(calls, cpu)
        .sort("start_us")
        .join_asof(
            windows.lazy().select("rank", "step", "window_start_us", "window_end_us").sort("window_start_us"),
            left_on="start_us",
            right_on="window_start_us",
            by="rank",
            check_sortedness=False,
        )
    )
    inside = pl.col("step").is_not_null() & (pl.col("start_us") < pl.col("window_end_us"))
    return placed.filter(inside).select([pl.col(c).cast(t) for c, t in SPLIT_SCHEMA.items()]).collect()
