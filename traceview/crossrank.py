"""Across ranks (SPEC section 6): match instances, align host clocks, measure skew, wait and transfer, name
stragglers; and the transfer gamma of SPEC section 4. `cross_rank(...) -> CrossRank` is the pure core (frames
in, result out); `run_cross_rank(run, events, windows, budget, ...)` gathers its inputs from a run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import polars as pl

from traceview.budget import TimeBudget
from traceview.clocks import ClockOffsets, align, clock_offsets, rank_hosts
from traceview.matching import Matching, match_instances
from traceview.model import Run
from traceview.stragglers import instance_figures, launch_gaps, rank_figures, transfer_per_step, verdicts

TRANSFER_COLUMNS = ("transfer_us", "transfer_gamma")


@dataclass(frozen=True)
class CrossRank:
    """Every cross-rank result; renderers read it and never compute.

    `instances`: one row per key (matching columns + members, skew_us, last_rank, transfer_us for usable ones).
    `calls`: one row per (usable instance, rank): aligned times, lateness_us, wait_us, is_last.
    `per_rank`: instances, wait_us, wait_share, times_last, last_share, median_lateness_us, comp_us,
    comp_excess_us, launch_gap_us, launch_gap_excess_us, straggler, cause.
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
    def usable_instances(self) -> int:
        """Instances that enter the skew figures (consistent, two or more members present)."""
        return int(self.instances.get_column("skew_us").is_not_null().sum())

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
) -> CrossRank:
    """The cross-rank analysis from communication kernels (`traceview.matching.KERNEL_COLUMNS`), classified
    device events, step windows, the budget's per-step frame and the rank -> host table."""
    ranks = hosts.get_column("rank").to_list()
    matching = match_instances(kernels, windows, ranks)
    usable = matching.instances.filter(pl.col("consistent") & (pl.col("matched") >= 2))
    usable_calls = matching.calls.join(usable.select("instance"), on="instance", how="semi")
    clocks = clock_offsets(usable_calls, hosts)
    figures, per_call = instance_figures(align(matching.calls, hosts, clocks), usable)
    instances = matching.instances.join(
        figures.select("instance", "members", "skew_us", "last_rank", "transfer_us"),
        on="instance",
        how="left",
    )
    steps = per_step.get_column("step_us") if per_step.height else pl.Series([], dtype=pl.Float64)
    per_rank = verdicts(
        rank_figures(per_call, launch_gaps(usable_calls, events), per_step, ranks),
        float(steps.median()) if steps.len() else None,  # type: ignore[arg-type]
    )
    stragglers = tuple(per_rank.filter(pl.col("straggler")).get_column("rank").to_list())
    return CrossRank(
        groups=matching.groups,
        instances=instances,
        calls=per_call.sort("instance", "rank"),
        mismatches=matching.mismatches,
        hosts=hosts,
        clocks=clocks,
        per_rank=per_rank,
        transfer=transfer_per_step(matching.calls),
        stragglers=stragglers,
        sentence=straggler_sentence(per_rank, instances),
        warnings=_warnings(matching, clocks),
    )


def _warnings(matching: Matching, clocks: ClockOffsets) -> tuple[str, ...]:
    absent = matching.groups.filter(pl.col("absent").list.len() > 0)
    notes = [
        f"group {row['group']}: {len(row['absent'])} of {row['members']} members have no trace in the run; "
        f"figures use the {row['present']} present"
        for row in absent.iter_rows(named=True)
    ]
    if matching.mismatches.height:
        first = matching.mismatches.row(0, named=True)
        notes.append(
            f"{matching.mismatches.height} mismatched calls, first: rank {first['rank']} group {first['group']} "
            f"seq {first['seq']}: {first['kind']} ({first['detail']})"
        )
    return (*notes, *clocks.warnings)


def _ms(value: float | None) -> str:
    return "?" if value is None else f"{value / 1000:.3f} ms"


