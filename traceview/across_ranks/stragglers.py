"""Straggler figures (SPEC section 6, "Per instance" and "Per rank"), after clock alignment.

Per usable instance (consistent, two or more members): arrival skew = max - min aligned start; the last
arrival (none when the skew is 0); transfer time = the shortest member's duration (a lower bound: the members
that waited least still waited a little); a member's wait = its duration - the transfer time; its lateness =
its aligned start - the median aligned start of the members.

Per rank: total wait and its share of the rank's step time, times last, median lateness, and the straggler rule
of docs/metrics.md ("Across ranks"): a rank is a straggler when it is last in at least (1 + 1/n) / 2 of its
instances (halfway between chance, 1/n, and always) with a median lateness of at least `LATENESS_FLOOR_US`, or
when its median lateness reaches max(`LATENESS_THRESHOLD_US`, `LATENESS_STEP_SHARE` x median step). Its likely
cause, from its own timeline, is the larger of two excesses over the median of all ranks, if it is at least
`CAUSE_SHARE` of its median lateness: its median T_comp per step (slow compute), its median launch gap per
step (late launch: the sum over the step's collectives of how long after the GPU finished the compute before a
collective its launch came); else the network (or a peer's link). Per step, because a delay early in a step
makes every later collective of the step late too.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

MIN_INSTANCES = 3
LATENESS_FLOOR_US = 20.0
LATENESS_THRESHOLD_US = 200.0
LATENESS_STEP_SHARE = 0.02
CAUSE_SHARE = 0.5
CAUSES: tuple[tuple[str, str], ...] = (
    ("slow compute", "comp_excess_us"),
    ("late launch", "launch_gap_excess_us"),
)
"""Cause rules as data: (cause, the per-rank excess that supports it); the larger supported excess wins."""
NETWORK = "network"


def instance_figures(aligned: pl.DataFrame, usable: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(per instance skew, last rank, transfer; per call lateness, wait, is_last) for `usable` instances."""
    calls = aligned.join(usable.select("instance"), on="instance", how="semi")
    start = pl.col("aligned_start_us")
    per_instance = (
        calls.group_by("instance")
        .agg(
            pl.len().cast(pl.Int64).alias("members"),
            (start.max() - start.min()).alias("skew_us"),
            pl.col("rank").sort_by([start, "rank"], descending=[False, True]).last().alias("latest_rank"),
            pl.col("dur_us").min().alias("transfer_us"),
            start.median().alias("median_start_us"),
        )
        .with_columns(pl.when(pl.col("skew_us") > 0).then(pl.col("latest_rank")).alias("last_rank"))
    )
    per_call = calls.join(per_instance, on="instance").with_columns(
        (start - pl.col("median_start_us")).alias("lateness_us"),
        (pl.col("dur_us") - pl.col("transfer_us")).alias("wait_us"),
        (pl.col("rank") == pl.col("last_rank")).fill_null(False).alias("is_last"),
    )
    figures = usable.join(per_instance.drop("latest_rank", "median_start_us"), on="instance").sort("instance")
    return figures, per_call.drop("latest_rank", "median_start_us")


