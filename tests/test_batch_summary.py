"""Ranks summarised together (`summarize_many`, the map's batches) give each rank the summary it gets alone:
every frame equal, row for row, with its schema. The batches mix real traces of every kind (device and host
timelines, NCCL, RCCL, gloo, all-to-all, CUDA graphs, no steps), each given a rank of its own."""

from __future__ import annotations

import dataclasses
import gc
import gzip
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from traceview.parsers import kineto

from tests.shared_data import REAL_KINETO, requires_shared
from tests.test_map_queries import counted_queries
from traceview.core.location import Url
from traceview.events.kernel_names import user_patterns
from traceview.map.batch import BATCH_RANKS, BATCH_TEXT_BYTES, TEXT_PER_GZIP_BYTE, batches_of_sizes, text_size
from traceview.map.executors import MapTask, batches, summarize_files
from traceview.map.rank_summary import RankSummary, summarize, summarize_many, summarize_taken
from traceview.model.stacking import distinct_rank_rounds
from traceview.model.trace import RankTrace, SkippedInput

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def differences(alone: Any, together: Any, where: str) -> list[str]:
    """Where two summaries (or their parts) differ: frames by schema and values in order, the rest by `==`."""
    if isinstance(alone, pl.DataFrame):
        if alone.schema != together.schema:
            return [f"{where}: schema {alone.schema} != {together.schema}"]
        return [] if alone.equals(together) else [f"{where}: values differ"]
    if dataclasses.is_dataclass(alone):
        return [
            found
            for field in dataclasses.fields(alone)
            for found in differences(getattr(alone, field.name), getattr(together, field.name), field.name)
        ]
    return [] if alone == together else [f"{where}: {alone!r:.80} != {together!r:.80}"]


def ranked(trace: RankTrace, rank: int) -> RankTrace:
    """`trace` as recorded on `rank`."""
    return dataclasses.replace(trace, meta=dataclasses.replace(trace.meta, rank=rank))


def assert_batched_as_alone(traces: Sequence[RankTrace], ranks_in_run: int = 8) -> None:
    patterns = user_patterns((), ())
    alone = [summarize(trace, patterns, ranks_in_run) for trace in traces]
    together = summarize_many(traces, patterns, ranks_in_run)
    assert len(together) == len(traces)
    for trace, one, batched in zip(traces, alone, together, strict=True):
        assert batched.rank == trace.rank
        assert differences(one, batched, trace.path) == []


def sample_traces() -> list[RankTrace]:
    files = sorted(SAMPLES.glob("*/*.json.gz"))
    return [ranked(kineto.parse(path).validate(), 100 + i) for i, path in enumerate(files)]


def test_the_samples_summarised_together_as_alone() -> None:
    traces = sample_traces()
    random.Random(7).shuffle(traces)
    assert_batched_as_alone(traces)


@requires_shared
def test_every_real_trace_summarised_together_as_alone() -> None:
    files = sorted(p for p in REAL_KINETO.rglob("*.json*") if p.is_file())
    traces = []
    for i, path in enumerate(files):
        try:
            traces.append(ranked(kineto.parse(path).validate(), 1000 + i))
        except Exception:  # the real set holds traces that are refused on purpose
            continue
    assert len(traces) >= 20
    for seed in (0, 1):
        random.Random(seed).shuffle(traces)
        assert_batched_as_alone([*traces, *sample_traces()[:4]])


def test_ranks_claimed_twice_are_summarised_in_separate_batches() -> None:
    first, second, third = sample_traces()[:3]
    traces = [first, ranked(second, first.rank), third, ranked(third, 999)]
    assert distinct_rank_rounds(traces) == [[0, 2, 3], [1]]
    assert_batched_as_alone(traces)


def test_a_batch_costs_the_queries_of_about_one_rank() -> None:
    traces = [t for t in sample_traces() if "dp8_straggler" in t.path]
    assert len(traces) == 8
    patterns = user_patterns((), ())
    summarize_many(traces, patterns)  # the kernel-name cache filled
    with counted_queries() as one:
        summarize(traces[0], patterns)
    with counted_queries() as two:
        summarize_many(traces[:2], patterns)
    with counted_queries() as eight:
        summarize_many(traces, patterns)
    assert eight[0] == two[0]  # nothing per rank: six more ranks, no more queries
    assert eight[0] < 2 * one[0]


def gzipped(path: Path, text: bytes) -> Path:
    path.write_bytes(gzip.compress(text))
    return path


