"""Each NCCL communicator matched to one process group of the traces (docs/metrics.md, "NCCL log"): the
first method of `METHODS` that decides wins (`traceview.nccl.join` says each)."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from traceview.collectives.tables import CollectiveAnalysis
from traceview.model.nccl_log import NcclLog
from traceview.nccl.join_tables import stacked

METHODS = ("ProcessGroupNCCL line", "rank set and size", "call sequence")
MIN_SEQUENCE_SHARE = 0.5
"""Least share of a group's (collective, S) signatures a communicator's COLL lines must show to match it."""


def trace_groups(collectives: CollectiveAnalysis | None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(groups, signatures): per process group its name, size and ranks; its distinct (collective, S)."""
    schema = pl.Schema(
        {
            "group": pl.Utf8(),
            "pg_name": pl.Utf8(),
            "pg_desc": pl.Utf8(),
            "size": pl.Int64(),
            "ranks": pl.List(pl.Int64()),
        }
    )
    sig_schema = pl.Schema({"group": pl.Utf8, "collective": pl.Utf8, "size_bytes": pl.Int64})
    if collectives is None:
        return pl.DataFrame(schema=schema), pl.DataFrame(schema=sig_schema)
    listed = pl.col("pg_ranks").str.extract_all(r"-?\d+").cast(pl.List(pl.Int64))
    seen = pl.col("ranks_seen").str.extract_all(r"-?\d+").cast(pl.List(pl.Int64))
    groups = collectives.per_process_group.select(
        group=pl.col("pg_key"),
        pg_name=pl.col("pg_name"),
        pg_desc=pl.col("pg_desc"),
        size=pl.coalesce("group_size", listed.list.len().cast(pl.Int64)),
        ranks=pl.when(pl.col("pg_ranks").is_not_null())
        .then(listed)
        .when(seen.list.len() == pl.col("group_size"))
        .then(seen),
    )
    kernels = collectives.kernels.filter(
        pl.col("first_in_call") & pl.col("collective").is_not_null() & pl.col("size_bytes").is_not_null()
    )
    signatures = kernels.select(group=pl.col("pg_key"), collective="collective", size_bytes="size_bytes")
    return groups.cast(schema), signatures.unique().cast(sig_schema)


def sequence_shares(calls: pl.DataFrame, signatures: pl.DataFrame) -> pl.DataFrame:
    """Per (comm_key, group): share of the group's distinct signatures the communicator's COLL lines show."""
    logged = calls.select("comm_key", "collective", "size_bytes").unique()
    totals = signatures.group_by("group").agg(total=pl.len())
    shared = (
        signatures.join(logged, on=["collective", "size_bytes"])
        .group_by("comm_key", "group")
        .agg(shared=pl.len())
    )
    return shared.join(totals, on="group").select(
        "comm_key", "group", share=pl.col("shared") / pl.col("total")
    )


def pg_line_matches(logs: Sequence[NcclLog], members: pl.DataFrame, groups: pl.DataFrame) -> pl.DataFrame:
    """comm_key -> group from `ProcessGroupNCCL created ncclComm_ 0x...` lines (pointer, and pid
    when given)."""
    lines = stacked(logs, "pg_comms").filter(pl.col("pg").is_not_null()).select("comm", "pg", line_pid="pid")
    found = members.join(lines, on="comm").filter(
        pl.col("line_pid").is_null() | (pl.col("line_pid") == pl.col("pid"))
    )
    named = found.join(groups.select("group", "pg_name"), left_on="pg", right_on="pg_name")
    named = named.select("comm_key", "group").unique(maintain_order=True)
    return named.filter(pl.len().over("comm_key") == 1).with_columns(
        method=pl.lit(METHODS[0]), share=pl.lit(None, pl.Float64)
    )


def match_groups(comms: pl.DataFrame, groups: pl.DataFrame, shares: pl.DataFrame) -> pl.DataFrame:
    """comm_key -> group by rank set and size, else by call sequence (module doc): comm_key, group, method,
    share."""
    pairs = comms.select("comm_key", "nranks", "global_ranks").join(groups, how="cross")
    inside = pl.col("global_ranks").list.set_difference(pl.col("ranks")).list.len() == 0
    pairs = pairs.filter(pl.col("nranks") == pl.col("size")).with_columns(
        by_ranks=(pl.col("global_ranks").list.len() > 0) & pl.col("ranks").is_not_null() & inside
    )
    pairs = pairs.with_columns(rank_hits=pl.col("by_ranks").sum().over("comm_key"))
    candidates = pairs.filter(pl.col("by_ranks") | (pl.col("rank_hits") == 0)).join(
        shares, on=["comm_key", "group"], how="left"
    )
    candidates = candidates.with_columns(
        pl.col("share").fill_null(0.0), count=pl.len().over("comm_key")
    ).with_columns(best=pl.col("share").max().over("comm_key"))
    ties = ((pl.col("share") == pl.col("best")).sum().over("comm_key")) == 1
    by_ranks = candidates.filter(pl.col("by_ranks") & (pl.col("count") == 1)).with_columns(
        method=pl.lit(METHODS[1])
    )
    by_sequence = candidates.filter(
        ((pl.col("count") > 1) | ~pl.col("by_ranks"))
        & (pl.col("share") == pl.col("best"))
        & (pl.col("share") >= MIN_SEQUENCE_SHARE)
        & ties
    ).with_columns(method=pl.lit(METHODS[2]))
    return pl.concat([by_ranks, by_sequence]).select("comm_key", "group", "method", "share")
