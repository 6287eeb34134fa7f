"""The tests behind `traceview compare` and `traceview trend` (docs/metrics.md, "Compare and trend").

- `mann_whitney`: the two-sided Mann-Whitney U test of two samples, ranks by polars (average ranks for ties).
  Without ties and both samples at most `EXACT_MAX` long, p is exact (the null distribution of U counted by
  the recurrence of Mann and Whitney); otherwise the normal approximation with the tie correction and a
  continuity correction of 1/2. Two samples of one and the same value give p = 1.
- `signed_rank`: the two-sided Wilcoxon signed-rank test of paired differences (zeros dropped, average ranks
  for tied magnitudes). Up to `EXACT_MAX_PAIRS` non-zero differences p is exact (the distribution of the
  positive rank sum over every sign assignment, counted on doubled ranks so tied half-ranks stay integers);
  beyond, the normal approximation with the tie correction and a continuity correction of 1/2. Only zero
  differences give p = 1.
- `holm`: Holm's step-down adjustment of a family of p-values (family-wise error rate).
- `relative_change`: (candidate - baseline) / |baseline|, None when the baseline is 0 or unknown.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cache

import polars as pl

from traceview.core.records import record

EXACT_MAX = 20
"""Samples up to this long (each side, no ties) get the exact Mann-Whitney p."""
EXACT_MAX_PAIRS = 50
"""Up to this many non-zero paired differences get the exact signed-rank p."""


@record
class TestResult:
    """A two-sample comparison: sizes, medians, the statistic (U of the candidate, or the positive rank sum
    W+ of a paired test) and the two-sided p-value."""

    baseline_n: int
    candidate_n: int
    baseline_median: float | None
    candidate_median: float | None
    statistic: float | None
    p_value: float | None
    name: str = "mann-whitney-u"


def _median(values: pl.Series) -> float | None:
    found = values.median()
    return None if found is None else float(found)  # type: ignore[arg-type]


def mann_whitney(baseline: Sequence[float], candidate: Sequence[float]) -> TestResult:
    """The two-sided Mann-Whitney U test of `candidate` against `baseline` (see the module docstring)."""
    a = pl.Series("value", list(baseline), dtype=pl.Float64).drop_nulls().drop_nans()
    b = pl.Series("value", list(candidate), dtype=pl.Float64).drop_nulls().drop_nans()
    n_a, n_b = a.len(), b.len()
    if n_a == 0 or n_b == 0:
        return TestResult(n_a, n_b, _median(a), _median(b), None, None)
    pooled = pl.DataFrame({"value": pl.concat([a, b]), "is_candidate": [False] * n_a + [True] * n_b})
    ranked = pooled.with_columns(pl.col("value").rank("average").alias("rank"))
    rank_sum = float(ranked.filter(pl.col("is_candidate")).get_column("rank").sum())
    u_candidate = rank_sum - n_b * (n_b + 1) / 2
    ties = ranked.group_by("value").agg(pl.len().alias("t")).get_column("t").cast(pl.Float64)
    tie_term = float((ties**3 - ties).sum())
    total = n_a + n_b
    variance = n_a * n_b / 12 * ((total + 1) - tie_term / (total * (total - 1)))
    if tie_term == 0 and max(n_a, n_b) <= EXACT_MAX:
        p_value = _tail_p(_u_counts(min(n_a, n_b), max(n_a, n_b)), round(u_candidate))
    else:
        p_value = _two_sided_p(u_candidate - n_a * n_b / 2, variance)
    return TestResult(n_a, n_b, _median(a), _median(b), u_candidate, p_value)


@cache
def _u_counts(m: int, n: int) -> tuple[int, ...]:
    """How many orderings of m and n distinct values give each U = 0 .. m n (symmetric in m and n)."""
    if m == 0 or n == 0:
        return (1,)
    with_last_of_n = _u_counts(m, n - 1)  # the largest value is of the n-sample: it beats all m
    with_last_of_m = _u_counts(m - 1, n)  # the largest value is of the m-sample
    counts = [0] * (m * n + 1)
    for u, count in enumerate(with_last_of_n):
        counts[u + m] += count
    for u, count in enumerate(with_last_of_m):
        counts[u] += count
    return tuple(counts)


def _tail_p(counts: Sequence[int], observed: int) -> float:
    """Two-sided p of `observed` under the null distribution given as counts per statistic value."""
    total = sum(counts)
    lower = sum(counts[: observed + 1]) / total
    upper = sum(counts[observed:]) / total
    return min(1.0, 2 * min(lower, upper))


def _two_sided_p(deviation: float, variance: float) -> float:
    if variance <= 0:
        return 1.0 if deviation == 0 else 0.0
    z = max(abs(deviation) - 0.5, 0.0) / math.sqrt(variance)
    return math.erfc(z / math.sqrt(2))


def signed_rank(differences: Sequence[float]) -> tuple[int, float | None, float | None]:
    """(pairs, W+, two-sided p) of the Wilcoxon signed-rank test of paired `differences` (module docstring).
    No pairs: (0, None, None); only zero differences: W+ = 0 and p = 1."""
    values = pl.Series("d", list(differences), dtype=pl.Float64).drop_nulls().drop_nans()
    if values.len() == 0:
        return 0, None, None
    nonzero = values.filter(values != 0)
    if nonzero.len() == 0:
        return values.len(), 0.0, 1.0
    frame = pl.DataFrame({"d": nonzero}).with_columns(pl.col("d").abs().rank("average").alias("rank"))
    w_plus = float(frame.filter(pl.col("d") > 0).get_column("rank").sum())
    n = frame.height
    if n <= EXACT_MAX_PAIRS:
        doubled = tuple(sorted(round(2 * r) for r in frame.get_column("rank").to_list()))
        return values.len(), w_plus, _tail_p(_signed_rank_counts(doubled), round(2 * w_plus))
    ties = frame.group_by("rank").agg(pl.len().alias("t")).get_column("t").cast(pl.Float64)
    variance = n * (n + 1) * (2 * n + 1) / 24 - float((ties**3 - ties).sum()) / 48
    return values.len(), w_plus, _two_sided_p(w_plus - n * (n + 1) / 4, variance)


@cache
def _signed_rank_counts(doubled_ranks: tuple[int, ...]) -> tuple[int, ...]:
    """How many of the 2^n sign assignments give each doubled positive rank sum 0 .. sum(doubled_ranks)."""
    counts = [1] + [0] * sum(doubled_ranks)
    reached = 0
    for rank in doubled_ranks:
        reached += rank
        for total in range(reached, rank - 1, -1):
            counts[total] += counts[total - rank]
    return tuple(counts)


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm-adjusted p-values in the input order (None stays None and does not count in the family)."""
    known = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for position, (p, index) in enumerate(known):
        running = max(running, min(1.0, (len(known) - position) * p))
        adjusted[index] = running
    return adjusted


def relative_change(baseline: float | None, candidate: float | None) -> float | None:
    """(candidate - baseline) / |baseline|; None when either is unknown or the baseline is 0 (or below a
    millionth of the candidate: a rounding residue, not a baseline; the change is then said as new, with its
    absolute size)."""
    if baseline is None or candidate is None or baseline == 0 or abs(baseline) < 1e-6 * abs(candidate):
        return None
    return (candidate - baseline) / abs(baseline)
