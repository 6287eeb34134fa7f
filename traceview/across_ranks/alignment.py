"""Placing each rank's calls of a (group, step) cell on the reference positions (docs/metrics.md, "Across
ranks").

A call's *signature* is (collective, bytes, dtype): Send and Recv count as SendRecv; the bytes of an AllToAll
or SendRecv whose input and output differ in size (an uneven split: its members legitimately move different
amounts) are left out; a null byte count or dtype (not recorded) matches any. Two calls of different sizes or
types therefore never pair.

A rank whose calls agree with the reference at every position keeps its ordinals (the vectorised fast path:
nearly every rank of a healthy run). Any other rank is aligned by the longest common subsequence of signatures
(`lcs_table`; cells past `MAX_ALIGNED_PAIRS` call x position pairs are paired in order instead), so every
agreeing call keeps its order and a dropped, extra or different call shifts nothing after it; between two
aligned calls, leftovers of equal number on both sides are paired position by position (a *different* call),
the rest are extra calls or missing positions. The alignment is computed twice, taking matches as early as
possible and as late as possible: a rank with more calls than the reference keeps the late one (an extra call
is a copy issued just before the real one), any other the early one; positions where the two disagree are
*ambiguous* (neighbours with one signature: where the odd call sits is not known).
"""

from __future__ import annotations

from itertools import accumulate, pairwise

import polars as pl

CELL = ["group", "step"]
CELL_RANK = ["group", "step", "rank"]
KEY = ["group", "step", "position"]
SIGNATURE = ["sig_collective", "sig_size", "sig_dtype"]
REFERENCE = ["ref_collective", "ref_size_bytes", "ref_dtype"]
UNEVEN_SIZES = frozenset({"AllToAll", "SendRecv"})
"""Collectives whose members may move different amounts (uneven splits, a send paired with a receive)."""
PAIRED = {"Send": "SendRecv", "Recv": "SendRecv"}
"""A send and its receive are one instance: their signature collective is SendRecv."""
NULL_CODE = -1
MAX_ALIGNED_PAIRS = 1_000_000
"""Above this many (call, position) pairs in one rank's cell, the calls are paired in order (no alignment)."""

Pairs = list[tuple[int, int]]
Matrix = list[list[bool]]
Signature = tuple[int, int, int]


def signature_columns() -> list[pl.Expr]:
    """`sig_collective`, `sig_size`, `sig_dtype` of each call (module docstring)."""
    collective = pl.col("collective").cast(pl.Utf8).replace(PAIRED)
    in_bytes, out_bytes = pl.col("in_bytes").cast(pl.Int64), pl.col("out_bytes").cast(pl.Int64)
    uneven = collective.is_in(list(UNEVEN_SIZES)) & (in_bytes != out_bytes).fill_null(False)
    return [
        collective.alias("sig_collective"),
        pl.when(~uneven).then(pl.col("size_bytes").cast(pl.Int64)).alias("sig_size"),
        pl.col("dtype").cast(pl.Utf8).alias("sig_dtype"),
    ]


def agrees(left: list[str], right: list[str]) -> pl.Expr:
    """Signatures `left` and `right` (columns collective, size, dtype) agree: the same collective, and the
    same size and dtype wherever both are known. False when `right` is absent (no reference there)."""
    same = pl.col(left[0]).eq_missing(pl.col(right[0])) & pl.col(right[0]).is_not_null()
    for mine, theirs in zip(left[1:], right[1:], strict=True):
        same = same & (pl.col(mine).is_null() | pl.col(theirs).is_null() | (pl.col(mine) == pl.col(theirs)))
    return same


def lcs_table(match: Matrix) -> list[list[int]]:
    """`table[i][j]` = the length of the longest common subsequence of calls i.. and positions j..
    (`match[i][j]`: call i agrees with position j). Row i is the running maximum from the right of
    max(table[i + 1][j], table[i + 1][j + 1] + 1 where call i matches position j)."""
    positions = len(match[0]) if match else 0
    table = [[0] * (positions + 1) for _ in range(len(match) + 1)]
    for i in range(len(match) - 1, -1, -1):
        below = table[i + 1]
        candidate = [max(below[j], below[j + 1] + 1 if match[i][j] else 0) for j in range(positions)]
        table[i][:positions] = list(accumulate(reversed(candidate), max))[::-1]
    return table


def _front_pairs(match: Matrix) -> Pairs:
    """A longest common subsequence taking every match as early as it can: (call, position) pairs."""
    table = lcs_table(match)
    calls, positions = len(match), len(table[0]) - 1
    pairs: Pairs = []
    i = j = 0
    while i < calls and j < positions:
        if match[i][j] and table[i][j] == table[i + 1][j + 1] + 1:
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif table[i + 1][j] == table[i][j]:
            i += 1
        else:
            j += 1
    return pairs


def _back_pairs(match: Matrix) -> Pairs:
    """The same, taking every match as late as it can."""
    flipped = [row[::-1] for row in reversed(match)]
    calls, positions = len(match), len(match[0]) if match else 0
    return [(calls - 1 - i, positions - 1 - j) for i, j in reversed(_front_pairs(flipped))]


def _with_gaps(pairs: Pairs, calls: int, positions: int) -> Pairs:
    """`pairs` plus, between consecutive pairs (and at both ends), leftovers of equal number on both sides
    paired in order: calls at the same place that differ."""
    bounds = [(-1, -1), *pairs, (calls, positions)]
    out: Pairs = []
    for (i0, j0), (i1, j1) in pairwise(bounds):
        if i1 - i0 == j1 - j0:
            out.extend(zip(range(i0 + 1, i1), range(j0 + 1, j1), strict=True))
        if i1 < calls:
            out.append((i1, j1))
    return out


