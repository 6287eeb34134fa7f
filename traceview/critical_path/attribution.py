"""The path's communication attributed to matched calls (docs/metrics.md, "Critical path", Attribution): per
matched call, the part of its rank's `peer_wait` it moved and the part of `comm_transfer` it held, each scaled
so the calls of a (rank, step) sum to what the step's row holds; read by the advice as the time a rank makes
its peers wait on their paths and the time a process group's collectives hold.

A call's moved wait is its `peer_wait_us` (`traceview.critical_path.analysis.call_waits`) times the step's
moved share (the step's `peer_wait_us` over the sum of its calls' waits: two concurrent calls cannot move the
same path time twice); its transfer is its communication on the path less that wait, times the step's share
likewise (the step's `comm_transfer_us` over the sum). Per figure the mean over the counted (rank, step) rows
(a rank or step without such a call counts 0), in microseconds per step.
"""

from __future__ import annotations

import polars as pl

KEYS = ["rank", "step"]
CALL_SCHEMA: dict[str, pl.DataType] = {
    "instance": pl.Int64(),
    "group": pl.Utf8(),
    "rank": pl.Int64(),
    "step": pl.Int64(),
    "last_rank": pl.Int64(),
    "wait_us": pl.Float64(),
    "transfer_us": pl.Float64(),
}
"""One row per matched call on the path: its instance, process group, rank, step, the instance's last arrival
(`last_rank`), the peer wait it moved (`wait_us`) and the transfer it held (`transfer_us`), both scaled."""


def _scaled(column: pl.Expr, step_total: str) -> pl.Expr:
    """`column` times the step's total over the sum of `column` over the step's calls (0 when that sum is)."""
    summed = column.sum().over(KEYS)
    return pl.when(summed > 0).then(column * pl.col(step_total) / summed).otherwise(0.0)


STEP_TOTALS = (pl.col("comm_transfer_us").alias("_t"), pl.col("peer_wait_us").alias("_w"))


def attributed_calls(per_call: pl.DataFrame, per_step: pl.DataFrame) -> pl.DataFrame:
    """`per_call` (`call_waits`: instance, rank, step, last_rank, peer_wait_us, comm_on_path_us, group when
    known) attributed to `per_step`'s resolved rows (`comm_transfer_us`, `peer_wait_us`): `CALL_SCHEMA`."""
    if per_call.height == 0:
        return pl.DataFrame(schema=CALL_SCHEMA)
    group = pl.col("group").cast(pl.Utf8) if "group" in per_call.columns else pl.lit(None, pl.Utf8)
    wait = pl.col("peer_wait_us").fill_null(0.0)
    transfer = (pl.col("comm_on_path_us").fill_null(0.0) - wait).clip(lower_bound=0.0)
    return (
        per_call.join(
            per_step.select(
                *KEYS, pl.col("comm_transfer_us").alias("_t"), pl.col("peer_wait_us").alias("_w")
            ),
            on=KEYS,
            how="inner",
        )
        .with_columns(group.alias("group"), wait.alias("_wait"), transfer.alias("_transfer"))
        .with_columns(_scaled(pl.col("_wait"), "_w").alias("wait_us"))
        .with_columns(_scaled(pl.col("_transfer"), "_t").alias("transfer_us"))
        .select(list(CALL_SCHEMA))
        .cast(CALL_SCHEMA)  # type: ignore[arg-type]
    )


def _mean_per_step(calls: pl.DataFrame, column: str, rows: int) -> float:
    """The sum of `column` over `calls` divided by `rows` (the counted (rank, step) rows it is the mean
    over); 0 without rows."""
    total = calls.get_column(column).sum() if calls.height else 0.0
    return float(total) / rows if rows > 0 else 0.0


def waits_for(calls: pl.DataFrame, steps: pl.DataFrame, rank: int) -> float:
    """The time per step the peers' paths wait for `rank` (the instances where it arrived last): the mean
    over the other ranks' counted (rank, step) rows of the waits their calls moved. `calls`: attributed
    calls of the counted rows; `steps`: per rank its counted `steps`."""
    waited = calls.filter((pl.col("last_rank") == rank) & (pl.col("rank") != rank))
    rows = steps.filter(pl.col("rank") != rank).get_column("steps").sum()
    return _mean_per_step(waited, "wait_us", int(rows))


def held_by_groups(calls: pl.DataFrame, steps: pl.DataFrame, groups: list[str], column: str) -> float:
    """The time per step the calls of `groups` hold on the path (`column`: `transfer_us` or `wait_us`): the
    mean over every counted (rank, step) row."""
    found = calls.filter(pl.col("group").is_in(groups))
    return _mean_per_step(found, column, int(steps.get_column("steps").sum()))
