"""The map's compact host trace of a rank (`traceview.map.rank_summary`): its step marks, the first operator
of each step matching each batch-shape rule, and per step the FLOPs its operators carry and those counted from
their shapes; the rows the model's inputs read in the reduce, never its device events.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache

import polars as pl

from traceview.events.op_flops import (
    CONV_FLOPS_MARK,
    SHAPE_FLOPS_MARK,
    counted_families,
    counted_ops,
    with_flops,
)
from traceview.model.trace import CPU_SCHEMA, GPU_SCHEMA, NO_SYNCS, RankTrace, empty_frame
from traceview.prediction.batch_shapes import BATCH_SHAPE_RULES
from traceview.steps.windows import STEP_MARK

FLOPS_MARK = "traceview::step_flops"
"""Name of the synthetic host op that carries the FLOPs of one CPU step in a compact trace."""

FLOPS_ROW = ("kind", "name", "start_us", "end_us", "flops")
"""The columns of a step's FLOPs row in a compact trace (the others null)."""


def _step_of(ops: pl.LazyFrame, steps: pl.DataFrame, stepped: pl.Expr) -> pl.LazyFrame:
    """`ops` with the CPU step (`step`) of `steps` (`_steps`) of their rank whose mark contains their start,
    others dropped; the ops of ranks without steps (`stepped` false) every one, in their order, at step -1."""
    placed = (
        ops.filter(stepped)
        .sort("start_us", maintain_order=True)
        .join_asof(
            steps.lazy(), left_on="start_us", right_on="_step_start", by="rank", check_sortedness=False
        )
        .filter(pl.col("step").is_not_null() & (pl.col("start_us") < pl.col("_step_end")))
        .drop("_step_start", "_step_end")
    )
    unplaced = ops.filter(~stepped).with_columns(pl.lit(-1, dtype=pl.Int64).alias("step"))
    return pl.concat([placed, unplaced])


def _steps(marks: pl.LazyFrame) -> pl.LazyFrame:
    """The CPU steps of the step `marks`: `rank`, `step`, `_step_start`, `_step_end`, by start."""
    return marks.select(
        "rank",
        pl.col("name").str.extract(r"#(\d+)$").cast(pl.Int64).alias("step"),
        pl.col("start_us").alias("_step_start"),
        pl.col("end_us").alias("_step_end"),
    ).sort("_step_start")


def _step_flops(
    ops: pl.LazyFrame, steps: pl.DataFrame, stepped: pl.Expr, column: str, name: str
) -> pl.LazyFrame:
    """One host row per rank and CPU step named `name`, at the step's first such operator, carrying the sum
    of the operators' `column` as its `flops` (columns `rank` and `FLOPS_ROW`)."""
    placed = _step_of(ops.filter(pl.col(column).is_not_null() & (pl.col(column) > 0)), steps, stepped)
    rows = placed.group_by("rank", "step").agg(
        pl.col("start_us").min(),
        pl.col("start_us").min().alias("end_us"),
        pl.col(column).sum().cast(CPU_SCHEMA["flops"]).alias("flops"),
    )
    return rows.select("rank", pl.lit("op").alias("kind"), pl.lit(name).alias("name"), *FLOPS_ROW[2:])


_BATCH_RULES = [
    pl.col("name").str.contains(pattern) & pl.col("input_dims").is_not_null()
    for pattern, _, _ in BATCH_SHAPE_RULES
]
_ANY_BATCH_RULE = pl.any_horizontal(*_BATCH_RULES)
_BATCH_RULES_MATCHED = (
    pl.concat_list([pl.when(rule).then(pl.lit(i)) for i, rule in enumerate(_BATCH_RULES)])
    .list.drop_nulls()
    .alias("_rule")
)