def test_a_file_that_cannot_be_read_costs_its_own_rank_only(tmp_path: Path) -> None:
    files = sorted((SAMPLES / "dp8_ideal").glob("*.json.gz"))[:3]
    bad = gzipped(tmp_path / "bad.json.gz", b'{"traceEvents": [1, 2')
    tasks = [MapTask(str(p)) for p in (files[0], bad, files[1], files[2])]
    results = summarize_files(tasks)
    assert [type(r) for r in results] == [RankSummary, SkippedInput, RankSummary, RankSummary]
    assert [r.rank for r in results if isinstance(r, RankSummary)] == [0, 1, 2]
    assert isinstance(results[1], SkippedInput)
    assert results[1].path == str(bad)


@pytest.mark.parametrize(
    ("sizes", "workers", "expected"),
    [
        ([10] * (2 * BATCH_RANKS + 8), None, [BATCH_RANKS, BATCH_RANKS, 8]),  # at most BATCH_RANKS
        ([10] * 40, 2, [40 // (4 * 2)] * 8),  # a pool: at least four batches per worker
        ([10] * 40, 1, [40 // 4] * 4),
        ([10] * 3, 4, [1, 1, 1]),
        (
            [BATCH_TEXT_BYTES // 2] * 2 + [1, BATCH_TEXT_BYTES + 1] + [1] * (BATCH_RANKS + 8),
            None,
            [2, 1, 1, BATCH_RANKS, 8],
        ),  # bytes of text
    ],
)
def test_batches_cut_by_count_text_and_workers(
    sizes: list[int], workers: int | None, expected: list[int]
) -> None:
    assert [len(b) for b in batches_of_sizes(sizes, workers)] == expected
    tasks = [MapTask(f"rank{i}") for i in range(len(sizes))]
    cut = batches(tasks, sizes, workers)
    assert [len(b) for b in cut] == expected
    assert [task for batch in cut for task in batch] == tasks  # in order, none lost


def test_text_size_is_the_inflated_text_of_a_gzip_file(tmp_path: Path) -> None:
    text = b'{"traceEvents": [' + b",".join([b'{"ph": "X", "name": "k", "ts": 1, "dur": 2}'] * 5_000) + b"]}"
    packed = gzipped(tmp_path / "rank.json.gz", text)
    plain = tmp_path / "rank.json"
    plain.write_bytes(text)
    on_disk = packed.stat().st_size
    assert on_disk * 10 < len(text)  # the case the bound is for: the text ten times the file or more
    assert text_size(packed, on_disk) == len(text)
    assert text_size(plain, len(text)) == len(text)
    assert text_size(tmp_path / "absent.json.gz", 7) == 7  # unreadable: its size (the parse says why)
    url = Url("s3://bucket/run/rank0.json.gz")
    assert text_size(url, 1_000) == 1_000 * TEXT_PER_GZIP_BYTE  # no trailer read: estimated


def _device_traces_alive(path: str) -> int:
    """How many traces of `path` with their device events are still held (compact traces have none)."""
    gc.collect()
    return sum(isinstance(o, RankTrace) and o.path == path and o.gpu.height > 0 for o in gc.get_objects())


@pytest.mark.parametrize("batched", [False, True])
def test_the_map_frees_a_trace_before_its_last_analyses(
    batched: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of one (a large rank) keeps no trace once its critical path is read: the analyses after it
    (the budget, the timeline's segments) run on what they need alone. A batch of several keeps its traces
    for a second try, each alone, should the batch meet a defect."""
    from traceview.map import rank_summary

    files = sorted(str(path) for path in (SAMPLES / "dp8_ideal").glob("rank*.json*"))[: 2 if batched else 1]
    alive: list[int] = []
    segments = rank_summary.rank_segments

    def counted(*args: Any, **kwargs: Any) -> Any:
        alive.append(_device_traces_alive(files[0]))
        return segments(*args, **kwargs)

    monkeypatch.setattr(rank_summary, "rank_segments", counted)
    results = summarize_files([MapTask(path) for path in files])
    assert [type(result) for result in results] == [RankSummary] * len(files)
    assert alive == [1 if batched else 0]


def test_summarize_taken_empties_its_list_and_matches_summarize_many() -> None:
    files = sorted((SAMPLES / "dp8_ideal").glob("rank*.json*"))[:2]
    traces = [kineto.parse(path) for path in files]
    together = summarize_many(traces)
    taken_from = list(traces)
    taken = summarize_taken(taken_from)
    assert taken_from == []
    assert len(traces) == 2  # summarize_many takes a copy
    for one, other in zip(together, taken, strict=True):
        assert differences(one, other, "taken") == []
