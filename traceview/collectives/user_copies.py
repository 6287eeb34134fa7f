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


def _rank_user_copies(rank: int, cpu: pl.LazyFrame) -> pl.LazyFrame:
    """`rank`, `correlation`, `user_copy` (true) of the launches whose innermost enclosing operator on
    their thread (the latest started before the launch, still running) is a PyTorch operator."""
    keys = ["pid", "tid"]
    launches = (
        cpu.filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null())
        .select(*keys, "correlation", pl.col("start_us").alias("at_us"))
        .sort("at_us")
    )
    ops = (
        cpu.filter(pl.col("kind") == "op")
        .select(*keys, pl.col("start_us").alias("at_us"), pl.col("end_us").alias("_end"), pl.col("name"))
        .sort("at_us")
    )
    inside = launches.join_asof(ops, on="at_us", by=keys, strategy="backward", check_sortedness=False)
    return inside.filter(
        (pl.col("at_us") <= pl.col("_end")) & pl.col("name").str.contains(USER_OPERATOR)
    ).select(
        pl.lit(rank, pl.Int64).alias("rank"),
        pl.col("correlation").cast(pl.Int64),
        pl.lit(True).alias("user_copy"),
    )


def user_copy_launches(run: Run) -> pl.DataFrame:
    """The launches of `run` made inside a PyTorch operator (`USER_COPY_SCHEMA`), one query for all ranks."""
    frames = [_rank_user_copies(trace.rank, trace.cpu.lazy()) for trace in aligned_ranks(run)]
    if not frames:
        return pl.DataFrame(schema=USER_COPY_SCHEMA)
    return pl.concat(frames).unique(["rank", "correlation"]).collect()
