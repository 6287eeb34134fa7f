"""Expert-parallel load balance from the all-to-alls' split sizes (docs/metrics.md, "MoE balance").

Split sizes count rows of dim 0 (tokens) per member of the group, in the group's rank order; a row is
`in_bytes / sum(In split size)` bytes (`out_bytes / sum(Out split size)` received). Per (group, step):

- the send matrix: bytes from each rank (its own `In split size`) to each member, summed over the step's
calls;
- each rank's load: the bytes it received (its own `Out split size`): the tokens its experts process;
- `imbalance` = max over ranks / mean over ranks of the load (1.0: balanced), and the hottest ranks (a load at
  least `HOT_LOAD` times the mean);
- the wait it causes: per rank, its wait for peers at the group's all-to-alls ("Across ranks"), and the share
  of those instances where a hottest rank arrives last.

Per group the figures are the medians over its steps.
"""

from __future__ import annotations

import polars as pl

HOT_LOAD = 1.2
"""A rank whose load is at least 1.2 times the group's mean is hot."""


def _listed(column: str) -> pl.Expr:
    return pl.col(column).str.extract_all(r"\d+").list.eval(pl.element().cast(pl.Int64))


def parsed(rows: pl.DataFrame) -> pl.DataFrame:
    """The rows with splits as lists, their row sizes in bytes (1: bytes unknown, counted in rows) and the
    group's members (null when the trace lists none)."""
    send, recv = _listed("in_split"), _listed("out_split")
    row_bytes = pl.col("in_bytes").cast(pl.Float64) / pl.col("_send").list.sum()
    return (
        rows.filter(pl.col("in_split").is_not_null() | pl.col("out_split").is_not_null())
        .with_columns(send.alias("_send"), recv.alias("_recv"), _listed("pg_ranks").alias("members"))
        .with_columns(
            row_bytes.fill_nan(None).fill_null(1.0).alias("_row_in"),
            (pl.col("out_bytes").cast(pl.Float64) / pl.col("_recv").list.sum())
            .fill_nan(None)
            .alias("_row_out"),
        )
        .with_columns(pl.col("_row_out").fill_null(pl.col("_row_in")))
    )


def send_matrix(rows: pl.DataFrame) -> pl.DataFrame:
    """Per (group, step, src, dst): bytes sent, summed over the step's calls (dst: a global rank where the
    group lists its members, else the member's place in the group)."""
    exploded = (
        rows.with_columns(pl.int_ranges(0, pl.col("_send").list.len()).alias("_j"))
        .explode("_send", "_j")
        .drop_nulls("_send")
    )
    dst = pl.when(pl.col("members").list.len() > pl.col("_j")).then(
        pl.col("members").list.get(pl.col("_j"), null_on_oob=True)
    )
    return (
        exploded.select(
            "group",
            "step",
            pl.col("rank").alias("src"),
            dst.fill_null(pl.col("_j")).alias("dst"),
            (pl.col("_send") * pl.col("_row_in")).alias("bytes"),
        )
        .group_by("group", "step", "src", "dst")
        .agg(pl.col("bytes").sum())
        .sort("group", "step", "src", "dst")
    )


def loads(rows: pl.DataFrame) -> pl.DataFrame:
    """Per (group, step, rank): bytes received (its load), bytes sent, calls; with the step's mean load, its
    load share (load / mean) and whether it is hot."""
    per_rank = rows.group_by("group", "step", "rank").agg(
        (pl.col("_recv").list.sum() * pl.col("_row_out")).sum().alias("received_bytes"),
        (pl.col("_send").list.sum() * pl.col("_row_in")).sum().alias("sent_bytes"),
        pl.len().alias("calls"),
    )
    mean = pl.col("received_bytes").mean().over("group", "step")
    return (
        per_rank.with_columns(pl.when(mean > 0).then(pl.col("received_bytes") / mean).alias("load_share"))
        .with_columns((pl.col("load_share") >= HOT_LOAD).alias("hot"))
        .sort("group", "step", "rank")
    )


def step_balance(load: pl.DataFrame) -> pl.DataFrame:
    """Per (group, step): imbalance (max / mean load), ranks, the hottest rank and its share."""
    return (
        load.group_by("group", "step")
        .agg(
            (pl.col("received_bytes").max() / pl.col("received_bytes").mean()).alias("imbalance"),
            pl.len().alias("ranks"),
            pl.col("rank").sort_by("received_bytes", descending=True).first().alias("hottest_rank"),
            pl.col("received_bytes").sum().alias("received_bytes"),
        )
        .sort("group", "step")
    )


def waits(crossrank_calls: pl.DataFrame, instances: pl.DataFrame, hot: pl.DataFrame) -> pl.DataFrame:
    """Per group: the median over (rank, step) of a rank's wait at the group's all-to-alls, the median over
    steps of the largest such wait, and the share of its usable all-to-all instances a hot rank arrives last
    at (`hot`: group, rank of its hot ranks)."""
    usable = instances.filter((pl.col("collective") == "AllToAll") & pl.col("transfer_us").is_not_null())
    per_call = crossrank_calls.select("instance", "rank", "wait_us").join(
        usable.select("instance", "group", "step"), on="instance"
    )
    per_step = per_call.group_by("group", "step", "rank").agg(pl.col("wait_us").sum())
    last = usable.select("group", "last_rank").join(
        hot.select("group", pl.col("rank").alias("last_rank"), pl.lit(True).alias("_hot")),
        on=["group", "last_rank"],
        how="left",
    )
    return (
        per_step.group_by("group")
        .agg(pl.col("wait_us").median().alias("wait_us"))
        .join(
            per_step.group_by("group", "step")
            .agg(pl.col("wait_us").max())
            .group_by("group")
            .agg(pl.col("wait_us").median().alias("max_wait_us")),
            on="group",
            how="left",
        )
        .join(
            last.group_by("group").agg(pl.col("_hot").fill_null(False).mean().alias("hot_last_share")),
            on="group",
            how="left",
        )
    )
