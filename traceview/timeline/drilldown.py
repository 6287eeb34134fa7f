"""The report's drill-down figures (docs/metrics.md, "Report"): from a run-level figure to the rank, the step
and the collective behind it, computed once here so that the page and the JSON show the same numbers.

- `step_waits`: per (rank, step), the rank's wait for later peers summed over the step's collectives (us).
- `median_ranks`: per step, the rank of median step time (the lower median: ranks sorted by step time, then
  rank), the one a clicked cell is set against.
- `by_cost`: per (process group, collective, message-size bucket), the kernel time over every rank, the calls
  and the ranks, the smallest and largest message size (`size_min_bytes`, `size_max_bytes`: one size when
  equal), costliest first; `costly_instances`: behind each row, its `TOP_INSTANCES` instances with the
  most waiting (the sum of every member's wait).
"""

from __future__ import annotations

import polars as pl

from traceview.collectives.tables import size_bucket_exprs
from traceview.core.records import record

TOP_INSTANCES = 10
"""Instances kept behind each row of `by_cost`."""
COST_KEYS = ["pg_key", "collective", "size_bucket"]


@record
class Drilldown:
    """The drill-down's figures (module docstring)."""

    step_waits: pl.DataFrame
    median_ranks: pl.DataFrame
    by_cost: pl.DataFrame
    costly_instances: pl.DataFrame


def _step_waits(per_step: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    keys = per_step.select("rank", "step")
    if calls.height == 0:
        return keys.with_columns(pl.lit(0.0).alias("wait_us"))
    waits = calls.group_by("rank", "step").agg(pl.col("wait_us").sum())
    return keys.join(waits, on=["rank", "step"], how="left").with_columns(pl.col("wait_us").fill_null(0.0))


def _median_ranks(per_step: pl.DataFrame) -> pl.DataFrame:
    return (
        per_step.sort(["step", "step_us", "rank"])
        .group_by("step", maintain_order=True)
        .agg(pl.col("rank").get((pl.len() - 1) // 2).alias("median_rank"))
    )


def _by_cost(per_collective: pl.DataFrame) -> pl.DataFrame:
    return (
        per_collective.group_by(COST_KEYS)
        .agg(
            pl.col("total_us").sum(),
            pl.col("calls").sum(),
            pl.col("rank").n_unique().alias("ranks"),
            pl.col("size_min_bytes").min(),
            pl.col("size_max_bytes").max(),
        )
        .sort(["total_us", *COST_KEYS], descending=[True, False, False, False])
    )


def _costly_instances(calls: pl.DataFrame) -> pl.DataFrame:
    per_instance = (
        calls.with_columns(*size_bucket_exprs(pl.col("size_bytes")))
        .group_by("instance", "group", "collective", "size_bucket")
        .agg(
            pl.col("step").first(),
            pl.col("seq").first(),
            pl.col("wait_us").sum(),
            pl.col("skew_us").first(),
            pl.col("last_rank").first(),
            pl.col("transfer_us").first(),
        )
        .rename({"group": "pg_key"})
        .sort("wait_us", "instance", descending=[True, False])
    )
    return per_instance.group_by(COST_KEYS, maintain_order=True).head(TOP_INSTANCES)


def drilldown(per_step: pl.DataFrame, calls: pl.DataFrame, per_collective: pl.DataFrame) -> Drilldown:
    """The drill-down of a run from the budget's `per_step`, the cross-rank `calls` (one row per instance and
    rank, with `wait_us`) and the collectives' `per_collective` table."""
    has_calls = calls.height > 0
    return Drilldown(
        step_waits=_step_waits(per_step, calls),
        median_ranks=_median_ranks(per_step) if per_step.height else pl.DataFrame(),
        by_cost=_by_cost(per_collective) if per_collective.height else pl.DataFrame(),
        costly_instances=_costly_instances(calls) if has_calls else pl.DataFrame(),
    )