def align_one(mine: list[Signature], reference: list[Signature], more_calls: bool) -> tuple[Pairs, list[int]]:
    """(call, position) pairs of one rank in one cell, and the ambiguous positions (module docstring)."""
    calls, positions = len(mine), len(reference)
    if calls * positions > MAX_ALIGNED_PAIRS:
        return list(zip(range(calls), range(positions), strict=False)), []
    match = [[_same(call, ref) for ref in reference] for call in mine]
    front = _with_gaps(_front_pairs(match), calls, positions)
    back = _with_gaps(_back_pairs(match), calls, positions)
    partner_front, partner_back = {j: i for i, j in front}, {j: i for i, j in back}
    ambiguous = [j for j in range(positions) if partner_front.get(j) != partner_back.get(j)]
    return (back if more_calls else front), ambiguous


def _same(call: Signature, ref: Signature) -> bool:
    """The rule of `agrees` on integer codes: the same collective; size and dtype equal where both known."""
    return (
        ref[0] != NULL_CODE
        and call[0] == ref[0]
        and all(a == b or NULL_CODE in (a, b) for a, b in zip(call[1:], ref[1:], strict=True))
    )


def _codes(frame: pl.DataFrame, columns: list[str], vocabulary: pl.DataFrame) -> pl.DataFrame:
    """`frame` with columns `c0`, `c1`, `c2`: integer codes of the signature `columns` (null: NULL_CODE)."""
    coded = frame.with_columns(pl.col(columns[1]).cast(pl.Int64).fill_null(NULL_CODE).alias("c1"))
    for source, target, name in ((columns[0], "c0", "collective"), (columns[2], "c2", "dtype")):
        codes = vocabulary.filter(pl.col("kind") == name).select(pl.col("text").alias(source), "code")
        coded = coded.join(codes, on=source, how="left").with_columns(
            pl.col("code").fill_null(NULL_CODE).alias(target)
        )
        coded = coded.drop("code")
    return coded


def _vocabulary(calls: pl.DataFrame) -> pl.DataFrame:
    """Every collective and dtype text with an integer code."""
    texts = pl.concat(
        [
            calls.select(pl.lit("collective").alias("kind"), pl.col("sig_collective").alias("text")),
            calls.select(pl.lit("dtype").alias("kind"), pl.col("sig_dtype").alias("text")),
        ]
    )
    return texts.drop_nulls().unique().sort("kind", "text").with_row_index("code").cast({"code": pl.Int64})


def _signature_lists(
    disagreeing: pl.DataFrame, signatures: pl.DataFrame
) -> tuple[pl.DataFrame, dict[tuple[str, int], list[Signature]]]:
    """(per disagreeing (cell, rank): its `fwd` and coded signatures `sig` in order, count, ref_count; per
    cell: the reference's coded signatures in position order)."""
    vocabulary = _vocabulary(
        disagreeing.select("sig_collective", "sig_dtype").vstack(
            signatures.select(
                pl.col("ref_collective").alias("sig_collective"), pl.col("ref_dtype").alias("sig_dtype")
            )
        )
    )
    coded = pl.concat_list("c0", "c1", "c2").alias("sig")
    mine = _codes(disagreeing, SIGNATURE, vocabulary).sort(*CELL_RANK, "fwd")
    per_rank = mine.group_by(CELL_RANK, maintain_order=True).agg(
        "fwd", coded, pl.col("count").first(), pl.col("ref_count").first()
    )
    reference = _codes(signatures, REFERENCE, vocabulary).sort(*KEY).group_by(CELL).agg(coded)
    per_cell = {(group, step): [(a, b, c) for a, b, c in sigs] for group, step, sigs in reference.iter_rows()}
    return per_rank, per_cell


PLACEMENT_SCHEMA = {
    "group": pl.Utf8,
    "step": pl.Int64,
    "rank": pl.Int64,
    "fwd": pl.Int64,
    "position": pl.Int64,
}
"""A call placed by alignment: its cell and rank, its ordinal `fwd` and the position it takes."""
AMBIGUOUS_SCHEMA = {"group": pl.Utf8, "step": pl.Int64, "position": pl.Int64, "rank": pl.Int64}
"""A key a rank's alignment could not decide."""


def aligned_positions(
    disagreeing: pl.DataFrame, signatures: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """For the calls of ranks that disagree with their cell's reference: (placements with columns group, step,
    rank, fwd, position; ambiguous keys with columns group, step, position, rank)."""
    per_rank, per_cell = _signature_lists(disagreeing, signatures)
    placed: list[tuple[str, int, int, int, int]] = []
    ambiguous: list[tuple[str, int, int, int]] = []
    for row in per_rank.iter_rows(named=True):  # ranks that disagree with the reference only
        calls: list[Signature] = [(a, b, c) for a, b, c in row["sig"]]
        reference = per_cell.get((row["group"], row["step"]), [])
        pairs, unsure = align_one(calls, reference, row["count"] > row["ref_count"])
        placed.extend((row["group"], row["step"], row["rank"], row["fwd"][i], j) for i, j in pairs)
        ambiguous.extend((row["group"], row["step"], j, row["rank"]) for j in unsure)
    placements = pl.DataFrame(placed, schema=PLACEMENT_SCHEMA, orient="row")
    keys = pl.DataFrame(ambiguous, schema=AMBIGUOUS_SCHEMA, orient="row")
    return placements, keys
