"""The process groups of `distributedInfo.pg_config` (docs/metrics.md, "Collectives"): each rank's groups
(`config_groups`), and the group of each communication kernel or CPU-only call whose args leave it unknown
(`with_process_groups`: by name, the rank's only group, its only group of the kernel's size, or a gloo op's
worker pool). Used by `traceview.collectives.kernels` and the reduce.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import polars as pl

from traceview.core.vocab import CPU_ONLY_CALL
from traceview.events.gloo_pools import pool_of_stream
from traceview.model.trace import Run


def canonical_ranks(ranks: pl.Expr) -> pl.Expr:
    """`"[0,1]"`, `"0, 1"` -> `"[0, 1]"`; no rank at all -> null."""
    numbers = ranks.str.extract_all(r"-?\d+")
    return pl.when(numbers.list.len() > 0).then(
        pl.concat_str(pl.lit("["), numbers.list.join(", "), pl.lit("]"))
    )


_PG_FIELDS = ("name", "desc", "ranks", "size")
_PG_PICKS: Mapping[str, str] = {
    "byname": "pg_config name",
    "only": "pg_config only group",
    "bysize": "pg_config size",
    "bypool": "pg_config gloo pool",
}
"""How a kernel's process group is found in `pg_config`, in order of preference -> its `pg_source` label."""


def config_groups_query(run: Run) -> pl.LazyFrame:
    """The query of `config_groups`, to fuse into a larger one."""
    rows = [
        (
            trace.rank,
            group.name or None,
            group.description or None,
            ",".join(map(str, group.ranks)),
            group.size or None,
            order,
        )
        for trace in run
        for order, group in enumerate(trace.meta.process_groups)
    ]
    names = ["rank", *[f"cfg_{field}" for field in _PG_FIELDS], "cfg_order"]
    schema = dict(zip(names, (pl.Int64, pl.Utf8, pl.Utf8, pl.Utf8, pl.Int64, pl.Int64), strict=True))
    return (
        pl.LazyFrame(rows, schema=schema, orient="row")
        .with_columns(canonical_ranks(pl.col("cfg_ranks")).alias("cfg_ranks"))
        .unique(["rank", "cfg_name"], keep="first", maintain_order=True)
    )


def config_groups(run: Run) -> pl.DataFrame:
    """`distributedInfo.pg_config` of every rank: `rank`, `cfg_name`, `cfg_desc`, `cfg_ranks`, `cfg_size`,
    `cfg_order` (the group's place in the rank's list: its creation order)."""
    return config_groups_query(run).collect()


DEFAULT_GROUP_DESCS = ("default_pg",)
"""Descriptions of the default (world) group, which a gloo pool may skip when nothing ran on it."""


def _pool_candidates(groups: pl.LazyFrame, frame: pl.LazyFrame) -> pl.LazyFrame:
    """Per (rank, pool): the rank's process group of the same creation order, counting its groups in
    `pg_config` order; when the rank shows one pool fewer than it has groups, the default group (unused:
    its workers ran nothing) is left out first. Ranks whose counts leave more than one way get none."""
    pools = frame.select("rank", _gloo_pool().alias("pool")).drop_nulls().unique()
    seen = pools.group_by("rank").agg((pl.col("pool").max() + 1).alias("_pools"))
    default = pl.col("cfg_desc").is_in(DEFAULT_GROUP_DESCS) | (pl.col("cfg_name") == "0")
    ordered = (
        groups.join(seen, on="rank")
        .sort("rank", "cfg_order")  # after the join: a lazy join keeps no order, and pools count in this one
        .with_columns(pl.len().over("rank").alias("_groups"), default.alias("_default"))
    )
    one_default = pl.col("_default").sum().over("rank") == 1
    keep = (pl.col("_pools") == pl.col("_groups")) | (
        (pl.col("_pools") + 1 == pl.col("_groups")) & ~pl.col("_default") & one_default
    )
    kept = ordered.filter(keep).with_columns(pl.int_range(pl.len()).over("rank").cast(pl.Int64).alias("pool"))
    return kept.select("rank", "pool", *[pl.col(f"cfg_{f}").alias(f"bypool_{f}") for f in _PG_FIELDS])


def _no_pools() -> pl.LazyFrame:
    """`_pool_candidates` of a frame without a CPU-only op: no row."""
    return pl.LazyFrame(schema=_POOL_SCHEMA)


_POOL_SCHEMA = {
    "rank": pl.Int64,
    "pool": pl.Int64,
    **{
        f"bypool_{f}": dtype
        for f, dtype in zip(_PG_FIELDS, (pl.Utf8, pl.Utf8, pl.Utf8, pl.Int64), strict=True)
    },
}


@functools.cache
def _gloo_pool() -> pl.Expr:
    """The gloo worker pool of a host-timeline gloo row (null for every other row)."""
    gloo = pl.col("name").str.contains(CPU_ONLY_CALL)
    return pl.when(gloo).then(pool_of_stream(pl.col("stream")))


