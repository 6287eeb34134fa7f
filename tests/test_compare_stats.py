"""The tests behind compare and trend against independent computations (pairwise counts, hand arithmetic)."""

from __future__ import annotations

import itertools
import math

import pytest

from traceview.compare.stats import EXACT_MAX, holm, mann_whitney, relative_change, signed_rank


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
    assert mann_whitney(baseline, candidate).statistic == pytest.approx(pairwise_u(baseline, candidate))


def test_exact_p_value_by_hand() -> None:
    # n = 3 and 3, no ties, U = 9: the candidate is the top three of six in 1 of C(6, 3) = 20 orderings;
    # two-sided: 2 / 20
    assert mann_whitney([1, 2, 3], [4, 5, 6]).p_value == pytest.approx(2 / 20)
    # 6 and 6 completely separated: 2 / C(12, 6)
    assert mann_whitney(list(range(6)), list(range(10, 16))).p_value == pytest.approx(2 / math.comb(12, 6))


def enumerated_u_p(baseline: list[float], candidate: list[float]) -> float:
    """Two-sided p by enumerating every split of the pooled values into samples of the two sizes."""
    pooled, n_c = baseline + candidate, len(candidate)
    observed = pairwise_u(baseline, candidate)
    splits = list(itertools.combinations(range(len(pooled)), n_c))
    us = [
        pairwise_u([v for i, v in enumerate(pooled) if i not in chosen], [pooled[i] for i in chosen])
        for chosen in splits
    ]
    lower = sum(u <= observed for u in us) / len(us)
    upper = sum(u >= observed for u in us) / len(us)
    return min(1.0, 2 * min(lower, upper))


@pytest.mark.parametrize(
    ("baseline", "candidate"),
    [([1.5, 2.5, 9.0, 4.0], [3.0, 5.0, 6.0]), ([10.0, 8.0, 6.0, 4.0, 2.0], [1.0, 9.0, 7.0, 11.0, 12.0])],
)
def test_exact_p_matches_enumeration(baseline: list[float], candidate: list[float]) -> None:
    assert mann_whitney(baseline, candidate).p_value == pytest.approx(enumerated_u_p(baseline, candidate))


def test_normal_p_value_beyond_exact_sizes() -> None:
    # n = 21 and 21, no ties, completely separated: U = 441, mean 220.5, variance 21 * 21 * 43 / 12
    n = EXACT_MAX + 1
    z = (n * n - n * n / 2 - 0.5) / math.sqrt(n * n * (2 * n + 1) / 12)
    result = mann_whitney(list(range(n)), list(range(100, 100 + n)))
    assert result.p_value == pytest.approx(math.erfc(z / math.sqrt(2)))


def enumerated_signed_rank_p(differences: list[float]) -> float:
    """Two-sided p by enumerating every sign assignment of the non-zero differences' magnitudes."""
    nonzero = [d for d in differences if d != 0]
    magnitudes = sorted(abs(d) for d in nonzero)
    ranks = {
        m: sum(i + 1 for i, x in enumerate(magnitudes) if x == m) / magnitudes.count(m) for m in magnitudes
    }
    observed = sum(ranks[abs(d)] for d in nonzero if d > 0)
    sums = [
        sum(ranks[abs(d)] for d, sign in zip(nonzero, signs, strict=True) if sign)
        for signs in itertools.product((False, True), repeat=len(nonzero))
    ]
    lower = sum(s <= observed + 1e-9 for s in sums) / len(sums)
    upper = sum(s >= observed - 1e-9 for s in sums) / len(sums)
    return min(1.0, 2 * min(lower, upper))


@pytest.mark.parametrize(
    "differences",
    [[0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4], [0.3, -0.1, 0.2, 0.2, 0.5, -0.4, 0.0, 0.6], [1.0, -2.0, 3.0, 2.0]],
)
def test_signed_rank_matches_enumeration(differences: list[float]) -> None:
    pairs, _, p_value = signed_rank(differences)
    assert pairs == len(differences)
    assert p_value == pytest.approx(enumerated_signed_rank_p(differences))


def test_signed_rank_by_hand() -> None:
    # 7 positive differences: W+ = 1 + ... + 7 = 28, reached by 1 of 2^7 sign assignments; two-sided 2 / 128
    assert signed_rank([0.1 * i for i in range(1, 8)]) == (7, 28.0, pytest.approx(2 / 128))
    assert signed_rank([0.0, 0.0, 0.0]) == (3, 0.0, 1.0)
    assert signed_rank([]) == (0, None, None)


def test_signed_rank_normal_beyond_exact_sizes() -> None:
    # 60 distinct positive differences: W+ = 60 x 61 / 2, mean 60 x 61 / 4, variance 60 x 61 x 121 / 24
    n = 60
    z = (n * (n + 1) / 4 - 0.5) / math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
    assert signed_rank([float(i) for i in range(1, n + 1)])[2] == pytest.approx(math.erfc(z / math.sqrt(2)))


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
