"""The process group of gloo calls no trace names and no worker pool settled (docs/metrics.md, "Parallelism
dimensions", gloo process groups), read across ranks for the dimensions analysis.

gloo runs a send or a receive on the calling thread, not on a worker, so its pool says nothing; and a rank
whose pools are fewer than its groups less the default leaves its pools ambiguous. Two steps, on the calls of
an unknown group (`pg_key` unknown, the group being the stream):

1. a Send and the Recv of the same size on another rank that ends nearest to it are one transfer: the rank's
   partner there is its commonest such peer, checked against the peers' own groups found so (a peer whose
   group is not the default and leaves the rank out is dropped, one whose group holds it preferred), and the
   group is the rank's smallest `pg_config` group holding both (unique, else unresolved);
2. a rank's worker pools still unknown take, in creation order, its groups less the default and less those
   step 1 found, when the counts agree.

Only the description and ranks of the calls are filled (their group key stays the stream): what the evidence
rules read.
"""

from __future__ import annotations

import polars as pl

from traceview.events.gloo_pools import pool_of_stream

P2P = ("Send", "Recv", "SendRecv")
DEFAULT_DESCS = ("default_pg",)


def _pairs(calls: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, group, peer): how many of the rank's Sends end nearest a Recv of the same size on the peer,
    or the peer's Sends nearest the rank's Recvs (`pairs`)."""
    sends = calls.filter(pl.col("collective") == "Send").select("rank", "group", "size_bytes", "end_us")
    recvs = calls.filter(pl.col("collective") == "Recv").select(
        pl.col("rank").alias("peer"), "group", "size_bytes", pl.col("end_us").alias("_end")
    )
    if sends.height == 0 or recvs.height == 0:
        return pl.DataFrame(schema={"rank": pl.Int64, "group": pl.Utf8, "peer": pl.Int64, "pairs": pl.UInt32})
    paired = (
        sends.sort("end_us")
        .join_asof(
            recvs.sort("_end"),
            left_on="end_us",
            right_on="_end",
            by=["group", "size_bytes"],
            strategy="nearest",
            check_sortedness=False,
        )
        .filter(pl.col("peer").is_not_null() & (pl.col("peer") != pl.col("rank")))
    )
    both = pl.concat(
        [
            paired.select("rank", "group", "peer"),
            paired.select(pl.col("peer").alias("rank"), "group", pl.col("rank").alias("peer")),
        ]
    )
    return both.group_by("rank", "group", "peer").len("pairs")


def _commonest(pairs: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, group): the peer of the most pairs, those `confirmed` first when marked (ties: the lowest
    rank)."""
    keys = ["confirmed", "pairs", "peer"] if "confirmed" in pairs.columns else ["pairs", "peer"]
    ordered = pairs.sort(keys, descending=[True] * (len(keys) - 1) + [False])
    return ordered.group_by("rank", "group", maintain_order=True).agg(pl.col("peer").first())


def _agreeing(pairs: pl.DataFrame, first: pl.DataFrame) -> pl.DataFrame:
    """`pairs` checked against each peer's own group found from its commonest peer (`first`): a peer whose
    group is not the default one and leaves the rank out is dropped, one whose group holds the rank is
    `confirmed` (two pipelines in lockstep pair ranks of different pipelines now and then)."""
    theirs = first.select(
        pl.col("rank").alias("peer"),
        "group",
        pl.col("cfg_ranks").str.extract_all(r"-?\d+").cast(pl.List(pl.Int64)).alias("_theirs"),
        pl.col("cfg_desc").is_in(DEFAULT_DESCS).alias("_default"),
    )
    joined = pairs.join(theirs, on=["peer", "group"], how="left")
    holds = pl.col("_theirs").list.contains(pl.col("rank")).fill_null(False)
    settled = pl.col("_theirs").is_not_null() & ~pl.col("_default").fill_null(False)
    return (
        joined.filter(~settled | holds)
        .with_columns((settled & holds).alias("confirmed"))
        .drop("_theirs", "_default")
    )


def _containing(partners: pl.DataFrame, config: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, group): the rank's smallest pg_config group holding it and its partner, when unique."""
    members = config.with_columns(
        pl.col("cfg_ranks").str.extract_all(r"-?\d+").cast(pl.List(pl.Int64)).alias("_m")
    )
    joined = partners.join(members, on="rank").filter(pl.col("_m").list.contains(pl.col("peer")))
    smallest = joined.filter(pl.col("cfg_size") == pl.col("cfg_size").min().over("rank", "group"))
    unique = smallest.filter(pl.len().over("rank", "group") == 1)
    return unique.select("rank", "group", "cfg_name", "cfg_desc", "cfg_ranks", "cfg_size")


def _pools(calls: pl.DataFrame, config: pl.DataFrame, found: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, group) of a worker pool: the rank's groups less the default and those `found`, in creation
    order, when as many as its unresolved pools."""
    pools = (
        calls.select("rank", "group", pool_of_stream(pl.col("stream")).alias("pool"))
        .drop_nulls("pool")
        .unique()
        .join(found.select("rank", "group"), on=["rank", "group"], how="anti")
        .sort("rank", "pool")
    )
    left = (
        config.filter(~pl.col("cfg_desc").is_in(DEFAULT_DESCS) & (pl.col("cfg_name") != "0"))
        .join(found.select("rank", "cfg_name"), on=["rank", "cfg_name"], how="anti")
        .sort("rank", "cfg_order")
    )
    counts = pools.group_by("rank").len("pools").join(left.group_by("rank").len("groups"), on="rank")
    agreed = counts.filter(pl.col("pools") == pl.col("groups")).select("rank")
    ordered = [
        frame.join(agreed, on="rank").with_columns(pl.int_range(pl.len()).over("rank").alias("_k"))
        for frame in (pools, left)
    ]
    return (
        ordered[0]
        .join(ordered[1], on=["rank", "_k"])
        .select("rank", "group", "cfg_name", "cfg_desc", "cfg_ranks", "cfg_size")
    )


def with_gloo_groups(calls: pl.DataFrame, config: pl.DataFrame) -> pl.DataFrame:
    """`calls` (with `group`) with `pg_desc`, `pg_ranks`, `group_size` filled for the (rank, group) cells of
    an
    unknown process group that the two steps settle (module docstring)."""
    unknown = calls.filter(pl.col("pg_key") == "unknown")
    if unknown.height == 0 or config.height == 0:
        return calls
    pairs = _pairs(unknown.filter(pl.col("collective").is_in(list(P2P))))
    first = _containing(_commonest(pairs), config)
    by_pair = _containing(_commonest(_agreeing(pairs, first)), config)
    found = pl.concat([by_pair, _pools(unknown, config, by_pair)])
    filled = calls.join(found, on=["rank", "group"], how="left")
    known = pl.col("pg_key") != "unknown"
    return filled.with_columns(
        pl.when(known).then(pl.col("pg_desc")).otherwise(pl.coalesce("pg_desc", "cfg_desc")).alias("pg_desc"),
        pl.when(known)
        .then(pl.col("pg_ranks"))
        .otherwise(pl.coalesce("pg_ranks", "cfg_ranks"))
        .alias("pg_ranks"),
        pl.coalesce("group_size", "cfg_size").alias("group_size"),
    ).drop("cfg_name", "cfg_desc", "cfg_ranks", "cfg_size")
