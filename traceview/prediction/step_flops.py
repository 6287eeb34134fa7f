"""FLOPs per (rank, step) as the trace records them (docs/metrics.md, "Predicted gamma", FLOPs per step): the
profiler's `flops` args, and the FLOPs counted from the operators' shapes (`traceview.events.op_flops`), each
summed inside the CPU `ProfilerStep#N` windows; and whether the counted net is convolutional."""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from traceview.events.op_flops import CONV_FLOPS_MARK, SHAPE_FLOPS_MARK, op_flops
from traceview.model.trace import Run
from traceview.steps.windows import WHOLE_TRACE


def _cpu_steps(cpu: pl.DataFrame) -> pl.DataFrame:
    """CPU `ProfilerStep#N` windows of one rank: step, start_us, end_us."""
    marks = cpu.filter(pl.col("name").str.contains(r"^ProfilerStep#\d+$"))
    return (
        marks.select(
            pl.col("name").str.extract(r"#(\d+)$").cast(pl.Int64).alias("step"),
            "start_us",
            pl.col("end_us").alias("step_end_us"),
        )
        .unique("step")
        .sort("start_us")
    )


def in_cpu_steps(ops: pl.DataFrame, cpu: pl.DataFrame) -> pl.DataFrame:
    """`ops` with the `step` of the CPU ProfilerStep containing their start (WHOLE_TRACE without steps)."""
    steps = _cpu_steps(cpu)
    if steps.height == 0:
        return ops.with_columns(pl.lit(WHOLE_TRACE, dtype=pl.Int64).alias("step"))
    placed = ops.sort("start_us").join_asof(steps, on="start_us", check_sortedness=False)
    return placed.filter(pl.col("step").is_not_null() & (pl.col("start_us") < pl.col("step_end_us"))).drop(
        "step_end_us"
    )


def _per_step_sums(run: Run, rows: Callable[[pl.DataFrame], pl.DataFrame], column: str) -> pl.DataFrame:
    """Per (rank, step) the sum of `column` over the host rows `rows` selects (columns rank, step, flops)."""
    frames = []
    for trace in run:  # one frame per rank, no row loop
        ops = rows(trace.cpu).filter(pl.col(column).is_not_null() & (pl.col(column) > 0))
        if ops.height:
            placed = in_cpu_steps(ops.select("start_us", pl.col(column).alias("flops")), trace.cpu)
            steps = placed.group_by("step").agg(pl.col("flops").cast(pl.Float64).sum())
            frames.append(steps.with_columns(pl.lit(trace.rank, dtype=pl.Int64).alias("rank")))
    schema = {"rank": pl.Int64, "step": pl.Int64, "flops": pl.Float64}
    return pl.concat(frames).select(list(schema)).cast(schema) if frames else pl.DataFrame(schema=schema)  # type: ignore[arg-type]


def trace_flops(run: Run) -> pl.DataFrame:
    """FLOPs per (rank, step) from the operators' `flops` args (columns rank, step, flops); no rows when the
    trace recorded none."""
    marks = [SHAPE_FLOPS_MARK, CONV_FLOPS_MARK]
    return _per_step_sums(run, lambda cpu: cpu.filter(~pl.col("name").is_in(marks)), "flops")


def shape_flops(run: Run, family: str | None = None) -> pl.DataFrame:
    """FLOPs per (rank, step) counted from the operators' shapes (`traceview.events.op_flops`; a compact
    trace carries them as one `SHAPE_FLOPS_MARK` row per step, and `CONV_FLOPS_MARK` for the convolutions';
    `family` "convolution": those alone); no rows when no shape was recorded."""
    mark = CONV_FLOPS_MARK if family == "convolution" else SHAPE_FLOPS_MARK

    def rows(cpu: pl.DataFrame) -> pl.DataFrame:
        marked = cpu.filter(pl.col("name") == mark)
        if marked.height or cpu.filter(pl.col("name") == SHAPE_FLOPS_MARK).height:
            return marked
        counted = op_flops(cpu)
        counted = counted.filter(pl.col("flops_family") == family) if family else counted
        return counted.with_columns(pl.col("shape_flops").alias("flops"))

    return _per_step_sums(run, rows, "flops")


CONV_NET_SHARE = 0.1
"""A net whose convolutions make at least this share of its counted FLOPs is convolutional: 6 P b undercounts
it (its weights are reused at every position), so its counted FLOPs win over a stated P and b."""


def convolutional(counted: pl.DataFrame, run: Run) -> bool:
    """Whether the convolutions make `CONV_NET_SHARE` of the FLOPs counted from shapes."""
    total = float(counted.get_column("flops").sum()) if counted.height else 0.0
    conv = shape_flops(run, "convolution")
    conv_total = float(conv.get_column("flops").sum()) if conv.height else 0.0
    return total > 0 and conv_total >= CONV_NET_SHARE * total
