"""Host clock alignment (traceview.across_ranks.clocks): hosts per rank, offsets from collective ends, spread
warnings."""

from __future__ import annotations

import polars as pl
import pytest

from traceview.across_ranks.clocks import SPREAD_WARN_US, align, clock_offsets, rank_hosts


def _calls(rows: list[tuple[int, int, float]]) -> pl.DataFrame:
    """(instance, rank, end_us) rows, with start 100 us before the end."""
    frame = pl.DataFrame(
        rows, schema={"instance": pl.Int64, "rank": pl.Int64, "end_us": pl.Float64}, orient="row"
    )
    return frame.with_columns((pl.col("end_us") - 100.0).alias("start_us"))


def test_host_sources_in_order_of_precedence() -> None:
    hosts = rank_hosts([0, 1, 2, 3], {0: "a", 1: "", 2: "", 3: ""}, {1: "b"}, ranks_per_host=2)
    assert hosts.rows() == [
        (0, "a", "trace"),
        (1, "b", "nccl log"),
        (2, "host 1", "--ranks-per-host"),
        (3, "host 1", "--ranks-per-host"),
    ]
    alone = rank_hosts([5, 6], {5: "", 6: ""})
    assert alone.get_column("host").to_list() == ["rank 5", "rank 6"]


def test_offset_is_the_median_end_difference_with_its_spread() -> None:
    """Host 1 (ranks 2, 3) reads 30 ms ahead; its ends carry jitter +2, -1, 0, +5 us on four instances."""
    jitter = [2.0, -1.0, 0.0, 5.0]
    rows = [(i, r, 1000.0 * i) for i in range(4) for r in (0, 1)]
    rows += [(i, r, 1000.0 * i + 30_000.0 + jitter[i]) for i in range(4) for r in (2, 3)]
    hosts = rank_hosts([0, 1, 2, 3], {}, ranks_per_host=2)
    result = clock_offsets(_calls(rows), hosts)
    second = result.offsets.row(1, named=True)
    assert second["offset_us"] == pytest.approx(30_000.0 + (0.0 + 2.0) / 2)  # median of -1, 0, 2, 5
    assert second["spread_us"] == pytest.approx(2.75 - (-0.25))  # linear quartiles of -1, 0, 2, 5
    assert (second["samples"], second["via"], second["ranks"]) == (4, "host 0", [2, 3])
    assert result.reference == "host 0"
    assert result.warnings == ()
    aligned = align(_calls(rows), hosts, result).filter(pl.col("rank") == 3).sort("instance")
    assert aligned.get_column("aligned_end_us").to_list() == pytest.approx(
        [1000.0 * i + jitter[i] - 1.0 for i in range(4)]
    )


def test_hosts_are_reached_through_other_hosts() -> None:
    """Host C shares collectives only with host B: offset(C) = (C - B) + offset(B)."""
    rows = [(i, 0, 10.0 * i) for i in range(3)] + [(i, 1, 10.0 * i + 500.0) for i in range(3)]
    rows += [(i, 1, 10.0 * i + 500.0) for i in range(3, 6)] + [
        (i, 2, 10.0 * i + 500.0 - 70.0) for i in range(3, 6)
    ]
    result = clock_offsets(_calls(rows), rank_hosts([0, 1, 2], {}))
    assert result.offsets.select("host", "offset_us", "via").rows() == [
        ("rank 0", 0.0, None),
        ("rank 1", 500.0, "rank 0"),
        ("rank 2", 430.0, "rank 1"),
    ]


def test_large_spread_and_unreachable_hosts_warn() -> None:
    rows = [(0, 0, 0.0), (0, 1, 0.0), (1, 0, 100.0), (1, 1, 100.0 + 4 * SPREAD_WARN_US)]
    rows += [(2, 0, 200.0), (2, 1, 200.0 + 8 * SPREAD_WARN_US)]
    result = clock_offsets(_calls(rows), rank_hosts([0, 1, 2], {}))
    assert result.offsets.filter(pl.col("host") == "rank 2").item(0, "offset_us") is None
    assert len(result.warnings) == 2
    assert "spread" in result.warnings[0]
    assert "rank 2 shares no matched collective" in result.warnings[1]
