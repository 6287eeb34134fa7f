"""Views of one NCCL_DEBUG log (docs/metrics.md, "NCCL log"): its communicators, hosts, collectives and
warnings summarised, for the `nccl` command and the join.
"""

from __future__ import annotations

import polars as pl

from traceview.model.nccl_log import NcclLog


def degraded_transports(log: NcclLog) -> pl.DataFrame:
    """The transport connections flagged degraded, with their reason."""
    return log.transports.filter(pl.col("degraded"))


def comm_group_expr() -> pl.Expr:
    """The key of a communicator across ranks: its commId (2.16+), else `nranks=N` (older logs lack an id)."""
    return pl.coalesce(pl.col("comm_id"), pl.format("nranks={}", pl.col("nranks")))


def communicator_summary(log: NcclLog) -> pl.DataFrame:
    """One row per communicator (`comm_group_expr`): nranks, ranks seen, hosts, nodes, transports, channels.

    Columns: comm_group, nranks, ranks_seen, hosts, n_nodes, init_complete (ranks that printed Init COMPLETE),
    transports (sorted distinct kinds), channels (distinct ring channels seen).
    """
    comms = log.communicators.with_columns(comm_group=comm_group_expr())
    keys = ["host", "pid", "comm"]
    owners = comms.select([*keys, "comm_group"])
    transports = (
        log.transports.join(owners, on=keys, how="inner", nulls_equal=True)
        .group_by("comm_group")
        .agg(transports=pl.col("kind").unique().sort())
    )
    channels = (
        log.rings.join(owners, on=keys, how="inner", nulls_equal=True)
        .group_by("comm_group")
        .agg(channels=pl.col("channel").n_unique().cast(pl.Int64()))
    )
    summary = comms.group_by("comm_group", maintain_order=True).agg(
        nranks=pl.col("nranks").max(),
        ranks_seen=pl.col("rank").n_unique().cast(pl.Int64()),
        hosts=pl.col("host").drop_nulls().n_unique().cast(pl.Int64()),
        n_nodes=pl.col("n_nodes").max(),
        init_complete=(pl.col("init_state") == "COMPLETE").sum().cast(pl.Int64()),
    )
    return summary.join(transports, on="comm_group", how="left").join(channels, on="comm_group", how="left")


def hosts_by_rank(log: NcclLog) -> pl.DataFrame:
    """Global rank -> host, from the communicators whose size is the largest seen (the world): rank, host."""
    comms = log.communicators.filter(pl.col("host").is_not_null())
    if comms.is_empty():
        return pl.DataFrame(schema={"rank": pl.Int64(), "host": pl.String()})
    world = comms.filter(pl.col("nranks") == pl.col("nranks").max())
    return world.select("rank", "host").unique().sort("rank", "host")


def collective_summary(log: NcclLog) -> pl.DataFrame:
    """COLL lines per (op, dtype), over every call of the log (`call_totals`): calls, total bytes (calls x S,
    `traceview.parsers.nccl_log._rules.with_call_size`), distinct communicators and processes."""
    return (
        log.call_totals.group_by("op", "dtype")
        .agg(
            calls=pl.col("calls").sum(),
            bytes=pl.col("bytes").sum(),
            comms=pl.struct("host", "pid", "comm").n_unique().cast(pl.Int64()),
            processes=pl.struct("host", "pid").n_unique().cast(pl.Int64()),
        )
        .sort("calls", "op", "dtype", descending=[True, False, False], nulls_last=True)
    )


def warning_counts(log: NcclLog) -> pl.DataFrame:
    """Warnings per kind, over every warning of the log (`warning_totals`): kind, count, first text seen."""
    return log.warning_totals.sort("count", "line", descending=[True, False]).select(
        "kind", "count", "example"
    )
