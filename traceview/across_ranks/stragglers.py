"""Straggler figures (docs/metrics.md, "Across ranks": "Per instance", "Per rank", "Straggler"), after clock
alignment.

Per usable instance (consistent, two or more members): arrival skew = max - min aligned start; the last
arrival (none when the skew is 0); transfer time = the shortest member's duration (a lower bound: the members
that waited least still waited a little); a member's wait = its duration - the transfer time; its lateness =
its aligned start - the median aligned start of the members; the last arrival's cost = its aligned start -
the second-latest member's (what the instance would save had it arrived with the others).

Per rank: total wait and its share of the rank's step time, times last, median lateness, the median lead
(aligned start - the latest of the other members') and its jitter, the lateness cost per step, the clock
uncertainty of its lateness, and the straggler rule (`traceview.across_ranks.evidence`): at least
`MIN_INSTANCES` instances, last beyond chance (binomial tail against 1/n below `LAST_ALPHA`) with a median
lateness of at least `LATENESS_FLOOR_US`, and that lateness beyond `CLOCK_MARGIN` x the clock uncertainty
(else `not resolvable`); or late by size (its median lead above the clock, its jitter and a share of the
step). Its cause: the rule of `CAUSES` whose figure (an excess over the other
ranks, per step: a delay early in a step makes every later collective of the step late too) is the largest of
those reaching `CAUSE_SHARE` of the median lateness; none: `network` when its groups span hosts known to
differ, else `unexplained`.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from traceview.across_ranks.clocks import ASSUMED_HOSTS, ClockOffsets
from traceview.across_ranks.evidence import (
    beyond_chance,
    beyond_clock,
    last_p_values,
    late_by_size,
    late_enough,
    lead_floor,
)
from traceview.core.intervals import union_length
from traceview.core.records import record

MIN_INSTANCES = 3
CAUSE_SHARE = 0.5


@record
class CauseRule:
    """A straggler cause: its name, the per-rank figure (us) that supports it and the sentence that names it
    (`{value}`: the figure)."""

    cause: str
    figure: str
    sentence: str


CAUSES: tuple[CauseRule, ...] = (
    CauseRule(
        "late launch",
        "launch_delay_excess_us",
        "late launch (its host spends {value} more than the median rank from the start of its step to its "
        "first launch: host work before any device work, e.g. a sleep, data loading or a synchronisation)",
    ),
    CauseRule(
        "slow compute", "comp_excess_us", "slow compute (T_comp per step {value} above the median rank)"
    ),
    CauseRule(
        "late host step entry",
        "host_entry_excess_us",
        "late host-side step entry (its CPU ProfilerStep starts {value} after the other ranks' on the "
        "aligned "
        "clock: the step's host work, e.g. data loading, begins late)",
    ),
    CauseRule(
        "late collective launch",
        "launch_gap_excess_us",
        "late collective launch (its collectives are launched {value} later after its compute than the "
        "median "
        "rank's)",
    ),
)
"""The causes a rank's own timeline can show; the largest supported figure wins."""
NETWORK, UNEXPLAINED, NOT_RESOLVABLE = "network", "unexplained", "not resolvable"
FALLBACK_SENTENCES = {
    NETWORK: (
        "the network or a peer's link (nothing on its own timeline explains it, and its groups span hosts)"
    ),
    UNEXPLAINED: (
        "unexplained (nothing on its own timeline explains it, and no group of it is known to span hosts)"
    ),
}


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
            start.sort(descending=True).get(1).alias("second_start_us"),
            start.max().alias("max_start_us"),
        )
        .with_columns(pl.when(pl.col("skew_us") > 0).then(pl.col("latest_rank")).alias("last_rank"))
    )
    per_call = calls.join(per_instance, on="instance").with_columns(
        (start - pl.col("median_start_us")).alias("lateness_us"),
        (pl.col("dur_us") - pl.col("transfer_us")).alias("wait_us"),
        (pl.col("rank") == pl.col("last_rank")).fill_null(False).alias("is_last"),
        _LEAD,
    )
    per_call = per_call.with_columns(
        pl.when(pl.col("is_last")).then(start - pl.col("second_start_us")).otherwise(0.0).alias("cost_us")
    )
    dropped = ["latest_rank", "median_start_us", "second_start_us", "max_start_us"]
    figures = usable.join(per_instance.drop(dropped), on="instance").sort("instance")
    return figures, per_call.drop(dropped)


