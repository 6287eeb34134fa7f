"""Expert-parallel load balance from the all-to-alls' split sizes (docs/metrics.md, "MoE balance").

Split sizes count rows of dim 0 (tokens) per member of the group, in the group's rank order; a row is
`in_bytes / sum(In split size)` bytes (`out_bytes / sum(Out split size)` received). Per (group, step):

- the send matrix: bytes from each rank (its own `In split size`) to each member, summed over the step's
calls;
- each rank's load: the bytes it received (its own `Out split size`): the tokens its experts process;
- `imbalance` of one call (the k-th all-to-all of the step on every rank of the group) = max over ranks / mean
  over ranks of the bytes received in it; of the step, the largest over its calls (a dispatch concentrates
  tokens on a hot expert's rank, the combine that returns them does not); 1.0: balanced. The hottest ranks:
  a step load at least `HOT_LOAD` times the group's mean in the step's most imbalanced call;
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
    """Per (group, src, dst): bytes sent per step (summed over a step's calls, the mean over steps; dst: a
    global rank where the group lists its members, else the member's place in the group)."""
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
        .group_by("group", "src", "dst")
        .agg((pl.col("bytes").sum() / pl.col("step").n_unique()).alias("bytes"))
        .sort("group", "src", "dst")
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


def call_loads(rows: pl.DataFrame) -> pl.DataFrame:
    """Per (group, step, call ordinal, rank): bytes received in that call, and the rank's share of the call's
    mean."""
    ordinal = pl.col("start_us").rank("ordinal").over("group", "step", "rank").cast(pl.Int64) - 1
    received = (pl.col("_recv").list.sum() * pl.col("_row_out")).alias("received_bytes")
    calls = rows.select("group", "step", "rank", ordinal.alias("call"), received)
    mean = pl.col("received_bytes").mean().over("group", "step", "call")
    return calls.with_columns(pl.when(mean > 0).then(pl.col("received_bytes") / mean).alias("load_share"))


def step_balance(per_call: pl.DataFrame) -> pl.DataFrame:
    """Per (group, step): imbalance (the largest max / mean over its calls), ranks, the call it was found in,
    the hottest rank there and the step's bytes received."""
    calls = per_call.group_by("group", "step", "call").agg(
        (pl.col("received_bytes").max() / pl.col("received_bytes").mean()).alias("imbalance"),
        pl.len().alias("ranks"),
        pl.col("rank").sort_by("received_bytes", descending=True).first().alias("hottest_rank"),
        pl.col("received_bytes").sum(),
    )
    worst = calls.sort(["group", "step", "imbalance", "call"], descending=[False, False, True, False])
    return (
        worst.group_by("group", "step", maintain_order=True)
        .agg(
            pl.col("imbalance").first(),
            pl.col("ranks").max(),
            pl.col("call").first().alias("worst_call"),
            pl.col("hottest_rank").first(),
            pl.col("received_bytes").sum(),
        )
        .sort("group", "step")
    )


def hot_ranks(per_call: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """Per (group, rank): its median load share in each step's most imbalanced call; hot at `HOT_LOAD`."""
    worst = per_call.join(
        steps.select("group", "step", pl.col("worst_call").alias("call")), on=["group", "step", "call"]
    )
    return (
        worst.group_by("group", "rank")
        .agg(pl.col("load_share").median())
        .with_columns((pl.col("load_share") >= HOT_LOAD).alias("hot"))
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
