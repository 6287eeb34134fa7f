"""Calls paired by signature that cannot be one collective (docs/metrics.md, "Across ranks", "Overlap").

Every member of an AllReduce, AllGather, ReduceScatter, AllToAll or Barrier needs data from every other
member before it can finish, so on a common clock all members' kernels run at one instant: the latest start
comes before the earliest end. An instance where, on the aligned clock, the latest start comes more than
the clock's uncertainty (the largest offset spread of its members' hosts) plus `OVERLAP_SLACK_US` after the
earliest end pairs two different calls (a call one trace holds and the other lost, e.g. a sampled or cut
trace): it is a `disjoint` mismatch, and leaves the usable instances. Broadcast, Reduce, SendRecv and
unknown collectives are not checked (a small send may finish before its receiver starts).
"""

from __future__ import annotations

import polars as pl

from traceview.across_ranks.clocks import ClockOffsets

MUST_OVERLAP = frozenset({"AllReduce", "AllGather", "ReduceScatter", "AllToAll", "Barrier"})
"""Collectives whose members all finish after every member has started."""
OVERLAP_SLACK_US = 50.0
"""Tolerance beyond the clock uncertainty (timestamps of two devices of one host may differ by a few us)."""


def disjoint_instances(
    aligned: pl.DataFrame, instances: pl.DataFrame, hosts: pl.DataFrame, clocks: ClockOffsets
) -> pl.DataFrame:
    """Usable instances whose members do not overlap on the aligned clock: instance, rank (the latest to
    start), early_rank (the first to end), gap_us (latest start - earliest end)."""
    checked = instances.filter(pl.col("collective").is_in(list(MUST_OVERLAP))).select("instance")
    spread = hosts.select("rank", "host").join(
        clocks.offsets.select("host", "spread_us"), on="host", how="left"
    )
    calls = aligned.join(checked, on="instance", how="semi").join(
        spread.select("rank", "spread_us"), on="rank", how="left"
    )
    start, end = pl.col("aligned_start_us"), pl.col("aligned_end_us")
    per_instance = calls.group_by("instance").agg(
        (start.max() - end.min()).alias("gap_us"),
        pl.col("rank").sort_by(start).last().alias("rank"),
        pl.col("rank").sort_by(end).first().alias("early_rank"),
        pl.col("spread_us").fill_null(float("inf")).max().alias("uncertainty_us"),
    )
    far = pl.col("gap_us") > pl.col("uncertainty_us") + OVERLAP_SLACK_US
    return per_instance.filter(far).select("instance", "rank", "early_rank", "gap_us").sort("instance")


def disjoint_mismatches(disjoint: pl.DataFrame, instances: pl.DataFrame) -> pl.DataFrame:
    """One mismatch row per disjoint instance (MISMATCH_SCHEMA columns, kind `disjoint`)."""
    return disjoint.join(
        instances.select("instance", "group", "step", "position", "seq"), on="instance"
    ).select(
        "group",
        "step",
        "position",
        "seq",
        "rank",
        pl.lit("disjoint").alias("kind"),
        pl.format(
            "starts {} ms after rank {}'s call ended: not the same call (a call one trace holds and the "
            "other lost)",
            (pl.col("gap_us") / 1000).round(3),
            pl.col("early_rank"),
        ).alias("detail"),
    )
