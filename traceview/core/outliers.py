"""The outlier rule of every per-rank figure (docs/metrics.md, "Report"): Tukey's fences.

A rank's value is an outlier when it lies more than `FENCE` interquartile ranges beyond the first or third
quartile of the ranks' values (linear quantiles; at least `MIN_RANKS` ranks with a value). The named outliers
of one figure are its `NAMED` distinct values (to 3 significant digits) farthest from the median, each with
the ranks at it: an analysis publishes them (`rank_outliers`), the report names them beside its distributions.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

FENCE = 1.5
"""Interquartile ranges beyond the quartiles (Tukey's fences)."""
MIN_RANKS = 4
"""Fewer ranks with a value have no quartiles worth the name: no outliers."""
NAMED = 5
"""Distinct outlying values named per figure, the farthest from the median first."""

OUTLIER_SCHEMA = {"figure": pl.String(), "value": pl.Float64(), "ranks": pl.List(pl.Int64())}


def _one(per_rank: pl.DataFrame, column: str) -> pl.DataFrame:
    values = per_rank.get_column(column).drop_nulls()
    if values.len() < MIN_RANKS:
        return pl.DataFrame(schema=OUTLIER_SCHEMA)
    low, high = values.quantile(0.25, "linear") or 0.0, values.quantile(0.75, "linear") or 0.0
    fence = FENCE * (high - low)
    median = float(values.median() or 0.0)  # type: ignore[arg-type]
    far = per_rank.filter((pl.col(column) > high + fence) | (pl.col(column) < low - fence))
    return (
        far.select(
            pl.col(column).cast(pl.Float64).round_sig_figs(3).alias("value"), pl.col("rank").cast(pl.Int64)
        )
        .group_by("value")
        .agg(pl.col("rank").sort().alias("ranks"))
        .sort((pl.col("value") - median).abs(), "value", descending=[True, False])
        .head(NAMED)
        .select(pl.lit(column).alias("figure"), "value", "ranks")
    )


def rank_outliers(per_rank: pl.DataFrame, columns: Sequence[str]) -> pl.DataFrame:
    """The named outliers of each figure column of a per-rank table (a `rank` column and the figures): one row
    per (figure, value) with its ranks, the farthest from the median first within a figure."""
    present = [c for c in columns if c in per_rank.columns]
    frames = [_one(per_rank, column) for column in present]
    return pl.concat(frames) if frames else pl.DataFrame(schema=OUTLIER_SCHEMA)
