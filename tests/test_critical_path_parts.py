"""A large batch's critical path walked in parts (`traceview.critical_path.chunks`) is the path walked at
once: every summary equal, frame for frame, with the parts forced down to one window each and to a few windows
each, on the samples and every real trace (alone and together in one batch of many ranks)."""

from __future__ import annotations

import random
from collections.abc import Sequence

import polars as pl
import pytest
from traceview.parsers import kineto

from tests.shared_data import REAL_KINETO, requires_shared
from tests.test_batch_summary import differences, ranked, sample_traces
from traceview.critical_path import chunks
from traceview.events.kernel_names import user_patterns
from traceview.map.rank_summary import RankSummary, summarize_many
from traceview.model.trace import RankTrace

PART_SIZES = (1, 60)
"""Intervals a part: 1 makes every window a part of its own; 60 a few windows a part on the small traces."""


def summaries(traces: Sequence[RankTrace]) -> list[RankSummary]:
    return summarize_many(traces, user_patterns((), ()), 8)


def assert_parts_as_whole(
    traces: Sequence[RankTrace], monkeypatch: pytest.MonkeyPatch, sizes: Sequence[int] = PART_SIZES
) -> None:
    whole = summaries(traces)
    for size in sizes:
        with monkeypatch.context() as patched:
            patched.setattr(chunks, "PART_ROWS", size)
            parted = summaries(traces)
        for trace, one, other in zip(traces, whole, parted, strict=True):
            assert differences(one, other, f"{trace.path} in parts of {size}") == []


def real_traces() -> list[RankTrace]:
    traces = []
    for i, path in enumerate(sorted(p for p in REAL_KINETO.rglob("*.json*") if p.is_file())):
        try:
            traces.append(ranked(kineto.parse(path).validate(), 1000 + i))
        except Exception:  # the real set holds traces that are refused on purpose
            continue
    return traces


def test_the_samples_in_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    traces = sample_traces()
    assert all(summary.path_steps.height > 1 for summary in summaries(traces))  # windows to cut
    assert_parts_as_whole(traces, monkeypatch)  # one batch of many ranks
    for trace in traces[:: len(traces) // 4]:
        assert_parts_as_whole([trace], monkeypatch)


@requires_shared
def test_every_real_trace_in_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    traces = real_traces()
    assert len(traces) >= 20
    for trace in traces:
        assert_parts_as_whole([trace], monkeypatch, PART_SIZES[:1])
    random.Random(3).shuffle(traces)
    assert_parts_as_whole(traces, monkeypatch)
    assert sum(summary.path_steps.height for summary in summaries(traces)) > 2 * len(traces)  # windows to cut


def test_the_parts_cover_each_window_once_and_own_each_entry_once() -> None:
    windows = pl.DataFrame(
        {
            "rank": [1, 1, 1, 2, 2],
            "step": [0, 1, 2, 0, 1],
            "window_start_us": [0.0, 100.0, 200.0, 50.0, 150.0],
            "window_end_us": [90.0, 190.0, 290.0, 140.0, 240.0],
        }
    )
    parts = chunks.window_parts(windows, 3 * chunks.PART_ROWS)
    assert [part.height for part in parts] == [2, 2, 1]
    assert pl.concat(parts).sort("rank", "step").equals(windows)
    bounds = chunks.part_bounds(parts)
    rows = pl.DataFrame({"rank": [1, 1, 1, 1, 2, 2], "start_us": [-5.0, 95.0, 100.0, 250.0, 10.0, 149.0]})
    owned = [sorted(chunks.entries_in(rows.lazy(), b).collect().rows()) for b in bounds]
    # rank 1: windows 0-1 in part 0, window 2 in part 1; rank 2: window 0 in part 1, window 1 in part 2
    assert owned == [[(1, -5.0), (1, 95.0), (1, 100.0)], [(1, 250.0), (2, 10.0), (2, 149.0)], []]
    # an interval across a part's edge is in both parts; one in the gap between two windows in neither
    intervals = pl.DataFrame(
        {
            "rank": [1, 1, 2, 2],
            "start_us": [180.0, 190.0, 130.0, 140.0],
            "end_us": [210.0, 200.0, 160.0, 150.0],
        }
    )
    inside = [sorted(chunks.intervals_in(intervals.lazy(), b).collect().rows()) for b in bounds]
    assert inside == [[(1, 180.0, 210.0)], [(1, 180.0, 210.0), (2, 130.0, 160.0)], [(2, 130.0, 160.0)]]
