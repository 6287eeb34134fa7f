"""The mismatches of the matching (docs/metrics.md, "Across ranks", step 3): each rank's calls that found no
place (`extra` or `unmatched`, located at the next placed call), placed calls whose signature differs from the
reference (`different`) and positions a covering member lacks (`missing`), each with its key, its `seq` and a
detail in words (`traceview.across_ranks.matching` places the calls; this module only reports them).
"""

from __future__ import annotations

import polars as pl

from traceview.across_ranks.alignment import CELL, CELL_RANK, KEY, REFERENCE, SIGNATURE, agrees

KEY_KINDS = frozenset({"different", "missing"})
"""Mismatch kinds that make the instance at their key inconsistent (an extra or unmatched call sits between
keys, and is paired with none)."""
MISMATCH_SCHEMA = {
    "group": pl.Utf8,
    "step": pl.Int64,
    "position": pl.Int64,
    "seq": pl.Int64,
    "rank": pl.Int64,
    "kind": pl.Utf8,
    "detail": pl.Utf8,
}


def _ambiguity_note(ambiguous: pl.DataFrame, seqs: pl.DataFrame) -> pl.DataFrame:
    """Per (group, step, rank) with ambiguous keys: a note naming the seq range the mismatch may sit in."""
    ranges = ambiguous.group_by(CELL_RANK).agg(
        pl.col("position").min().alias("low"), (pl.col("position").max() + 1).alias("high")
    )
    seq_of = seqs.select(*CELL, "position", "seq")
    return (
        ranges.join(seq_of.rename({"position": "low", "seq": "seq_low"}), on=[*CELL, "low"], how="left")
        .join(seq_of.rename({"position": "high", "seq": "seq_high"}), on=[*CELL, "high"], how="left")
        .select(
            *CELL_RANK,
            pl.format(
                "; its neighbours look the same: it may sit anywhere in seq {}..{}", "seq_low", "seq_high"
            ).alias("note"),
        )
    )


def _signature_text(collective: str, size: str, dtype: str) -> pl.Expr:
    """`AllReduce 1024 B bfloat16`; `?` for an unknown size, nothing for an unknown dtype."""
    bytes_text = pl.col(size).cast(pl.Utf8).fill_null("?")
    return pl.format("{} {} B{}", pl.col(collective), bytes_text, (pl.lit(" ") + pl.col(dtype)).fill_null(""))


def mismatches_of(
    placed_all: pl.DataFrame,
    expected: pl.DataFrame,
    placed: pl.DataFrame,
    seqs: pl.DataFrame,
    ambiguous: pl.DataFrame,
) -> pl.DataFrame:
    """Every mismatch with its rank and key: extra/unmatched, different and missing calls."""
    sig = _signature_text("collective", "size_bytes", "dtype")
    unplaced = (
        placed_all.filter(~pl.col("placed"))
        .join(_ambiguity_note(ambiguous, seqs), on=CELL_RANK, how="left")
        .select(
            *CELL,
            pl.col("next_position").alias("position"),
            "rank",
            pl.when(pl.col("count") > pl.col("ref_count"))
            .then(pl.lit("extra"))
            .otherwise(pl.lit("unmatched"))
            .alias("kind"),
            pl.format(
                "call {} ({} calls here, peers {}){}",
                sig,
                pl.col("count"),
                pl.col("ref_count"),
                pl.col("note").fill_null(""),
            ).alias("detail"),
        )
    )
    ref_sig = _signature_text(*REFERENCE)
    different = placed_all.filter(pl.col("placed") & ~agrees(SIGNATURE, REFERENCE)).select(
        *KEY,
        "rank",
        pl.lit("different").alias("kind"),
        pl.format("{} where peers have {}", sig, ref_sig).alias("detail"),
    )
    missing = (
        expected.join(placed.select(*KEY, "rank"), on=[*KEY, "rank"], how="anti")
        .join(_ambiguity_note(ambiguous, seqs), on=CELL_RANK, how="left")
        .select(
            *KEY,
            "rank",
            pl.lit("missing").alias("kind"),
            pl.format(
                "no call ({} expected here){}", pl.col("ref_count"), pl.col("note").fill_null("")
            ).alias("detail"),
        )
    )
    found = pl.concat([unplaced, different, missing], how="vertical_relaxed").join(seqs, on=KEY, how="left")
    return found.select(list(MISMATCH_SCHEMA)).cast(MISMATCH_SCHEMA).sort("group", "step", "position", "rank")  # type: ignore[arg-type]


def recording_cuts(
    mismatches: pl.DataFrame, placed: pl.DataFrame, windows: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """`mismatches` split in two: those that stand, and the `missing` calls a rank's recording cut (the
    trailing positions of its last recorded step, after its last placed call there: a call still in flight,
    or whose record had not closed, when that rank's profiler stopped), where the rank holds no call there
    that found no place (then its calls are out of order, not cut). Each part in MISMATCH_SCHEMA."""
    if mismatches.height == 0 or windows.height == 0:
        return mismatches, mismatches.clear()
    last_step = windows.group_by(pl.col("rank").cast(pl.Int64)).agg(
        pl.col("step").cast(pl.Int64).max().alias("last_step")
    )
    last_placed = placed.group_by(CELL_RANK).agg(pl.col("position").max().alias("last_placed"))
    unplaced = mismatches.filter(pl.col("kind").is_in(["extra", "unmatched"])).select(CELL_RANK).unique()
    located = (
        mismatches.join(last_step, on="rank", how="left")
        .join(last_placed, on=CELL_RANK, how="left")
        .join(unplaced.with_columns(pl.lit(True).alias("unplaced")), on=CELL_RANK, how="left")
    )
    trailing = (
        (pl.col("kind") == "missing")
        & (pl.col("step") == pl.col("last_step"))
        & (pl.col("position") > pl.col("last_placed").fill_null(-1))
        & pl.col("unplaced").is_null()
    )
    marked = located.with_columns(trailing.fill_null(False).alias("cut"))
    columns = list(MISMATCH_SCHEMA)
    return marked.filter(~pl.col("cut")).select(columns), marked.filter(pl.col("cut")).select(columns)
