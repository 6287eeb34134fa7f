"""The dimension of each line (a group's calls of one kind) from its evidence, with a confidence
(docs/metrics.md, "Parallelism dimensions").

Per line, each dimension's score is the sum of the weights of its evidence (`traceview.dimensions.evidence`);
the confidence of the best dimension is its score less the next best's, within [0, 1]. A line is named only
when that confidence is at least `THRESHOLD` and the best dimension rests on at least one of a stated layout,
the group's name, a library only that dimension uses, DDP's gradient-bucket signature or the group's ranks
(`CORROBORATING`): a mix of collectives and where they run in the step are shared by several dimensions and
frameworks, so alone they name nothing. Below, the line is `unknown`, and its best guess and the evidence seen
are still listed: a confident wrong label is worse than none.
"""

from __future__ import annotations

import polars as pl

UNKNOWN = "unknown"
THRESHOLD = 0.3
"""The least confidence (best score less the next best) at which a group is named."""
CORROBORATING = ("stated", "name", "library", "signature", "structure")
LINE = ["group", "line_kind"]
"""Kinds of evidence one of which a named dimension needs."""


def scores(evidence: pl.DataFrame) -> pl.DataFrame:
    """Per (line, dimension): the summed weight and the kinds of evidence behind it."""
    return (
        evidence.filter(pl.col("dimension").is_not_null() & (pl.col("weight") > 0))
        .group_by(*LINE, "dimension")
        .agg(pl.col("weight").sum().alias("score"), pl.col("kind").unique().sort().alias("kinds"))
    )


def decide(evidence: pl.DataFrame) -> pl.DataFrame:
    """Per line (`group`, `line_kind`): `best` (the highest score, ties by name), `score`, `runner_up`,
    `confidence`, `dimension` (`best`, or `unknown` below the threshold or without corroboration) and
    `evidence` (every sentence)."""
    ranked = scores(evidence).sort([*LINE, "score", "dimension"], descending=[False, False, True, False])
    top = ranked.group_by(*LINE, maintain_order=True).agg(
        pl.col("dimension").first().alias("best"),
        pl.col("score").first(),
        pl.col("kinds").first(),
        pl.col("dimension").get(1, null_on_oob=True).alias("runner_up"),
        pl.col("score").get(1, null_on_oob=True).fill_null(0.0).alias("_second"),
    )
    confidence = (pl.col("score") - pl.col("_second")).clip(0.0, 1.0).round(3)
    corroborated = pl.col("kinds").list.set_intersection(list(CORROBORATING)).list.len() > 0
    named = (confidence >= THRESHOLD) & corroborated
    said = evidence.group_by(*LINE).agg(
        pl.col("says").filter(pl.col("says") != "").unique(maintain_order=True).alias("evidence")
    )
    return (
        top.with_columns(confidence.alias("confidence"))
        .with_columns(pl.when(named).then(pl.col("best")).otherwise(pl.lit(UNKNOWN)).alias("dimension"))
        .drop("_second")
        .join(said, on=LINE, how="full", coalesce=True)
        .with_columns(pl.col("dimension").fill_null(UNKNOWN), pl.col("confidence").fill_null(0.0))
    )