def _cause_text(row: Mapping[str, object]) -> str:
    cause = row["cause"]
    if cause == "slow compute":
        return f"slow compute (T_comp per step {_ms(row['comp_excess_us'])} above the median rank)"  # type: ignore[arg-type]
    if cause == "late launch":
        gap = _ms(row["launch_gap_excess_us"])  # type: ignore[arg-type]
        return (
            f"late launch (its collectives are launched {gap} later after its compute than the median rank's)"
        )
    return "the network or a peer's link (neither its compute nor its launches explain it)"


SENTENCE_STRAGGLERS = 3
"""Stragglers the sentence describes one by one; the others are listed by rank."""


def straggler_sentence(per_rank: pl.DataFrame, instances: pl.DataFrame) -> str:
    """One plain sentence: the straggler(s) and likely cause, or why there is none."""
    usable = instances.filter(pl.col("skew_us").is_not_null())
    if usable.height == 0:
        return "No collective was matched on two or more ranks, so there are no straggler figures."
    flagged = per_rank.filter(pl.col("straggler"))
    parts = [
        f"rank {row['rank']} is a straggler: last in {row['times_last']} of its {row['instances']} collectives, "
        f"median {_ms(row['median_lateness_us'])} late; likely cause: {_cause_text(row)}"
        for row in flagged.head(SENTENCE_STRAGGLERS).iter_rows(named=True)
    ]
    if flagged.height > SENTENCE_STRAGGLERS:
        more = flagged.get_column("rank").slice(SENTENCE_STRAGGLERS).to_list()
        listed = ", ".join(str(r) for r in more[:10]) + (", ..." if len(more) > 10 else "")
        parts.append(f"and {len(more)} more stragglers (ranks {listed}; the per-rank table has them all)")
    if parts:
        text = "; ".join(parts) + "."
        return text[0].upper() + text[1:]
    skew = usable.get_column("skew_us").median()
    return f"No straggler: the median arrival skew is {_ms(skew)} over {usable.height} matched collectives."  # type: ignore[arg-type]


def add_transfer(budget: TimeBudget, transfer: pl.DataFrame) -> TimeBudget:
    """The budget with `transfer_us` and `transfer_gamma` = transfer_us / comp_us (SPEC section 4) per step,
    their per-rank medians and their run medians."""
    if budget.per_step.height == 0:
        return budget
    per_step = budget.per_step.drop(TRANSFER_COLUMNS, strict=False).join(
        transfer, on=["rank", "step"], how="left"
    )
    per_step = per_step.with_columns(pl.col("transfer_us").fill_null(0.0)).with_columns(
        pl.when(pl.col("comp_us") > 0).then(pl.col("transfer_us") / pl.col("comp_us")).alias("transfer_gamma")
    )
    medians = per_step.group_by("rank").agg(pl.col(c).median() for c in TRANSFER_COLUMNS)
    per_rank = budget.per_rank.drop(TRANSFER_COLUMNS, strict=False).join(medians, on="rank", how="left")
    run = per_step.select(pl.col(c).median() for c in TRANSFER_COLUMNS).row(0, named=True)
    return replace(budget, per_step=per_step, per_rank=per_rank, run_median={**budget.run_median, **run})


def run_cross_rank(
    run: Run,
    kernels: pl.DataFrame,
    events: pl.DataFrame,
    windows: pl.DataFrame,
    budget: TimeBudget,
    ranks_per_host: int | None = None,
    log_hosts: Mapping[int, str] | None = None,
) -> CrossRank:
    """`cross_rank` on a run: hosts from the traces, then `log_hosts` (NCCL logs), then `ranks_per_host`."""
    hostnames = {trace.rank: trace.meta.hostname for trace in run}
    hosts = rank_hosts(run.rank_ids, hostnames, log_hosts, ranks_per_host)
    return cross_rank(kernels, events, windows, budget.per_step, hosts)
