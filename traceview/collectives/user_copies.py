"""Memory copies the user's code launched (docs/metrics.md, "Collectives", copy-engine transfers).

A copy whose launch (its runtime call, by correlation id) lies inside a PyTorch operator (`aten::copy_`,
`aten::to`, `aten::_local_scalar_dense`, ...) on the same thread was launched by the user's code, not by a
communication library: it is never a collective's transfer, whatever stream it shares with communication
kernels. Used by `traceview.collectives.linking.with_copy_engine`.
"""

from __future__ import annotations

import polars as pl

from traceview.model.time_base import aligned_ranks
from traceview.model.trace import Run

USER_OPERATOR = r"^aten::"
"""Host operators whose copies are the user's (PyTorch's tensor operators)."""

USER_COPY_SCHEMA = {"rank": pl.Int64, "correlation": pl.Int64, "user_copy": pl.Boolean}


_KEYS = ["pid", "tid"]


def _rank_user_copies(rank: int, cpu: pl.LazyFrame, copies: pl.LazyFrame) -> pl.LazyFrame:
    """`rank`, `correlation`, `user_copy` (true) of the launches of `copies` (their `correlation`) whose
    innermost enclosing operator on their thread (the latest started before the launch, still running) is a
    PyTorch operator; the operators of other threads are never read."""
    launches = (
        cpu.filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null())
        .join(copies, on="correlation", how="semi")
        .select(*_KEYS, "correlation", pl.col("start_us").alias("at_us"))
        .sort("at_us")
    )
    ops = (
        cpu.filter(pl.col("kind") == "op")
        .join(launches.select(_KEYS).unique(), on=_KEYS, how="semi")
        .select(*_KEYS, pl.col("start_us").alias("at_us"), pl.col("end_us").alias("_end"), pl.col("name"))
        .sort("at_us")
    )
    inside = launches.join_asof(ops, on="at_us", by=_KEYS, strategy="backward", check_sortedness=False)
    return inside.filter(
        (pl.col("at_us") <= pl.col("_end")) & pl.col("name").str.contains(USER_OPERATOR)
    ).select(
        pl.lit(rank, pl.Int64).alias("rank"),
        pl.col("correlation").cast(pl.Int64),
        pl.lit(True).alias("user_copy"),
    )


def user_copy_launches(run: Run, copies: pl.DataFrame) -> pl.DataFrame:
    """Of the copies `copies` names (`rank`, `correlation`: the device copies whose launch is to be judged),
    those launched inside a PyTorch operator (`USER_COPY_SCHEMA`), one query for every rank with copies."""
    wanted = copies.select("rank", pl.col("correlation").cast(pl.Int64)).lazy()
    ranks = set(copies.get_column("rank").to_list())
    frames = [
        _rank_user_copies(
            trace.rank, trace.cpu.lazy(), wanted.filter(pl.col("rank") == trace.rank).drop("rank")
        )
        for trace in aligned_ranks(run)
        if trace.rank in ranks
    ]
    if not frames:
        return pl.DataFrame(schema=USER_COPY_SCHEMA)
    return pl.concat(frames).unique(["rank", "correlation"]).collect()
