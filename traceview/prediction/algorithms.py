"""The algorithm an NCCL or RCCL log says ran, per (collective, message size), for the pricing
(docs/metrics.md, "Predicted gamma", Links): NCCL_DEBUG's TUNING lines name NCCL's choice per call; the
commonest choice of each (collective, size bucket of NCCL's byte count) is the model's algorithm of the
calls of that collective and bucket (`traceview.core.algorithms`)."""

from __future__ import annotations

import polars as pl

from traceview.collectives.tables import size_bucket_exprs
from traceview.core.algorithms import LOGGED_ALGORITHMS
from traceview.core.costmodel import collective_key

ANY_COLLECTIVE = "any"
"""The collective of a TUNING line that does not name one (NCCL before 2.23): its choice holds for every
collective of that size."""
SHARD_SIZED = ("allgather", "reducescatter")
"""Collectives whose NCCL byte count is one rank's shard (S / n), not S (docs/metrics.md, "Collectives")."""


def logged_algorithms(choices: pl.DataFrame) -> tuple[tuple[str, int, str], ...]:
    """(collective key or `any`, size bucket's lower bound in bytes, the model's algorithm) of the commonest
    choice per (collective, size bucket) of the NCCL join's TUNING choices (`NcclJoin.algorithms`: op,
    size_bucket_bytes, algo, choices), those the model prices (`LOGGED_ALGORITHMS`)."""
    if choices.height == 0:
        return ()
    top = (
        choices.filter(pl.col("size_bucket_bytes").is_not_null())
        .sort("choices", "algo", descending=[True, False])
        .group_by("op", "size_bucket_bytes", maintain_order=True)
        .first()
        .with_columns(pl.col("algo").str.to_uppercase().replace_strict(LOGGED_ALGORITHMS, default=None))
        .filter(pl.col("algo").is_not_null())
        .sort("op", "size_bucket_bytes")
    )
    return tuple(
        (ANY_COLLECTIVE if op == ANY_COLLECTIVE else collective_key(op), int(bucket), str(algo))
        for op, bucket, algo in top.select("op", "size_bucket_bytes", "algo").iter_rows()
    )


def logged_algorithm(calls: pl.DataFrame, logged: tuple[tuple[str, int, str], ...], n: pl.Expr) -> pl.Series:
    """Per call, the model's algorithm the logs name for its collective and size (that collective's choice,
    else the choice of a line naming none); null where they name none."""
    if not logged or calls.height == 0:
        return pl.Series("algorithm", [None] * calls.height, dtype=pl.Utf8)
    table = pl.DataFrame(logged, schema=["_op", "_bucket", "algorithm"], orient="row")
    key = pl.col("collective").str.to_lowercase().str.replace_all("[^a-z]", "")
    nccl_bytes = (
        pl.when(key.is_in(SHARD_SIZED)).then(pl.col("size_bytes") / n).otherwise(pl.col("size_bytes"))
    )
    keyed = calls.select(key.alias("_op"), size_bucket_exprs(nccl_bytes)[1].alias("_bucket")).with_row_index(
        "_row"
    )
    named = keyed.join(table, on=["_op", "_bucket"], how="left")
    fallback = keyed.join(
        table.filter(pl.col("_op") == ANY_COLLECTIVE).drop("_op"), on="_bucket", how="left"
    ).select("_row", pl.col("algorithm").alias("_any"))
    found = named.join(fallback, on="_row", how="left").sort("_row")
    return found.select(pl.coalesce("algorithm", "_any").alias("algorithm")).to_series()
