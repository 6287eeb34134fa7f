"""Across ranks (docs/metrics.md, "Across ranks"): match instances, align host clocks, drop pairs that cannot
be one call, measure skew, wait, transfer and lateness cost, name stragglers and their cause; and the transfer
gamma of the time budget. `cross_rank(...) -> CrossRank` is the pure core (frames in, result out);
`run_cross_rank(run, events, windows, budget, ...)` gathers its inputs from a run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import polars as pl

from traceview.across_ranks._mismatches import MISMATCH_SCHEMA
from traceview.across_ranks.clocks import ClockOffsets, align, clock_offsets, rank_hosts
from traceview.across_ranks.matching import Matching, match_instances
from traceview.across_ranks.overlap import disjoint_instances, disjoint_mismatches
from traceview.across_ranks.sentences import straggler_sentence, warnings
from traceview.across_ranks.stragglers import (
    clock_uncertainty,
    host_entry,
    instance_figures,
    lateness_cost,
    launch_delay,
    launch_gaps,
    rank_figures,
    spans_hosts,
    transfer_per_step,
    verdicts,
)
from traceview.budget.time_budget import TimeBudget
from traceview.core.outliers import rank_outliers
from traceview.core.records import record
from traceview.model.stacking import ranked_frame
from traceview.model.trace import Run
from traceview.steps.first_launch import FIRST_LAUNCH_SCHEMA


@record
class CrossRank:
    """Every cross-rank result; renderers read it and never compute.

    `instances`: one row per key (matching columns + members, skew_us, last_rank, transfer_us for usable
    ones). `calls`: one row per (usable instance, rank): aligned times, lateness_us, wait_us, is_last,
    cost_us. `per_rank`: instances, wait_us, wait_share, times_last, last_share, group_size,
    median_lateness_us, comp_us, comp_excess_us, launch_gap_us, launch_gap_excess_us, host_entry_excess_us,
    clock_uncertainty_us, resolvable, spans_hosts, lateness_cost_us, lateness_cost_share, straggler, cause
    (docs/metrics.md). `mismatches`: one row per mismatch (group, step, position, seq, rank, kind, detail).
    """

    groups: pl.DataFrame
    instances: pl.DataFrame
    calls: pl.DataFrame
    mismatches: pl.DataFrame
    hosts: pl.DataFrame
    clocks: ClockOffsets
    per_rank: pl.DataFrame
    transfer: pl.DataFrame
    stragglers: tuple[int, ...]
    sentence: str
    warnings: tuple[str, ...]

    @property
    def outliers(self) -> pl.DataFrame:
        """The ranks whose total wait or median lateness lies beyond Tukey's fences
        (`traceview.core.outliers`)."""
        return rank_outliers(self.per_rank, ("wait_us", "median_lateness_us"))

    @property
    def usable_instances(self) -> int:
        """Instances that enter the skew figures (consistent, two or more members present)."""
        return int(self.instances.get_column("skew_us").is_not_null().sum())

    def listed_instances(self, limit: int) -> pl.DataFrame:
        """At most `limit` instances, those of the largest skew (then the first), in instance order."""
        if self.instances.height <= limit:
            return self.instances
        order = self.instances.sort(["skew_us", "instance"], descending=[True, False], nulls_last=True)
        return order.head(limit).sort("instance")

    def gate_figures(self) -> dict[str, float | None]:
        """Figures `--fail-on` can name (docs/metrics.md, "Across ranks")."""
        skew = self.instances.get_column("skew_us").drop_nulls()
        share = self.per_rank.get_column("wait_share").drop_nulls()
        return {
            "stragglers": float(len(self.stragglers)),
            "mismatches": float(self.mismatches.height),
            "median_skew_us": float(skew.median()) if skew.len() else None,  # type: ignore[arg-type]
            "max_wait_share": float(share.max()) if share.len() else None,  # type: ignore[arg-type]
        }


def cross_rank(
    kernels: pl.DataFrame,
    events: pl.DataFrame,
    windows: pl.DataFrame,
    per_step: pl.DataFrame,
    hosts: pl.DataFrame,
    host_steps: pl.DataFrame | None = None,
    starts: pl.DataFrame | None = None,
) -> CrossRank:
    """The cross-rank analysis from communication kernels (`traceview.across_ranks.matching.KERNEL_COLUMNS`),
    classified device events, step windows, the budget's per-step frame, the rank -> host table, the CPU
    ProfilerStep starts (`host_steps`: rank, step, host_start_us; on the run's time base) and each CPU step's
    first launch (`starts`: `traceview.steps.first_launch.first_launches`)."""
    ranks = hosts.get_column("rank").to_list()
    matching, clocks, aligned = _checked(match_instances(kernels, windows, ranks), hosts)
    usable = _usable(matching)
    figures, per_call = instance_figures(aligned, usable)
    instances = matching.instances.join(
        figures.select("instance", "members", "skew_us", "last_rank", "transfer_us"),
        on="instance",
        how="left",
    )
    steps = per_step.get_column("step_us") if per_step.height else pl.Series([], dtype=pl.Float64)
    usable_calls = matching.calls.join(usable.select("instance"), on="instance", how="semi")
    parts = [
        clock_uncertainty(per_call, hosts, clocks),
        host_entry(host_steps if host_steps is not None else _no_host_steps(), hosts, clocks),
        lateness_cost(per_call, per_step),
        spans_hosts(per_call, hosts),
        launch_delay(starts if starts is not None else pl.DataFrame(schema=FIRST_LAUNCH_SCHEMA)),
    ]
    figures_by_rank = rank_figures(per_call, launch_gaps(usable_calls, events), per_step, ranks)
    for part in parts:
        figures_by_rank = figures_by_rank.join(part.cast({"rank": pl.Int64}), on="rank", how="left")
    per_rank = verdicts(figures_by_rank, float(steps.median()) if steps.len() else None)  # type: ignore[arg-type]
    return CrossRank(
        groups=matching.groups,
        instances=instances,
        calls=per_call.sort("instance", "rank"),
        mismatches=matching.mismatches,
        hosts=hosts,
        clocks=clocks,
        per_rank=per_rank,
        transfer=transfer_per_step(matching.calls),
        stragglers=ranked_stragglers(per_rank),
        sentence=straggler_sentence(per_rank, instances),
        warnings=warnings(matching, clocks),
    )


STRAGGLER_ORDER = ("lateness_cost_us", "last_share")
"""The named stragglers' order: the most their lateness costs first, then the most often last, then rank."""


def ranked_stragglers(per_rank: pl.DataFrame) -> tuple[int, ...]:
    """The ranks named stragglers, in `STRAGGLER_ORDER` (the first is the one the verdict and the tiles
    name)."""
    order = [column for column in STRAGGLER_ORDER if column in per_rank.columns]
    flagged = per_rank.filter(pl.col("straggler").fill_null(False))
    ranked = flagged.sort([*order, "rank"], descending=[*(True for _ in order), False], nulls_last=True)
    return tuple(ranked.get_column("rank").to_list())


def _usable(matching: Matching) -> pl.DataFrame:
    return matching.instances.filter(pl.col("consistent") & (pl.col("matched") >= 2))


def _clocks(matching: Matching, hosts: pl.DataFrame) -> tuple[ClockOffsets, pl.DataFrame]:
    """Clock offsets from the usable instances, and every placed call on the aligned clock."""
    usable_calls = matching.calls.join(_usable(matching).select("instance"), on="instance", how="semi")
    clocks = clock_offsets(usable_calls, hosts)
    return clocks, align(matching.calls, hosts, clocks)


def _checked(matching: Matching, hosts: pl.DataFrame) -> tuple[Matching, ClockOffsets, pl.DataFrame]:
    """The matching without the instances whose members do not overlap on the aligned clock (each listed as a
    `disjoint` mismatch), and the clocks aligned again without them (`traceview.across_ranks.overlap`)."""
    clocks, aligned = _clocks(matching, hosts)
    disjoint = disjoint_instances(aligned, _usable(matching), hosts, clocks)
    if disjoint.height == 0:
        return matching, clocks, aligned
    dropped = pl.col("instance").is_in(disjoint.get_column("instance").implode())
    found = disjoint_mismatches(disjoint, matching.instances).cast(MISMATCH_SCHEMA)  # type: ignore[arg-type]
    checked = replace(
        matching,
        instances=matching.instances.with_columns((pl.col("consistent") & ~dropped).alias("consistent")),
        mismatches=pl.concat([matching.mismatches, found]).sort("group", "step", "position", "rank"),
    )
    return checked, *_clocks(checked, hosts)


def _no_host_steps() -> pl.DataFrame:
    return pl.DataFrame(schema={"rank": pl.Int64, "step": pl.Int64, "host_start_us": pl.Float64})


def host_steps_of(run: Run) -> pl.DataFrame:
    """Per rank and step, the start of its CPU `ProfilerStep#N` (one row per step; none without CPU steps)."""
    steps = ranked_frame(run, "steps").filter(pl.col("source") == "cpu")
    return steps.select("rank", "step", pl.col("start_us").alias("host_start_us"))


def run_cross_rank(
    run: Run,
    kernels: pl.DataFrame,
    events: pl.DataFrame,
    windows: pl.DataFrame,
    budget: TimeBudget,
    ranks_per_host: int | None = None,
    log_hosts: Mapping[int, str] | None = None,
    per_host_source: str = "--ranks-per-host",
    starts: pl.DataFrame | None = None,
) -> CrossRank:
    """`cross_rank` on a run: hosts from the traces, then `log_hosts` (NCCL logs), then `ranks_per_host` (from
    `per_host_source`); `starts` each CPU step's first launch."""
    hostnames = {trace.rank: trace.meta.hostname for trace in run}
    hosts = rank_hosts(run.rank_ids, hostnames, log_hosts, ranks_per_host, per_host_source)
    return cross_rank(kernels, events, windows, budget.per_step, hosts, host_steps_of(run), starts)
