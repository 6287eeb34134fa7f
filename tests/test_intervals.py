"""Interval algebra: unions, merged segments, gaps and clipping into windows, checked by hand arithmetic."""

from __future__ import annotations

import polars as pl
import pytest

from traceview.core.intervals import clip_to_windows, gaps, merge_intervals, union_length


def frame(rows: list[tuple[int, float, float]]) -> pl.DataFrame:
    return pl.DataFrame(
        rows, schema={"g": pl.Int64, "start_us": pl.Float64, "end_us": pl.Float64}, orient="row"
    )


def test_union_of_overlapping_nested_and_disjoint_intervals() -> None:
    # [0,10) and [5,12) overlap, [6,8) is nested, [20,25) is apart, [12,14) touches [5,12)
    intervals = frame([(1, 0, 10), (1, 5, 12), (1, 6, 8), (1, 20, 25), (1, 12, 14)])
    assert union_length(intervals, ["g"]).item(0, "length_us") == pytest.approx((14 - 0) + (25 - 20))


def test_union_is_per_group_and_order_free() -> None:
    intervals = frame([(2, 30, 40), (1, 0, 10), (2, 0, 5), (1, 8, 9), (2, 35, 50)])
    lengths = dict(union_length(intervals, ["g"]).sort("g").iter_rows())
    assert lengths == {1: pytest.approx(10 - 0), 2: pytest.approx((5 - 0) + (50 - 30))}


def test_merge_and_gaps() -> None:
    intervals = frame([(1, 0, 10), (1, 5, 12), (1, 20, 25), (1, 24, 30), (1, 40, 41)])
    merged = merge_intervals(intervals, ["g"])
    assert merged.select("start_us", "end_us").rows() == [(0, 12), (20, 30), (40, 41)]
    assert gaps(merged, ["g"]).select("start_us", "end_us").rows() == [(12, 20), (30, 40)]


def test_clip_splits_an_event_across_two_windows() -> None:
    windows = pl.DataFrame(
        {"g": [1, 1], "step": [1, 2], "window_start_us": [0.0, 100.0], "window_end_us": [100.0, 200.0]}
    )
    events = frame([(1, 90, 130), (1, 150, 160), (1, -20, 10), (1, 250, 260)])
    clipped = clip_to_windows(events, windows, ["g"]).sort("step", "start_us")
    assert clipped.select("step", "start_us", "end_us").rows() == [
        (1, 0, 10),  # starts before the first window: its inside part only
        (1, 90, 100),
        (2, 100, 130),
        (2, 150, 160),
    ]  # the event after the last window is outside every window and is dropped
