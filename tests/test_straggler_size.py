"""Straggler evidence by size (docs/metrics.md, "Across ranks", "Evidence"): two ranks and a handful of
collectives, where the order alone never reaches the binomial test's 1%, on factory frames (hand
arithmetic)."""

from __future__ import annotations

import statistics

import polars as pl
import pytest

from tests.crossrank_factory import comm, kernels, windows
from traceview.across_ranks.analysis import CrossRank, cross_rank
from traceview.across_ranks.clocks import rank_hosts

STEP_US = 10_000.0


def _per_step(ranks: int) -> pl.DataFrame:
    return pl.DataFrame(
        {"rank": list(range(ranks)), "step": [1] * ranks, "step_us": [STEP_US] * ranks},
        schema={"rank": pl.Int64, "step": pl.Int64, "step_us": pl.Float64},
    ).with_columns(pl.lit(5000.0).alias("comp_us"))


def _run(offsets: list[list[float]], hostnames: dict[int, str] | None = None) -> CrossRank:
    """One AllReduce per row of `offsets` (row i: each rank's start after t = 1000 i), every member ending at
    t + 2000; one 10 ms step."""
    ranks = len(offsets[0])
    listed = str(list(range(ranks)))
    rows = [
        comm(rank, 1000.0 * i + late, 1000.0 * i + 2000.0, ranks=listed, size=100 + i)
        for i, row in enumerate(offsets)
        for rank, late in enumerate(row)
    ]
    hosts = rank_hosts(list(range(ranks)), hostnames or {})
    frames = windows(list(range(ranks)), [(1, -1000.0, 1000.0 * len(offsets) + 9000.0)])
    return cross_rank(kernels(rows), pl.DataFrame(), frames, _per_step(ranks), hosts)


def _rank(result: CrossRank, rank: int) -> dict[str, object]:
    return result.per_rank.filter(pl.col("rank") == rank).row(0, named=True)


def _mad(values: list[float]) -> float:
    middle = statistics.median(values)
    return statistics.median(abs(v - middle) for v in values)


HOST_LATE = [600.0, 600.0, 700.0, 1100.0, 1200.0, 1200.0]
"""Rank 1's lateness at six collectives (rank 0 at 0): between x and 2x."""


def test_two_ranks_six_collectives_named_by_size() -> None:
    """Last in 6 of 6 among 2: chance gives that with probability (1/2)^6 = 1.6%, above the 1% of the order
    test; the size test names it: median lead 900 us (the median of its six leads), jitter = their median
    absolute deviation 300 us, floor max(2 x 0, 2 x 300, 20, 2% of 10 ms) = 600 us < 900 us."""
    result = _run([[0.0, late] for late in HOST_LATE], dict.fromkeys(range(2), "a"))
    rank1 = _rank(result, 1)
    assert rank1["last_p_value"] == pytest.approx(0.5**6)
    assert rank1["median_lead_us"] == statistics.median(HOST_LATE) == 900.0
    assert rank1["lead_jitter_us"] == _mad(HOST_LATE) == 300.0
    assert rank1["lead_floor_us"] == max(2 * 0.0, 2 * 300.0, 20.0, 0.02 * STEP_US)
    assert (rank1["late_by_size"], rank1["straggler"]) == (True, True)
    rank0 = _rank(result, 0)
    assert rank0["median_lead_us"] == -900.0
    assert (rank0["late_by_size"], rank0["straggler"]) == (False, False)
    assert result.stragglers == (1,)
    assert "its peers wait a median 900.0 us for it" in result.sentence  # 900 us: under 1 ms, in us


def test_four_ranks_one_host_late() -> None:
    """Four ranks, rank 3 late by `HOST_LATE`, the others 0, 10, 20 us: its lead = its lateness - 20 us."""
    result = _run([[0.0, 10.0, 20.0, late] for late in HOST_LATE], dict.fromkeys(range(4), "a"))
    leads = [late - 20.0 for late in HOST_LATE]
    rank3 = _rank(result, 3)
    assert rank3["median_lead_us"] == statistics.median(leads)
    assert rank3["lead_jitter_us"] == _mad(leads)
    assert rank3["straggler"]
    assert result.stragglers == (3,)


@pytest.mark.parametrize(
    ("offsets", "why"),
    [
        ([[0.0, late] for late in (40.0, -30.0, 55.0, -60.0, 25.0, -45.0)], "scatter around zero"),
        ([[0.0, late] for late in (150.0, 160.0, 140.0, 150.0, 155.0, 145.0)], "under 2% of the step"),
        ([[0.0, late] for late in (-900.0, 1500.0, 100.0, 2500.0, -400.0, 1800.0)], "within its jitter"),
        ([[0.0, late] for late in (900.0, 900.0)], "two collectives"),
    ],
)
def test_healthy_or_weak_evidence_names_nobody(offsets: list[list[float]], why: str) -> None:
    """Median leads (25 - 30) / 2 (a scatter around zero), 150 us (< 2% of 10 ms = 200 us), (100 + 1500) / 2
    = 800 us against a jitter of (1000 + 1200) / 2 = 1100 us (2 x 1100 > 800), or too few instances: no
    straggler."""
    result = _run(offsets, dict.fromkeys(range(2), "a"))
    assert not _rank(result, 1)["late_by_size"], why
    assert result.stragglers == (), why
