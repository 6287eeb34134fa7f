"""Sizes known on a collective's peers (docs/metrics.md, "Collectives", bytes): a call whose own trace does
not size it (its `record_param_comms` lost, a shape not recorded) takes the size of the instance it was
matched to, which the other members' traces give (`bytes_source` `peers`), and its bandwidths follow."""

from __future__ import annotations

import polars as pl

from traceview.core.costmodel import bandwidth_exprs


def with_peer_sizes(kernels: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    """`kernels` (`comm_kernels` rows) with `size_bytes` filled where unknown from the other members of the
    matched instance of the call it starts (`calls`: instance, rank, start_us, size_bytes), when the members
    that know it agree on one value; `bytes_source` `peers` there, and `algbw_Bps`/`busbw_Bps` recomputed."""
    if calls.height == 0 or kernels.height == 0:
        return kernels
    agreed = (
        calls.drop_nulls("size_bytes")
        .group_by("instance")
        .agg(
            pl.col("size_bytes").n_unique().alias("_sizes"), pl.col("size_bytes").first().alias("_peer_bytes")
        )
        .filter(pl.col("_sizes") == 1)
    )
    sized = (
        calls.select("instance", "rank", "start_us")
        .join(agreed.select("instance", "_peer_bytes"), on="instance")
        .unique(["rank", "start_us"], keep="first")
        .select(pl.col("rank").cast(pl.Int64), "start_us", pl.col("_peer_bytes").cast(pl.Int64))
    )
    joined = kernels.join(sized, on=["rank", "start_us"], how="left", maintain_order="left")
    filled = pl.col("size_bytes").is_null() & pl.col("_peer_bytes").is_not_null()
    if not joined.select(filled.any()).item():
        return kernels
    with_size = joined.with_columns(
        pl.when(filled).then(pl.col("_peer_bytes")).otherwise(pl.col("size_bytes")).alias("size_bytes"),
        pl.when(filled).then(pl.lit("peers")).otherwise(pl.col("bytes_source")).alias("bytes_source"),
    )
    algbw, busbw = bandwidth_exprs(
        pl.col("collective"), pl.col("group_size"), pl.col("size_bytes"), pl.col("dur_us")
    )
    return with_size.with_columns(algbw.alias("algbw_Bps"), busbw.alias("busbw_Bps")).select(kernels.columns)