def _pg_candidates(groups: pl.LazyFrame) -> dict[str, pl.LazyFrame]:
    """pg_config rows that may name a kernel's group, per way of finding it, columns prefixed by that way."""
    counted = groups.with_columns(
        pl.len().over("rank").alias("n_rank"), pl.len().over("rank", "cfg_size").alias("n_size")
    )
    rows = {
        "byname": counted.drop_nulls("cfg_name"),
        "only": counted.filter(pl.col("n_rank") == 1),
        "bysize": counted.filter((pl.col("n_size") == 1) & pl.col("cfg_size").is_not_null()),
    }
    return {
        way: frame.select("rank", *[pl.col(f"cfg_{f}").alias(f"{way}_{f}") for f in _PG_FIELDS])
        for way, frame in rows.items()
    }


def _agrees(way: str) -> pl.Expr:
    """The candidate found `way` exists and contradicts neither the group size nor the ranks of the args."""
    size_ok = pl.col("group_size").is_null() | (pl.col("group_size") == pl.col(f"{way}_size"))
    ranks_ok = pl.col("pg_ranks").is_null() | (pl.col("pg_ranks") == pl.col(f"{way}_ranks"))
    return pl.col(f"{way}_ranks").is_not_null() & size_ok & ranks_ok


@functools.cache
def _pick() -> pl.Expr:
    """Which candidate fills the group: the one of the same name, else (no name in the args) the rank's only
    group, else its only group of the kernel's size, else (a gloo op) the group of its worker pool; null when
    none agrees."""
    unnamed = pl.col("pg_name").is_null()
    return (
        pl.when(pl.col("byname_ranks").is_not_null() | pl.col("byname_desc").is_not_null())
        .then(pl.lit("byname"))
        .when(unnamed & _agrees("only"))
        .then(pl.lit("only"))
        .when(unnamed & _agrees("bysize"))
        .then(pl.lit("bysize"))
        .when(unnamed & _agrees("bypool"))
        .then(pl.lit("bypool"))
    )


def _filled(column: str, field: str) -> pl.Expr:
    picked = [pl.when(pl.col("_pick") == way).then(pl.col(f"{way}_{field}")) for way in _PG_PICKS]
    return pl.coalesce(pl.col(column), *picked).alias(column)


def with_process_groups(frame: pl.LazyFrame, groups: pl.LazyFrame, pools: bool = True) -> pl.LazyFrame:
    """`frame` (columns `rank`, `pg_name`, `pg_desc`, `pg_ranks`, `group_size` from the args) with what the
    args leave unknown filled from pg_config (`_pick`), and `pg_source`: `args` when the args name the group
    (by name or ranks), else how pg_config was used, else null. `pools` False: no row of `frame` is a
    CPU-only (gloo, MPI) op, so none is looked for in its worker pool's group."""
    found = _pg_candidates(groups)
    pooled = _pool_candidates(groups, frame) if pools else _no_pools()
    joined = (
        frame.join(
            found["byname"],
            left_on=["rank", "pg_name"],
            right_on=["rank", "byname_name"],
            how="left",
            maintain_order="left",
        )
        .join(found["only"], on="rank", how="left", maintain_order="left")
        .join(
            found["bysize"],
            left_on=["rank", "group_size"],
            right_on=["rank", "bysize_size"],
            how="left",
            maintain_order="left",
        )
        .with_columns(pl.col("pg_name").alias("byname_name"), pl.col("group_size").alias("bysize_size"))
        .with_columns(_gloo_pool().alias("_pool"))
        .join(pooled, left_on=["rank", "_pool"], right_on=["rank", "pool"], how="left", maintain_order="left")
        .drop("_pool")
        .with_columns(_pick().alias("_pick"))
    )
    return joined.with_columns(*_group_fill()).drop(_GROUP_HELPERS)


def without_process_groups(frame: pl.LazyFrame) -> pl.LazyFrame:
    """`with_process_groups` of a run whose traces list no process group (no `pg_config`): the args' group
    as it is, `pg_source` `args` where the args name it, else null."""
    return frame.with_columns(pl.when(_named_by_args()).then(pl.lit("args")).alias("pg_source"))


def _named_by_args() -> pl.Expr:
    return pl.col("pg_name").is_not_null() | pl.col("pg_ranks").is_not_null()


_GROUP_HELPERS = ["_pick", *[f"{way}_{field}" for way in _PG_PICKS for field in _PG_FIELDS]]


@functools.cache
def _group_fill() -> tuple[pl.Expr, ...]:
    """`pg_source` and the group's fields, each from the args, else from the picked pg_config row."""
    source = (
        pl.when(_named_by_args())
        .then(pl.lit("args"))
        .otherwise(pl.col("_pick").replace_strict(dict(_PG_PICKS), default=None, return_dtype=pl.Utf8))
    )
    return (
        source.alias("pg_source"),
        *[_filled(f"pg_{field}", field) for field in ("name", "desc", "ranks")],
        _filled("group_size", "size"),
    )
