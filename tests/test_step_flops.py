"""FLOPs per (rank, step) and b from shapes, every rank in one query: each rank's host rows placed in its own
CPU steps (a rank without steps: one WHOLE_TRACE step), a rank whose shapes do not decode left out alone."""

from __future__ import annotations

from typing import Any

import polars as pl

from traceview.model.trace import CPU_SCHEMA, GPU_SCHEMA, STEP_SCHEMA, RankTrace, Run, TraceMeta, empty_frame
from traceview.prediction.batch_shapes import batch_from_shapes
from traceview.prediction.step_flops import trace_flops
from traceview.steps.windows import WHOLE_TRACE


def host(rank: int, rows: list[dict[str, Any]]) -> RankTrace:
    """A rank whose host rows are `rows` (name, start_us, end_us, and any other CPU column)."""
    filled = [{"kind": "op", **row} for row in rows]
    cpu = pl.DataFrame(filled, schema_overrides=dict(CPU_SCHEMA)).select(
        pl.col(c) if c in filled[0] else pl.lit(None, t).alias(c) for c, t in CPU_SCHEMA.items()
    )
    meta = TraceMeta(rank=rank, rank_source="distributedInfo")
    return RankTrace(f"rank-{rank}", meta, empty_frame(GPU_SCHEMA), cpu, empty_frame(STEP_SCHEMA), "cpu")


def step(n: int, start: float, end: float) -> dict[str, Any]:
    return {"name": f"ProfilerStep#{n}", "start_us": start, "end_us": end, "flops": None, "input_dims": None}


def op(name: str, start: float, flops: float | None = None, dims: str | None = None) -> dict[str, Any]:
    return {"name": name, "start_us": start, "end_us": start + 1.0, "flops": flops, "input_dims": dims}


def test_each_rank_in_its_own_steps_and_a_stepless_rank_whole() -> None:
    stepped = host(
        0,
        [
            *(step(1, 0, 100), step(2, 100, 200)),
            *(op("aten::mm", 10, 10.0), op("aten::mm", 150, 20.0), op("aten::mm", 60, 4.0)),
            op("aten::mm", 250, 5.0),  # after every step: dropped
        ],
    )
    stepless = host(1, [op("aten::mm", 5, 7.0), op("aten::mm", 500, 3.0), op("aten::add", 6)])
    found = trace_flops(Run(ranks=(stepped, stepless)))
    assert found.rows() == [(0, 1, 10.0 + 4.0), (0, 2, 20.0), (1, WHOLE_TRACE, 7.0 + 3.0)]


def test_batch_from_each_step_first_operator_and_a_rank_that_does_not_decode() -> None:
    rank0 = host(
        0,
        [
            *(step(1, 0, 100), step(2, 100, 200), op("aten::linear", 10, dims="[[4, 16, 8], [8, 8]]")),
            *(
                op("aten::linear", 20, dims="[[99, 1, 8], [8, 8]]"),
                op("aten::linear", 110, dims="[[2, 3, 8]]"),
            ),
        ],
    )
    rank1 = host(1, [step(1, 0, 100), op("aten::linear", 30, dims="[[6, 5, 8]]")])
    broken = host(2, [step(1, 0, 100), op("aten::linear", 40, dims="not a shape")])
    batch, rule = batch_from_shapes(Run(ranks=(rank0, rank1, broken)))
    # (rank, step) firsts: 4 x 16 (rank 0 step 1), 2 x 3 (rank 0 step 2), 6 x 5 (rank 1 step 1); not rank 2
    assert batch == sorted([4 * 16, 2 * 3, 6 * 5])[1]
    assert rule == "aten::linear"
