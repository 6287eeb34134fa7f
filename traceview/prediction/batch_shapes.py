"""b, the local batch, from the input shapes the profiler recorded (docs/metrics.md, "Predicted gamma"): the
first operator of each CPU step that a rule of `BATCH_SHAPE_RULES` matches gives b from one of its input
shapes; the run's b is the median over (rank, step). Every rank in one query per rule."""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from traceview.model.stacking import ranked_frame
from traceview.model.trace import Run
from traceview.prediction.step_flops import in_cpu_steps

BATCH_SHAPE_RULES: tuple[tuple[str, int, str], ...] = (
    # (operator name regex, input argument, how the batch is read from its shape)
    (r"^aten::embedding$", 1, "all"),  # token ids [b, s]: b * s tokens
    (r"^aten::conv[123]d$", 0, "first"),  # [b, C, H, W]: b examples
    (r"^aten::linear$", 0, "all_but_last"),  # [b, s, h]: b * s tokens (6 P b counts tokens)
)
"""The first operator of a step matching a rule gives b from its input shape."""


_BATCH_READERS: dict[str, Callable[[pl.Expr], pl.Expr]] = {
    "first": lambda shape: shape.list.first(),
    "all": lambda shape: shape.list.eval(pl.element().product()).list.first(),
    "all_but_last": lambda shape: (
        shape.list.head(shape.list.len() - 1).list.eval(pl.element().product()).list.first()
    ),
}


def _rule_batches(cpu: pl.DataFrame, pattern: str, argument: int, reading: str) -> pl.LazyFrame | None:
    """Per operator of every rank of `cpu` (every rank's host rows, `ranked_frame`) matching one batch rule:
    rank, start_us, batch, rule; None when no rank has one. A rank whose shapes do not decode is left out
    (the others decoded together)."""
    ops = cpu.filter(pl.col("name").str.contains(pattern) & pl.col("input_dims").is_not_null())
    if ops.height == 0:
        return None
    shape = (
        pl.col("input_dims").str.json_decode(pl.List(pl.List(pl.Int64))).list.get(argument, null_on_oob=True)
    )
    try:
        dims = ops.with_columns(shape.alias("shape"))
    except pl.exceptions.PolarsError:  # some rank's shapes do not decode: each rank alone
        dims = pl.concat([_decoded(part, shape) for part in ops.partition_by("rank", maintain_order=True)])
    return (
        dims.lazy()
        .filter(pl.col("shape").list.len() > 0)
        .select("rank", "start_us", _BATCH_READERS[reading](pl.col("shape")).alias("batch"))
        .with_columns(pl.lit(pattern).alias("rule"))
    )


def _decoded(ops: pl.DataFrame, shape: pl.Expr) -> pl.DataFrame:
    try:
        return ops.with_columns(shape.alias("shape"))
    except pl.exceptions.PolarsError:
        return ops.clear().with_columns(pl.lit(None, pl.List(pl.Int64)).alias("shape"))


def batch_from_shapes(run: Run) -> tuple[float | None, str]:
    """b from the input shape of each step's first operator matched by `BATCH_SHAPE_RULES` (median over
    (rank, step)), and the operator used; (None, "") when the traces recorded no such shape."""
    cpu = ranked_frame(run, "cpu")
    rules = [_rule_batches(cpu, *rule) for rule in BATCH_SHAPE_RULES]
    found = [in_cpu_steps(batches, cpu.lazy()) for batches in rules if batches is not None]
    if not found:
        return None, ""
    placed = pl.concat(found).sort("start_us")
    firsts = placed.group_by("rank", "step").agg(pl.all().first()).collect()
    if firsts.height == 0:
        return None, ""
    rule = str(firsts["rule"].mode().sort()[0])
    return float(firsts["batch"].median()), rule.strip("^$").replace("[123]", "N")  # type: ignore[arg-type]
