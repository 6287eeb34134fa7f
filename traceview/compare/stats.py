"""The tests behind `traceview compare` and `traceview trend` (docs/metrics.md, "Compare and trend").

- `mann_whitney`: the two-sided Mann-Whitney U test of two samples, ranks by polars (average ranks for ties),
  the normal approximation with the tie correction and a continuity correction of 1/2. Two samples of one
  and the same value give p = 1.
- `holm`: Holm's step-down adjustment of a family of p-values (family-wise error rate).
- `relative_change`: (candidate - baseline) / |baseline|, None when the baseline is 0 or unknown.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl


@dataclass(frozen=True)
class TestResult:
    """A two-sample comparison: sizes, medians, U of the candidate and the two-sided p-value."""

    baseline_n: int
    candidate_n: int
    baseline_median: float | None
    candidate_median: float | None
    u_statistic: float | None
    p_value: float | None


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
    p_value = _two_sided_p(u_candidate - n_a * n_b / 2, variance)
    return TestResult(n_a, n_b, _median(a), _median(b), u_candidate, p_value)


def _two_sided_p(deviation: float, variance: float) -> float:
    if variance <= 0:
        return 1.0 if deviation == 0 else 0.0
    z = max(abs(deviation) - 0.5, 0.0) / math.sqrt(variance)
    return math.erfc(z / math.sqrt(2))


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
    """(candidate - baseline) / |baseline|; None when either is unknown or the baseline is 0."""
    if baseline is None or candidate is None or baseline == 0:
        return None
    return (candidate - baseline) / abs(baseline)
