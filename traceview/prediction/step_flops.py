"""FLOPs per (rank, step) as the trace records them (docs/metrics.md, "Predicted gamma", FLOPs per step): the
profiler's `flops` args, and the FLOPs counted from the operators' shapes (`traceview.events.op_flops`), each
summed inside the CPU `ProfilerStep#N` windows; and whether the counted net is convolutional."""

from __future__ import annotations

import polars as pl

from traceview.events.op_flops import CONV_FLOPS_MARK, SHAPE_FLOPS_MARK, op_flops
from traceview.model.stacking import ranked_frame
from traceview.model.trace import RankTrace, Run
from traceview.steps.windows import STEP_MARK, WHOLE_TRACE

FLOPS_SCHEMA = pl.Schema({"rank": pl.Int64(), "step": pl.Int64(), "flops": pl.Float64()})


def _cpu_steps(cpu: pl.LazyFrame) -> pl.LazyFrame:
    """CPU `ProfilerStep#N` windows of every rank of `cpu` (every rank's host rows, `ranked_frame`): rank,
    step, start_us, step_end_us (a step marked twice: its first mark)."""
    return (
        cpu.filter(pl.col("name").str.contains(STEP_MARK))
        .select(
            "rank",
            pl.col("name").str.extract(r"#(\d+)$").cast(pl.Int64).alias("step"),
            "start_us",
            pl.col("end_us").alias("step_end_us"),
        )
        .sort("start_us")
        .unique(["rank", "step"], keep="first", maintain_order=True)
    )


def in_cpu_steps(ops: pl.LazyFrame, cpu: pl.LazyFrame) -> pl.LazyFrame:
    """`ops` (with `rank`) with the `step` of their rank's CPU ProfilerStep (in `cpu`, `ranked_frame`)
    containing their start; others dropped; every op of a rank without CPU steps in step WHOLE_TRACE."""
    steps = _cpu_steps(cpu)
    stepped = steps.group_by("rank").agg(pl.len().alias("_steps"))
    placed = (
        ops.sort("start_us")
        .join_asof(steps, on="start_us", by="rank", check_sortedness=False)
        .join(stepped, on="rank", how="left")
    )
    inside = pl.col("step").is_not_null() & (pl.col("start_us") < pl.col("step_end_us"))
    stepless = pl.col("_steps").is_null()
    step = pl.when(stepless).then(WHOLE_TRACE).otherwise(pl.col("step")).cast(pl.Int64)
    return placed.filter(stepless | inside).with_columns(step.alias("step")).drop("step_end_us", "_steps")


def _per_step_sums(ops: pl.LazyFrame, cpu: pl.LazyFrame) -> pl.DataFrame:
    """Per (rank, step) the sum of the `flops` of `ops` (rank, start_us, flops) that count (columns rank,
    step, flops), every rank in one query."""
    counted = ops.filter(pl.col("flops").is_not_null() & (pl.col("flops") > 0))
    sums = in_cpu_steps(counted, cpu).group_by("rank", "step").agg(pl.col("flops").cast(pl.Float64).sum())
    return sums.select(list(FLOPS_SCHEMA)).cast(FLOPS_SCHEMA).sort("rank", "step").collect()


def trace_flops(run: Run) -> pl.DataFrame:
    """FLOPs per (rank, step) from the operators' `flops` args (columns rank, step, flops); no rows when the
    trace recorded none."""
    cpu = ranked_frame(run, "cpu").lazy()
    ops = cpu.filter(~pl.col("name").is_in([SHAPE_FLOPS_MARK, CONV_FLOPS_MARK]))
    return _per_step_sums(ops.select("rank", "start_us", "flops"), cpu)


def shape_flops(run: Run, family: str | None = None) -> pl.DataFrame:
    """FLOPs per (rank, step) counted from the operators' shapes (`traceview.events.op_flops`; a compact
    trace carries them as one `SHAPE_FLOPS_MARK` row per step, and `CONV_FLOPS_MARK` for the convolutions';
    `family` "convolution": those alone); no rows when no shape was recorded."""
    mark = CONV_FLOPS_MARK if family == "convolution" else SHAPE_FLOPS_MARK
    cpu = ranked_frame(run, "cpu").lazy()
    marked = cpu.filter(pl.col("name") == mark).select("rank", "start_us", "flops")
    uncounted = [trace for trace in run if not trace.compact and not _has_mark(trace)]
    return _per_step_sums(pl.concat([marked, *(_counted(trace, family) for trace in uncounted)]), cpu)


def _has_mark(trace: RankTrace) -> bool:
    return trace.cpu.filter(pl.col("name") == SHAPE_FLOPS_MARK).height > 0


def _counted(trace: RankTrace, family: str | None) -> pl.LazyFrame:
    """The FLOPs of a whole trace's operators from their shapes (a compact trace has them counted)."""
    counted = op_flops(trace.cpu)
    counted = counted.filter(pl.col("flops_family") == family) if family else counted
    rank = pl.lit(trace.rank, pl.Int64).alias("rank")
    return counted.lazy().select(rank, "start_us", pl.col("shape_flops").cast(pl.Float64).alias("flops"))


CONV_NET_SHARE = 0.1
"""A net whose convolutions make at least this share of its counted FLOPs is convolutional: 6 P b undercounts
it (its weights are reused at every position), so its counted FLOPs win over a stated P and b."""


def convolutional(counted: pl.DataFrame, run: Run) -> bool:
    """Whether the convolutions make `CONV_NET_SHARE` of the FLOPs counted from shapes."""
    total = float(counted.get_column("flops").sum()) if counted.height else 0.0
    conv = shape_flops(run, "convolution")
    conv_total = float(conv.get_column("flops").sum()) if conv.height else 0.0
    return total > 0 and conv_total >= CONV_NET_SHARE * total
