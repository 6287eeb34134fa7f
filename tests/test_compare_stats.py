"""The tests behind compare and trend against independent computations (pairwise counts, hand arithmetic)."""

from __future__ import annotations

import math

import pytest

from traceview.compare.stats import holm, mann_whitney, relative_change


def pairwise_u(baseline: list[float], candidate: list[float]) -> float:
    """U of the candidate by counting pairs: 1 when the candidate value is larger, 1/2 on a tie."""
    return sum((c > b) + 0.5 * (c == b) for b in baseline for c in candidate)


@pytest.mark.parametrize(
    ("baseline", "candidate"),
    [
        ([1, 2, 3], [4, 5, 6]),
        ([5, 1, 4, 4], [4, 2, 9]),
        ([3, 3, 3], [3, 3, 3, 7]),
        ([10, 8, 6, 4], [1, 9, 7]),
    ],
)
def test_u_statistic_matches_pair_counting(baseline: list[float], candidate: list[float]) -> None:
    assert mann_whitney(baseline, candidate).u_statistic == pytest.approx(pairwise_u(baseline, candidate))


def test_p_value_by_hand() -> None:
    # n = 3 and 3, no ties, U = 9: mean 4.5, variance 3 * 3 * 7 / 12 = 5.25, continuity 1/2
    z = (9 - 4.5 - 0.5) / math.sqrt(5.25)
    assert mann_whitney([1, 2, 3], [4, 5, 6]).p_value == pytest.approx(math.erfc(z / math.sqrt(2)))


def test_identical_samples_are_not_different() -> None:
    result = mann_whitney([4.0, 5.0, 6.0, 7.0], [4.0, 5.0, 6.0, 7.0])
    assert result.p_value == pytest.approx(1.0)
    assert (result.baseline_median, result.candidate_median) == (5.5, 5.5)


def test_constant_samples_with_tie_correction() -> None:
    # two ties of 5: tie term 2 x (5^3 - 5) = 240; variance 5 x 5 / 12 x (11 - 240 / (10 x 9)); U = 25
    z = (25 - 12.5 - 0.5) / math.sqrt(25 / 12 * (11 - 240 / 90))
    assert mann_whitney([2.0] * 5, [3.0] * 5).p_value == pytest.approx(math.erfc(z / math.sqrt(2)))
    assert mann_whitney([2.0] * 5, [2.0] * 5).p_value == 1.0


def test_empty_side_has_no_test() -> None:
    result = mann_whitney([], [1.0, 2.0])
    assert result.p_value is None
    assert result.candidate_n == 2


def test_holm_by_hand() -> None:
    # sorted 0.01, 0.03, 0.04: 3 x 0.01 = 0.03; 2 x 0.03 = 0.06; 1 x 0.04 = 0.04 -> max(0.06, 0.04)
    assert holm([0.01, 0.04, 0.03, None]) == pytest.approx([0.03, 0.06, 0.06, None])  # type: ignore[arg-type]


def test_relative_change() -> None:
    assert relative_change(40.0, 50.0) == pytest.approx((50 - 40) / 40)
    assert relative_change(0.0, 1.0) is None
    assert relative_change(None, 1.0) is None
