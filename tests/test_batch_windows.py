"""The step choice and windows of a batch of ranks (`chosen_windows_of`, keyed by rank) are each rank's alone,
to the last bit, and cost a fixed number of queries and plans whatever the number of ranks. The batches mix
traces with GPU step annotations (kept and rejected), CPU steps only, no steps, and no device events."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import polars as pl
import pytest
from traceview.parsers import kineto

from tests.shared_data import REAL_KINETO, real_files, requires_shared
from tests.test_batch_summary import differences, ranked, sample_traces
from tests.test_map_queries import counted_queries
from traceview.core.engine import in_memory
from traceview.events.host_timeline import on_host_timeline
from traceview.model.trace import RankTrace
from traceview.steps.windows import chosen_windows, chosen_windows_of


def _also(trace: RankTrace) -> list[pl.LazyFrame]:
    return [trace.steps.lazy().select(pl.len()), trace.gpu.lazy().select(pl.col("start_us").max())]


@in_memory
def assert_batched_as_alone(traces: Sequence[RankTrace], windows: bool = True) -> None:
    alone = [chosen_windows(trace, windows, _also(trace)) for trace in traces]
    together = chosen_windows_of(traces, [_also(trace) for trace in traces], windows)
    assert len(together) == len(traces)
    for trace, (choice, frame, also), batched in zip(traces, alone, together, strict=True):
        assert batched[0] == choice, trace.path  # floats included, exactly
        assert batched[0].rank == trace.rank
        assert differences(frame, batched[1], f"{trace.path} windows") == []
        assert [differences(a, b, trace.path) for a, b in zip(also, batched[2], strict=True)] == [[], []]


def _kinds(traces: Sequence[RankTrace]) -> set[str]:
    """Which kinds of rank the batch holds."""
    kinds = set()
    for trace in traces:
        sources = set(trace.steps.get_column("source").to_list())
        kinds.add("no device events" if trace.gpu.height == 0 else "+".join(sorted(sources)) or "no steps")
    return kinds


def test_the_samples_batched_as_alone() -> None:
    traces = sample_traces()
    traces += [ranked(on_host_timeline(trace), 500 + i) for i, trace in enumerate(traces)]
    random.Random(3).shuffle(traces)
    assert {"cpu", "cpu+gpu", "no device events"} <= _kinds(traces)
    assert_batched_as_alone(traces)
    assert_batched_as_alone(traces, windows=False)


def _real_traces() -> list[RankTrace]:
    traces = []
    for i, path in enumerate(real_files(REAL_KINETO, "**/*.json*")):
        try:
            traces.append(ranked(kineto.parse(path).validate(), 2000 + i))
        except Exception:  # the real set holds traces that are refused on purpose
            continue
    return traces


@requires_shared
def test_every_real_trace_batched_as_alone() -> None:
    traces = _real_traces()
    assert len(traces) >= 20
    traces += sample_traces()[:6]  # GPU annotations kept
    choices = [chosen_windows(trace, windows=False)[0] for trace in traces]
    assert {c.source for c in choices} == {"gpu", "cpu", "none"}
    assert any(c.warning for c in choices)  # a rank's GPU annotations rejected
    assert {"no steps", "cpu", "cpu+gpu", "no device events"} <= _kinds(traces)
    for seed in (0, 1):
        random.Random(seed).shuffle(traces)
        assert_batched_as_alone(traces)


def test_a_rank_claimed_twice_is_answered_for_each_trace() -> None:
    first, second, third = sample_traces()[:3]
    traces = [first, ranked(second, first.rank), third]
    assert_batched_as_alone(traces)


@contextmanager
def counted_plans() -> Iterator[list[int]]:
    """Counts the lazy plans handed to `pl.collect_all` inside."""
    count = [0]
    original = pl.collect_all

    def counting(plans: Sequence[pl.LazyFrame], *args: Any, **kwargs: Any) -> Any:
        count[0] += len(plans)
        return original(plans, *args, **kwargs)

    pl.collect_all = counting  # type: ignore[assignment]
    try:
        yield count
    finally:
        pl.collect_all = original  # type: ignore[assignment]


@pytest.mark.parametrize("windows", [True, False])
def test_the_queries_and_plans_of_a_batch_do_not_grow_with_its_ranks(windows: bool) -> None:
    traces = [trace for trace in sample_traces() if "dp8_straggler" in trace.path]
    assert len(traces) == 8
    counts = {}
    for size in (2, 8):
        batch = in_memory(chosen_windows_of)
        with counted_queries() as queries, counted_plans() as plans:
            batch(traces[:size], [[]] * size, windows)
        counts[size] = (queries[0], plans[0])
    assert counts[8] == counts[2]
    assert counts[2][1] <= 2  # the evidence and the windows
