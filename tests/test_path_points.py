"""The critical path's points keep each window's points together and in time order whatever the steps'
numbers (`traceview.critical_path.sweep._points`): windows that touch, numbered against time."""

from __future__ import annotations

import polars as pl

from traceview.core.engine import in_memory
from traceview.critical_path.sweep import path_segments


def _windows(rank: int, steps_and_bounds: list[tuple[int, float, float]]) -> list[dict[str, object]]:
    return [
        {"rank": rank, "step": step, "window_start_us": start, "window_end_us": end}
        for step, start, end in steps_and_bounds
    ]


Held = dict[tuple[int, int, int | None], float]
"""Time on the path per (rank, step, priority; None: nothing recorded)."""


@in_memory
def _held(intervals: list[tuple[int, float, float, int]], windows: list[dict[str, object]]) -> Held:
    frame = pl.DataFrame(
        intervals, schema=["rank", "start_us", "end_us", "priority"], orient="row"
    ).with_columns(pl.col("priority").cast(pl.Int32))
    window_frame = pl.DataFrame(windows).cast({"rank": pl.Int64, "step": pl.Int64})
    segments = path_segments(frame.lazy(), window_frame).collect()
    summed = segments.group_by("rank", "step", "priority").agg(pl.col("seg_us").sum())
    return {(r, s, p): us for r, s, p, us in summed.iter_rows()}


def test_steps_numbered_against_time_keep_their_windows() -> None:
    # step 2 runs from 0 to 10 and step 1 from 10 to 20: one interval of priority 0 from 5 to 15 crosses
    # the moment the windows touch
    windows = _windows(0, [(2, 0.0, 10.0), (1, 10.0, 20.0)])
    held = _held([(0, 5.0, 15.0, 0)], windows)
    assert held == {
        (0, 2, None): 5.0 - 0.0,
        (0, 2, 0): 10.0 - 5.0,
        (0, 1, 0): 15.0 - 10.0,
        (0, 1, None): 20.0 - 15.0,
    }


def test_two_ranks_with_touching_windows() -> None:
    windows = _windows(0, [(1, 0.0, 10.0), (0, 10.0, 20.0)]) + _windows(1, [(0, 0.0, 10.0), (1, 10.0, 20.0)])
    held = _held([(0, 2.0, 12.0, 1), (1, 8.0, 20.0, 0)], windows)
    assert held == {
        (0, 1, None): 2.0 - 0.0,
        (0, 1, 1): 10.0 - 2.0,
        (0, 0, 1): 12.0 - 10.0,
        (0, 0, None): 20.0 - 12.0,
        (1, 0, None): 8.0 - 0.0,
        (1, 0, 0): 10.0 - 8.0,
        (1, 1, 0): 20.0 - 10.0,
    }