def launch_gaps(calls: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """Per call: `launch_gap_us` = launch time - end of the rank's last compute kernel before the collective
    kernel, floored at 0 (the GPU waited on the host); null without a launch time. Columns instance, rank, gap."""
    if events.height == 0 or "event_class" not in events.columns:
        return calls.select("instance", "rank", pl.lit(None, dtype=pl.Float64).alias("launch_gap_us"))
    compute = (
        events.filter(pl.col("event_class") == "compute")
        .select(pl.col("rank").cast(pl.Int64), pl.col("end_us").alias("compute_end_us"))
        .sort("compute_end_us")
    )
    joined = (
        calls.select("instance", "rank", "start_us", "launch_us")
        .sort("start_us")
        .join_asof(compute, left_on="start_us", right_on="compute_end_us", by="rank", check_sortedness=False)
    )
    gap = (pl.col("launch_us") - pl.col("compute_end_us")).clip(lower_bound=0.0)
    return joined.select("instance", "rank", gap.alias("launch_gap_us"))


def transfer_per_step(calls: pl.DataFrame) -> pl.DataFrame:
    """T_transfer of SPEC section 4 per (rank, step): the sum of the transfer times (shortest member's
    duration) of the instances the rank took part in. Columns rank, step, transfer_us."""
    shortest = calls.group_by("instance").agg(pl.col("dur_us").min().alias("transfer_us"))
    return (
        calls.join(shortest, on="instance")
        .group_by("rank", "step")
        .agg(pl.col("transfer_us").sum())
        .with_columns(pl.col("rank").cast(pl.Int64), pl.col("step").cast(pl.Int64))
        .sort("rank", "step")
    )


def rank_figures(
    per_call: pl.DataFrame, gaps: pl.DataFrame, per_step: pl.DataFrame, ranks: Sequence[int]
) -> pl.DataFrame:
    """Per rank: instances, wait, wait share, times last, median lateness; median T_comp per step and median
    launch gap per step (the sum of its calls' gaps), each with its excess over the median of all ranks."""
    joined = per_call.join(gaps, on=["instance", "rank"], how="left")
    figures = joined.group_by("rank").agg(
        pl.len().cast(pl.Int64).alias("instances"),
        pl.col("wait_us").sum(),
        pl.col("is_last").sum().cast(pl.Int64).alias("times_last"),
        pl.col("members").median().alias("group_size"),
        pl.col("lateness_us").median().alias("median_lateness_us"),
    )
    per_step_gaps = joined.group_by("rank", "step").agg(
        pl.when(pl.col("launch_gap_us").count() > 0).then(pl.col("launch_gap_us").sum())
    )
    gaps_by_rank = per_step_gaps.group_by("rank").agg(pl.col("launch_gap_us").median())
    steps = per_step.group_by("rank").agg(
        pl.col("step_us").sum().alias("steps_us"), pl.col("comp_us").median()
    )
    table = (
        pl.DataFrame({"rank": list(ranks)}, schema={"rank": pl.Int64})
        .join(figures, on="rank", how="left")
        .join(gaps_by_rank, on="rank", how="left")
        .join(steps.with_columns(pl.col("rank").cast(pl.Int64)), on="rank", how="left")
        .with_columns(pl.col("instances", "times_last").fill_null(0), pl.col("wait_us").fill_null(0.0))
    )
    return table.with_columns(
        pl.when(pl.col("steps_us") > 0).then(pl.col("wait_us") / pl.col("steps_us")).alias("wait_share"),
        pl.when(pl.col("instances") > 0).then(pl.col("times_last") / pl.col("instances")).alias("last_share"),
        (pl.col("comp_us") - pl.col("comp_us").median()).alias("comp_excess_us"),
        (pl.col("launch_gap_us") - pl.col("launch_gap_us").median()).alias("launch_gap_excess_us"),
    ).sort("rank")


def verdicts(figures: pl.DataFrame, median_step_us: float | None) -> pl.DataFrame:
    """`figures` with `straggler` (bool) and `cause` (null for non-stragglers), by the module's rules."""
    threshold = max(LATENESS_THRESHOLD_US, LATENESS_STEP_SHARE * (median_step_us or 0.0))
    lateness = pl.col("median_lateness_us").fill_null(0.0)
    expected_share = 1.0 / pl.col("group_size").fill_null(2.0).clip(lower_bound=2.0)
    often_last = (pl.col("last_share").fill_null(0.0) >= (1.0 + expected_share) / 2) & (
        lateness >= LATENESS_FLOOR_US
    )
    straggler = (pl.col("instances") >= MIN_INSTANCES) & (often_last | (lateness >= threshold))
    supported = [
        pl.when(pl.col(column).fill_null(0.0) >= pl.max_horizontal(CAUSE_SHARE * lateness, pl.lit(1e-9)))
        .then(pl.col(column))
        .alias(f"_{column}")
        for _, column in CAUSES
    ]
    best = pl.max_horizontal([pl.col(f"_{column}") for _, column in CAUSES])
    cause: pl.Expr = pl.lit(NETWORK)
    for name, column in reversed(CAUSES):
        cause = (
            pl.when(pl.col(f"_{column}").is_not_null() & (pl.col(f"_{column}") == best))
            .then(pl.lit(name))
            .otherwise(cause)
        )
    return (
        figures.with_columns(straggler.alias("straggler"), *supported)
        .with_columns(pl.when(pl.col("straggler")).then(cause).alias("cause"))
        .drop([f"_{column}" for _, column in CAUSES])
    )
