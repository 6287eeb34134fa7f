"""What each process group's calls and ranks look like: the features the evidence rules read
(docs/metrics.md, "Parallelism dimensions", evidence).

A group is a kernel's `group` (`traceview.across_ranks.matching.group_expr`: its process group, else its
stream). A line is a (group, kind): the group's calls of one collective family (`FAMILIES`, `other` for the
rest: broadcasts, barriers), since one group can carry two dimensions' traffic (TorchRec runs its DDP
all-reduce and its sparse all-to-alls on one stream). Per line, over every rank: the group's description and
ranks, its size, how the group's calls split by family (shares of calls), the spread of the line's message
sizes (largest S / smallest), its calls per (rank, step), the share of the line's own calls that start early
in the step's compute (the forward pass: `traceview.dimensions.group_time.group_phases`), the communication
libraries of its kernels (`comm_library`) and how the group's ranks lie (contiguous, strided, on one node, the
whole world).
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from traceview.across_ranks.matching import group_expr
from traceview.events.classify import HOST_KIND

FAMILIES: Mapping[str, tuple[str, ...]] = {
    "ar": ("AllReduce",),
    "agrs": ("AllGather", "ReduceScatter"),
    "a2a": ("AllToAll",),
    "p2p": ("SendRecv", "Send", "Recv"),
}
"""Collective families the rules weigh, by the collectives they hold."""
OTHER_KIND = "other"
"""The kind of a line whose collectives no family holds (broadcast, reduce, gather, barrier)."""
LINE_KEY = ["group", "kind"]
"""A line of the dimensions analysis: a group's calls of one kind."""


def kind_expr(collective: pl.Expr | None = None) -> pl.Expr:
    """The line kind (a key of `FAMILIES`, else `OTHER_KIND`) of each row's `collective`."""
    by_collective = {name: family for family, names in FAMILIES.items() for name in names}
    column = pl.col("collective") if collective is None else collective
    return column.replace_strict(by_collective, default=OTHER_KIND, return_dtype=pl.Utf8).alias("kind")


def communicated() -> pl.Expr:
    """The rows of the collectives' table that moved data somewhere: device kernels and copy-engine
    transfers, and host collectives (gloo, MPI) where the call ran on a host thread."""
    return pl.col("on_device") | (pl.col("comm_kind") == HOST_KIND).fill_null(False)


def calls_in_steps(kernels: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """The calls (a call's first kernel, copy or host op; `communicated`) with `group` and their `step` (the
    rank's window holding their start; calls outside every window dropped)."""
    calls = kernels.filter(pl.col("first_in_call") & communicated()).with_columns(
        group_expr().alias("group"), kind_expr()
    )
    placed = calls.sort("start_us").join_asof(
        windows.select("rank", "step", "window_start_us", "window_end_us").sort("window_start_us"),
        left_on="start_us",
        right_on="window_start_us",
        by="rank",
        check_sortedness=False,
    )
    return placed.filter(pl.col("step").is_not_null() & (pl.col("start_us") < pl.col("window_end_us")))


def _family_shares() -> list[pl.Expr]:
    return [
        pl.col("collective").is_in(list(names)).mean().alias(f"{family}_share")
        for family, names in FAMILIES.items()
    ]


def _early(collectives: tuple[str, ...] | None, name: str) -> pl.Expr:
    mine = pl.col("collective").is_in(list(collectives)) if collectives else pl.lit(True)
    calls = pl.col("calls").filter(mine).sum()
    return pl.when(calls > 0).then(pl.col("early_calls").filter(mine).sum() / calls).alias(name)


def _early_bytes() -> pl.Expr:
    """The share of the bytes that move early (null without a known size; a phase from an older map: none)."""
    if_known = pl.col("bytes").sum() > 0
    return (
        pl.when(if_known).then(pl.col("early_bytes").sum() / pl.col("bytes").sum()).alias("early_bytes_share")
    )


def early_shares(phases: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Per `keys` (a group, or a line): the share of its calls that start early in the step's compute
    (`group_time.group_phases`), of every collective, of its all-gathers and of its reduce-scatters, and the
    share of its bytes that move early (`early_bytes_share`: the call count says little when one all-reduce
    is a thousand times another)."""
    for column in ("bytes", "early_bytes"):
        phases = (
            phases
            if column in phases.columns
            else phases.with_columns(pl.lit(None, pl.Float64).alias(column))
        )
    return (
        phases.with_columns(kind_expr())
        .group_by(keys)
        .agg(
            _early(None, "early_share"),
            _early_bytes(),
            _early(("AllGather",), "ag_early"),
            _early(("ReduceScatter",), "rs_early"),
        )
    )


def group_calls(calls: pl.DataFrame, phases: pl.DataFrame, keys: list[str] | None = None) -> pl.DataFrame:
    """Per group (`keys` LINE_KEY: per line): desc, pg_name, ranks listed, n, calls, rank-steps, family
    shares, size spread, median S, `unsized_share` (calls of unknown size), `call_us` (its calls' first
    kernels' time), `libraries` (the `comm_library` ids of its kernels, when the calls carry them) and the
    early shares (`early_shares`)."""
    keys = keys or ["group"]
    sizes = pl.col("size_bytes").filter(pl.col("size_bytes") > 0)
    libraries = (
        pl.col("comm_library").drop_nulls().unique().sort()
        if "comm_library" in calls.columns
        else pl.lit([], dtype=pl.List(pl.Utf8)).first()
    )
    found = calls.group_by(keys).agg(
        pl.col("pg_desc").drop_nulls().mode().first().alias("desc"),
        pl.col("pg_name").drop_nulls().first(),
        pl.col("pg_ranks").drop_nulls().first().alias("ranks_text"),
        pl.col("group_size").drop_nulls().median().alias("n"),
        pl.len().alias("calls"),
        pl.struct("rank", "step").n_unique().alias("rank_steps"),
        pl.col("rank").unique().sort().alias("ranks_seen"),
        *_family_shares(),
        (sizes.max() / sizes.min()).alias("size_spread"),
        sizes.median().alias("median_bytes"),
        pl.col("size_bytes").is_null().mean().alias("unsized_share"),
        pl.col("dur_us").sum().alias("call_us"),
        libraries.alias("libraries"),
    )
    return found.join(early_shares(phases, keys), on=keys, how="left")


def with_structure(groups: pl.DataFrame, ranks_per_node: int, world: int | None) -> pl.DataFrame:
    """`groups` with the structure of their listed ranks: `listed` (a rank list known), `contiguous` (stride
    1), `stride` (the constant step between ranks, null when uneven), `nodes` (rank // ranks per node),
    `world`
    (every rank of the job)."""
    ranks = pl.col("ranks_text").str.extract_all(r"-?\d+").list.eval(pl.element().cast(pl.Int64))
    steps = pl.col("_ranks").list.diff(null_behavior="drop")
    return (
        groups.with_columns(ranks.alias("_ranks"))
        .with_columns(
            (pl.col("_ranks").list.len() >= 2).fill_null(False).alias("listed"),
            pl.when(steps.list.n_unique() == 1).then(steps.list.first()).alias("stride"),
            pl.col("_ranks").list.eval(pl.element() // ranks_per_node).list.n_unique().alias("nodes"),
            ((pl.col("_ranks").list.len() == world) if world else pl.lit(False)).alias("world"),
        )
        .with_columns(
            (pl.col("stride") == 1).fill_null(False).alias("contiguous"),
            pl.col("_ranks").alias("ranks"),
            (pl.col("calls") / pl.col("rank_steps")).alias("calls_per_step"),
        )
        .drop("_ranks")
    )
