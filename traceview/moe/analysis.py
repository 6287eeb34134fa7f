"""MoE balance (docs/metrics.md, "MoE balance"): the all-to-alls' send and receive volumes per rank and step,
the imbalance, the hottest ranks and the wait they cause; or, for all-to-alls without split sizes, that the
balance is not measurable. `moe_balance(...) -> MoeBalance` is pure.
"""

from __future__ import annotations

import polars as pl

from traceview.across_ranks.analysis import CrossRank
from traceview.core.durations import duration_text
from traceview.core.records import record
from traceview.moe.balance import call_loads, hot_ranks, loads, parsed, send_matrix, step_balance, waits


@record
class MoeBalance:
    """`matrix`: per (group, src, dst) bytes sent per step (mean over steps). `per_rank`: per (group, rank)
    its median load (received bytes per step), load share and sent bytes. `per_group`: per group of
    all-to-alls with splits: steps, calls per step, median imbalance, hottest ranks, waits. `unmeasured`:
    groups whose all-to-alls carry no split sizes. `sentence`: the finding in words."""

    matrix: pl.DataFrame
    per_rank: pl.DataFrame
    per_group: pl.DataFrame
    per_step: pl.DataFrame
    unmeasured: tuple[str, ...]
    sentence: str

    @property
    def measurable(self) -> bool:
        """Whether any all-to-all carried split sizes."""
        return self.per_group.height > 0

    def gate_figures(self) -> dict[str, float | None]:
        """`moe_imbalance`: the largest median imbalance of any group (1.0 balanced)."""
        if not self.measurable:
            return {}
        worst = self.per_group.get_column("imbalance").max()
        return {"moe_imbalance": float(worst)}  # type: ignore[arg-type]


def _per_group(
    load: pl.DataFrame, steps: pl.DataFrame, shares: pl.DataFrame, waited: pl.DataFrame
) -> pl.DataFrame:
    hot = (
        shares.filter(pl.col("hot"))
        .sort(["group", "load_share"], descending=[False, True])
        .group_by("group", maintain_order=True)
        .agg(pl.col("rank").alias("hottest_ranks"), pl.col("load_share").alias("hottest_shares"))
    )
    return (
        steps.group_by("group")
        .agg(
            pl.len().alias("steps"),
            pl.col("ranks").max(),
            pl.col("imbalance").median(),
            pl.col("imbalance").max().alias("max_imbalance"),
            pl.col("received_bytes").median().alias("step_bytes"),
        )
        .join(
            load.group_by("group").agg(
                (pl.col("calls").sum() / pl.struct("rank", "step").n_unique()).alias("calls_per_step")
            ),
            on="group",
        )
        .join(hot, on="group", how="left")
        .join(waited, on="group", how="left")
        .with_columns(pl.col("hottest_ranks").fill_null([]), pl.col("hottest_shares").fill_null([]))
        .sort("imbalance", descending=True)
    )


def _sentence(per_group: pl.DataFrame, unmeasured: tuple[str, ...]) -> str:
    if per_group.height == 0:
        if unmeasured:
            return (
                f"The all-to-alls of {', '.join(unmeasured)} carry no split sizes (In/Out split size): the "
                "expert balance is not measurable from this trace."
            )
        return "No all-to-all in the run: no expert-parallel balance to measure."
    top = per_group.row(0, named=True)
    if not top["hottest_ranks"]:
        return (
            f"The all-to-alls of group {top['group']} are balanced: the busiest rank receives "
            f"{top['imbalance']:.2f}x the mean."
        )
    ranks = ", ".join(
        f"{r} ({s:.2f}x)" for r, s in zip(top["hottest_ranks"], top["hottest_shares"], strict=True)
    )
    wait = top.get("wait_us")
    cost = (
        f"; its peers wait a median {duration_text(wait)} per step at these all-to-alls"
        + (
            f", and a hot rank arrives last at {top['hot_last_share']:.0%} of them"
            if top.get("hot_last_share") is not None
            else ""
        )
        if wait is not None
        else ""
    )
    return (
        f"Expert load is imbalanced in group {top['group']}: the busiest rank receives "
        f"{top['imbalance']:.2f}x the mean (max over mean, median over steps); hottest ranks: {ranks}{cost}."
    )


def moe_balance(rows: pl.DataFrame, crossrank: CrossRank | None) -> MoeBalance:
    """The balance of every group's all-to-alls from the map's split rows (`traceview.moe.splits`)."""
    with_splits = parsed(rows)
    unmeasured = tuple(sorted(set(rows["group"].to_list()) - set(with_splits["group"].to_list())))
    load = loads(with_splits)
    per_call = call_loads(with_splits)
    steps = step_balance(per_call)
    shares = hot_ranks(per_call, steps)
    hot = shares.filter(pl.col("hot"))
    waited = (
        waits(crossrank.calls, crossrank.instances, hot)
        if crossrank is not None and crossrank.calls.height
        else pl.DataFrame(
            schema={
                "group": pl.Utf8,
                "wait_us": pl.Float64,
                "max_wait_us": pl.Float64,
                "hot_last_share": pl.Float64,
            }
        )
    )
    per_group = _per_group(load, steps, shares, waited) if load.height else pl.DataFrame()
    per_rank = (
        load.group_by("group", "rank")
        .agg(pl.col("received_bytes").median(), pl.col("sent_bytes").median(), pl.col("load_share").median())
        .sort("group", "rank")
    )
    return MoeBalance(
        matrix=send_matrix(with_splits),
        per_rank=per_rank,
        per_group=per_group,
        per_step=steps,
        unmeasured=unmeasured,
        sentence=_sentence(per_group, unmeasured),
    )