_LEAD = (
    pl.when(pl.col("aligned_start_us") >= pl.col("max_start_us"))
    .then(pl.col("aligned_start_us") - pl.col("second_start_us"))
    .otherwise(pl.col("aligned_start_us") - pl.col("max_start_us"))
    .alias("lead_us")
)
"""A call's lead: its aligned start - the latest aligned start of the other members (docs/metrics.md,
"Evidence", by size): positive when it arrives last, the time every peer waited for it at least."""


def launch_gaps(calls: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """Per call: `launch_gap_us` = launch time - end of the rank's last compute kernel before the collective
    kernel, floored at 0 (the GPU waited on the host); null without a launch time. Columns instance, rank,
    gap."""
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
    """T_transfer of docs/metrics.md section 4 per (rank, step): the union, over the instances the rank took
    part in, of the last `transfer` of each of its calls ([end - transfer, end]: a call waits, then moves its
    data), the transfer being the instance's shortest member's duration. Concurrent calls (two gloo worker
    threads, several streams) count once, so it never exceeds T_comm. Columns rank, step, transfer_us."""
    shortest = calls.group_by("instance").agg(pl.col("dur_us").min().alias("_transfer"))
    tails = calls.join(shortest, on="instance").select(
        pl.col("rank").cast(pl.Int64),
        pl.col("step").cast(pl.Int64),
        (pl.col("end_us") - pl.col("_transfer")).alias("start_us"),
        "end_us",
    )
    return union_length(tails, ["rank", "step"], "transfer_us").sort("rank", "step")


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
        pl.col("lead_us").median().alias("median_lead_us"),
        (pl.col("lead_us") - pl.col("lead_us").median()).abs().median().alias("lead_jitter_us"),
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


def clock_uncertainty(per_call: pl.DataFrame, hosts: pl.DataFrame, clocks: ClockOffsets) -> pl.DataFrame:
    """Per rank, `clock_uncertainty_us`: how far its lateness may be off because clocks were aligned. The
    spread of its host's offset (0 on the reference host, null where the host is not aligned) or, when
    larger, the typical spread of the clocks it is compared with (median over its instances of the members'
    median spread; 0 when every member shares the reference host's clock)."""
    spread = hosts.select("rank", "host").join(
        clocks.offsets.select("host", "spread_us"), on="host", how="left"
    )
    own = pl.DataFrame({"rank": hosts.get_column("rank")}).join(spread, on="rank", how="left")
    peers = (
        per_call.select("instance", "rank")
        .join(spread.select("rank", "spread_us"), on="rank", how="left")
        .with_columns(pl.col("spread_us").median().over("instance").alias("peer_spread_us"))
        .group_by("rank")
        .agg(pl.col("peer_spread_us").median())
    )
    uncertainty = pl.max_horizontal("spread_us", pl.col("peer_spread_us").fill_null(0.0))
    return own.join(peers, on="rank", how="left").select(
        "rank", pl.when(pl.col("spread_us").is_not_null()).then(uncertainty).alias("clock_uncertainty_us")
    )


def host_entry(host_steps: pl.DataFrame, hosts: pl.DataFrame, clocks: ClockOffsets) -> pl.DataFrame:
    """Per rank, `host_entry_excess_us`: the median over steps of its CPU ProfilerStep start on the aligned
    clock minus the median of all ranks' start of that step (`host_steps`: rank, step, host_start_us)."""
    offsets = hosts.select("rank", "host").join(
        clocks.offsets.select("host", "offset_us"), on="host", how="left"
    )
    aligned = host_steps.join(offsets.select("rank", "offset_us"), on="rank", how="inner").with_columns(
        (pl.col("host_start_us") - pl.col("offset_us").fill_null(0.0)).alias("aligned")
    )
    late = aligned.with_columns((pl.col("aligned") - pl.col("aligned").median().over("step")).alias("late"))
    return late.group_by("rank").agg(pl.col("late").median().alias("host_entry_excess_us"))


def lateness_cost(per_call: pl.DataFrame, per_step: pl.DataFrame) -> pl.DataFrame:
    """Per rank, `lateness_cost_us`: the median over the steps it took part in of the per-step sum of its
    costs as last arrival (aligned start - the second-latest member's; 0 in a step where it was never
    last), each step's sum capped at the median over ranks of the step's exposed communication
    (`exposed_comm_us` of `per_step`, where given): only waiting the others leave exposed can come off the
    step."""
    sums = per_call.group_by("rank", "step").agg(pl.col("cost_us").sum())
    if "exposed_comm_us" in per_step.columns:
        exposed = per_step.group_by("step").agg(pl.col("exposed_comm_us").median().alias("_cap"))
        sums = sums.join(exposed.cast({"step": pl.Int64}), on="step", how="left").with_columns(
            pl.min_horizontal("cost_us", pl.col("_cap").fill_null(float("inf"))).alias("cost_us")
        )
    return sums.group_by("rank").agg(pl.col("cost_us").median().alias("lateness_cost_us"))


def spans_hosts(per_call: pl.DataFrame, hosts: pl.DataFrame) -> pl.DataFrame:
    """Per rank, `spans_hosts`: one of its instances has members on two hosts, every one of them known (not
    assumed one rank per host)."""
    known = hosts.select("rank", "host", (pl.col("host_source") != ASSUMED_HOSTS).alias("known"))
    per_instance = (
        per_call.select("instance", "rank")
        .join(known, on="rank", how="left")
        .group_by("instance")
        .agg(((pl.col("host").n_unique() > 1) & pl.col("known").fill_null(False).all()).alias("spans"))
    )
    return (
        per_call.select("instance", "rank")
        .join(per_instance, on="instance")
        .group_by("rank")
        .agg(pl.col("spans").any().alias("spans_hosts"))
    )


def launch_delay(starts: pl.DataFrame) -> pl.DataFrame:
    """Per rank, `launch_delay_us`: the median over its CPU steps of the time from the step's start to its
    first launch (`starts`: `traceview.steps.first_launch.first_launches` of every rank), and
    `launch_delay_excess_us`: that minus the median of all ranks."""
    per_rank = (
        starts.with_columns((pl.col("first_launch_us") - pl.col("host_start_us")).alias("delay"))
        .group_by("rank")
        .agg(pl.col("delay").median().alias("launch_delay_us"))
    )
    return per_rank.with_columns(
        (pl.col("launch_delay_us") - pl.col("launch_delay_us").median()).alias("launch_delay_excess_us")
    ).cast({"rank": pl.Int64})


def verdicts(figures: pl.DataFrame, median_step_us: float | None) -> pl.DataFrame:
    """`figures` with `last_p_value`, `lead_floor_us`, `late_by_size`, `lateness_cost_share`, `resolvable`,
    `straggler` and `cause` (module docstring): a straggler is last beyond chance and beyond the clock, or
    late by size (`traceview.across_ranks.evidence`); a rank last beyond chance whose lateness is within
    `CLOCK_MARGIN` x its clock uncertainty, and not late by size, gets `not resolvable` and no straggler flag;
    `cause` is null for the others."""
    figures = figures.join(last_p_values(figures), on="rank", how="left")
    figures = figures.with_columns(lead_floor(median_step_us))
    figures = figures.with_columns(late_by_size().alias("late_by_size"))
    named = (pl.col("instances") >= MIN_INSTANCES) & beyond_chance() & late_enough()
    resolvable = beyond_clock()
    step = median_step_us if median_step_us else None
    straggler = (named & resolvable.fill_null(False)) | pl.col("late_by_size")
    return figures.with_columns(
        (pl.col("lateness_cost_us") / step if step else pl.lit(None, pl.Float64)).alias(
            "lateness_cost_share"
        ),
        resolvable.alias("resolvable"),
        straggler.alias("straggler"),
        pl.when(straggler)
        .then(_cause(pl.col("median_lateness_us").fill_null(0.0)))
        .when(named)
        .then(pl.lit(NOT_RESOLVABLE))
        .alias("cause"),
    )


def _cause(lateness: pl.Expr) -> pl.Expr:
    """The rule of `CAUSES` with the largest figure among those reaching `CAUSE_SHARE` of the lateness; else
    network when the rank's groups span hosts, else unexplained."""
    floor = pl.max_horizontal(CAUSE_SHARE * lateness, pl.lit(1e-9))
    supported = {
        rule.cause: pl.when(pl.col(rule.figure).fill_null(0.0) >= floor).then(pl.col(rule.figure))
        for rule in CAUSES
    }
    best = pl.max_horizontal(list(supported.values()))
    fallback = (
        pl.when(pl.col("spans_hosts").fill_null(False)).then(pl.lit(NETWORK)).otherwise(pl.lit(UNEXPLAINED))
    )
    cause: pl.Expr = fallback
    for name, figure in reversed(supported.items()):
        cause = pl.when(figure.is_not_null() & (figure == best)).then(pl.lit(name)).otherwise(cause)
    return cause
