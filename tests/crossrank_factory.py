"""Frames in the `comm_kernels` contract (traceview.across_ranks.matching.KERNEL_COLUMNS), built directly for
cross-rank tests."""

from __future__ import annotations

from typing import Any

import polars as pl

KERNEL_SCHEMA: dict[str, Any] = {
    "rank": pl.Int64,
    "name": pl.Utf8,
    "start_us": pl.Float64,
    "end_us": pl.Float64,
    "dur_us": pl.Float64,
    "stream": pl.Int64,
    "correlation": pl.Int64,
    "on_device": pl.Boolean,
    "collective": pl.Utf8,
    "algorithm": pl.Utf8,
    "protocol": pl.Utf8,
    "reduce_op": pl.Utf8,
    "dtype": pl.Utf8,
    "elem_size": pl.Int64,
    "in_bytes": pl.Int64,
    "out_bytes": pl.Int64,
    "size_bytes": pl.Int64,
    "group_size": pl.Int64,
    "pg_key": pl.Utf8,
    "pg_name": pl.Utf8,
    "pg_desc": pl.Utf8,
    "pg_ranks": pl.Utf8,
    "seq": pl.Int64,
    "call_name": pl.Utf8,
    "call_start_us": pl.Float64,
    "call_end_us": pl.Float64,
    "launch_us": pl.Float64,
    "linked_by": pl.Utf8,
    "algbw_Bps": pl.Float64,
    "busbw_Bps": pl.Float64,
}


def comm(
    rank: int,
    start: float,
    end: float,
    pg: str | None = "pg0",
    ranks: str | None = "[0, 1]",
    collective: str = "AllReduce",
    size: int | None = 1024,
    seq: int | None = None,
    launch: float | None = None,
    stream: int = 20,
    out: int | None = None,
    dtype: str | None = None,
) -> dict[str, Any]:
    """One communication kernel row: `size` bytes in (and out, unless `out` says otherwise); every other
    contract column is null."""
    row: dict[str, Any] = dict.fromkeys(KERNEL_SCHEMA)
    row.update(
        rank=rank,
        name=f"ncclKernel_{collective}",
        start_us=start,
        end_us=end,
        dur_us=end - start,
        stream=stream,
        on_device=True,
        collective=collective,
        size_bytes=size,
        pg_key=pg,
        pg_name=pg,
        pg_ranks=ranks,
        seq=seq,
        launch_us=launch,
        call_start_us=launch,
        in_bytes=size,
        out_bytes=size if out is None else out,
        dtype=dtype,
    )
    return row


def kernels(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """A `comm_kernels` frame from rows made by `comm`."""
    return pl.DataFrame(rows, schema=KERNEL_SCHEMA)


def windows(ranks: list[int], steps: list[tuple[int, float, float]]) -> pl.DataFrame:
    """The same step windows (step, start, end) on every rank."""
    rows = [(rank, step, start, end) for rank in ranks for step, start, end in steps]
    return pl.DataFrame(
        rows,
        schema={
            "rank": pl.Int64,
            "step": pl.Int64,
            "window_start_us": pl.Float64,
            "window_end_us": pl.Float64,
        },
        orient="row",
    )