def _batch_rows(ops: pl.LazyFrame, steps: pl.DataFrame, stepped: pl.Expr) -> pl.LazyFrame:
    """The first operator of each rank's step matching each of `BATCH_SHAPE_RULES`, rule after rule; the
    operators any rule may use are placed in their steps once."""
    return (
        _step_of(ops.filter(_ANY_BATCH_RULE), steps, stepped)
        .with_columns(_BATCH_RULES_MATCHED)
        .explode("_rule")
        .group_by("rank", "_rule", "step", maintain_order=True)
        .first()
        .sort("rank", "_rule", maintain_order=True)
        .drop("_rule", "step")
    )


@lru_cache(maxsize=8)
def _cpu_casts(columns: tuple[str, ...]) -> list[pl.Expr]:
    """The select that puts a frame with `columns` in `CPU_SCHEMA` and its `rank`, the columns it lacks null
    (built once per set of columns)."""
    casts = [pl.col(c).cast(t) if c in columns else pl.lit(None, t).alias(c) for c, t in CPU_SCHEMA.items()]
    return [*casts, pl.col("rank")]


_MARKED = pl.col("name").str.contains(STEP_MARK)


def compact_inputs(cpu: pl.DataFrame) -> list[pl.LazyFrame]:
    """What `compact_cpu` reads first of the host rows `cpu` (with `rank`, of one or many ranks): the step
    marks, their steps and the operators counted (`traceview.events.op_flops.counted_ops`), for a caller to
    collect with other queries."""
    marked = cpu.lazy().filter(_MARKED)
    return [marked, _steps(marked), counted_ops(cpu.lazy(), cpu.columns)]


def compact_cpu(cpu: pl.DataFrame, inputs: Sequence[pl.DataFrame]) -> pl.LazyFrame:
    """The host rows the model's inputs read, per rank of `cpu` (host rows with `rank`): step marks, the
    first operator of each step matching each batch rule, and per step three FLOPs rows at its first such
    operator: the sum of its operators' `flops`, the FLOPs counted from operator shapes
    (`traceview.events.op_flops`) and the convolutions' share of those. `inputs`: `compact_inputs(cpu)`
    collected. A lazy query; its rows by rank, then start, with `rank` and `CPU_SCHEMA`'s columns."""
    marks, steps, found = inputs
    stepped = pl.col("rank").is_in(
        pl.Series([steps.get_column("rank")])
    )  # as one list, built without a query
    flop_rows = []  # each only where an operator carries its FLOPs (else no row)
    if (cpu.get_column("flops") > 0).any():
        flop_rows.append(_step_flops(cpu.lazy(), steps, stepped, "flops", FLOPS_MARK))
    if found.height:
        counted = with_flops(found)
        flop_rows.append(_step_flops(counted, steps, stepped, "shape_flops", SHAPE_FLOPS_MARK))
        if "convolution" in counted_families(found):
            conv = counted.filter(pl.col("flops_family") == "convolution")
            flop_rows.append(_step_flops(conv, steps, stepped, "shape_flops", CONV_FLOPS_MARK))
    host_rows = pl.concat([marks.lazy(), _batch_rows(cpu.lazy(), steps, stepped)], how="diagonal")
    if cpu.schema != {**CPU_SCHEMA, "rank": pl.Int64()}:  # else already in it
        host_rows = host_rows.select(_cpu_casts(tuple(cpu.columns)))
    parts = [host_rows, *([pl.concat(flop_rows).select(_cpu_casts(FLOPS_ROW))] if flop_rows else [])]
    return pl.concat(parts).sort("rank", "start_us", maintain_order=True)


def compacted(trace: RankTrace, cpu: pl.DataFrame) -> RankTrace:
    """The compact trace: `trace` without its device events, with the host rows `cpu` (`compact_cpu`) and
    marked `compact` (its shape FLOPs counted, so that the reduce never counts them again)."""
    return replace(trace, gpu=_NO_DEVICE_EVENTS, cpu=cpu, compact=True, syncs=NO_SYNCS)


_NO_DEVICE_EVENTS = empty_frame(GPU_SCHEMA)  # shared: a frame is never changed in place
