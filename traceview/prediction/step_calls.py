"""The collective calls of every step (docs/metrics.md, "Predicted gamma", Calls): the communication rows of
one call collapsed into one, each placed in the (rank, step) window that contains its start. A pure function
of frames; `traceview.prediction.trace_facts` fills their group sizes.
"""

from __future__ import annotations

import polars as pl

from traceview.core.intervals import union_length


def _call_rows(kernels: pl.DataFrame) -> pl.DataFrame:
    """The rows of collective calls: those that move data, without the staging copies of host collectives."""
    keep = pl.lit(True)
    if "moves_data" in kernels.columns:
        keep = keep & pl.col("moves_data").fill_null(True)
    if "staging_copy" in kernels.columns:
        keep = keep & ~pl.col("staging_copy").fill_null(False)
    if "comm_kind" not in kernels.columns:
        kernels = kernels.with_columns(
            pl.when(pl.col("on_device")).then(pl.lit("device")).otherwise(pl.lit("host")).alias("comm_kind")
        )
    return kernels.filter(keep)


def _call_kind() -> pl.Expr:
    """Where a call ran: on the host when any of its rows did, else on a device kernel, else a copy engine."""
    kinds = pl.col("comm_kind")
    return (
        pl.when((kinds == "host").any())
        .then(pl.lit("host"))
        .when((kinds == "device").any())
        .then(pl.lit("device"))
        .otherwise(pl.lit("copy engine"))
        .alias("comm_kind")
    )


def step_calls(kernels: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """The collective calls of every step: the rows of one call collapsed (the call's duration is the union of
    its rows: host op and device work of one call count once; fields of its first row), each in the (rank,
    step) window that contains its start; calls outside every window are left out. Columns rank, step,
    start_us, dur_us, kernels, comm_kind (where the call ran: host, device, copy engine), collective, dtype,
    elem_size, size_bytes, group_size, pg_key, pg_ranks."""
    fields: tuple[str, ...] = (
        "collective",
        "dtype",
        "elem_size",
        "size_bytes",
        "group_size",
        "pg_key",
        "pg_ranks",
    )
    fields += ("group_size_assumed",) if "group_size_assumed" in kernels.columns else ()
    linked = pl.col("call_start_us").is_not_null()
    call = (
        pl.when(linked)
        .then(pl.format("{}@{}", "call_name", "call_start_us"))
        .otherwise(pl.format("k{}", "row"))
    )
    rows = _call_rows(kernels).with_row_index("row").with_columns(call.alias("call"))
    durations = union_length(rows.select("rank", "call", "start_us", "end_us"), ["rank", "call"], "dur_us")
    calls = (
        rows.group_by("rank", "call", maintain_order=True)
        .agg(
            pl.col("start_us").min(),
            pl.len().cast(pl.Int64).alias("kernels"),
            _call_kind(),
            *[pl.col(name).sort_by("start_us").first() for name in fields],
        )
        .join(durations, on=["rank", "call"], how="left")
    )
    starts = windows.select(
        pl.col("rank").cast(pl.Int64), pl.col("step").cast(pl.Int64), "window_start_us", "window_end_us"
    ).sort("window_start_us")
    placed = calls.sort("start_us", maintain_order=True).join_asof(
        starts, left_on="start_us", right_on="window_start_us", by="rank", check_sortedness=False
    )
    return (
        placed.filter(pl.col("step").is_not_null() & (pl.col("start_us") < pl.col("window_end_us")))
        .drop("call", "window_start_us", "window_end_us")
        .sort("rank", "step", "start_us", maintain_order=True)
    )
