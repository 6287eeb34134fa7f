"""The reduce's held summaries: folded as they arrive, released as the summaries' own frames stacked in rank
order, every other summary's rows left out; and the pipeline reduces the summary of the file it keeps."""

from __future__ import annotations

import gc
import gzip
import json
import shutil
import weakref
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest

import traceview.reduce.held as held_module
from traceview.core.errors import TraceviewError
from traceview.load.inputs import load_run
from traceview.map.executors import map_ranks
from traceview.map.rank_summary import RankSummary, summarize
from traceview.options.run import build_options
from traceview.options.user import UserOptions
from traceview.reduce.held import PART_FRAMES, SUMMARY_FRAMES, HeldSummaries
from traceview.reduce.pipeline import analyze_files

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


@pytest.fixture(scope="module")
def summaries() -> list[RankSummary]:
    return [summarize(trace) for trace in load_run(SAMPLES / "dp8_straggler")]


def _expected(summaries: list[RankSummary], order: list[int], shifts: list[float]) -> dict[str, pl.DataFrame]:
    """Each frame of the summaries `order` names, moved by their shifts, concatenated: the plain way."""
    moved = [summaries[i].shifted(shift) for i, shift in zip(order, shifts, strict=True)]
    frames = {n: pl.concat([getattr(s, n) for s in moved], how="vertical_relaxed") for n in SUMMARY_FRAMES}
    parts = {
        n: pl.concat([getattr(s.kernel_parts, n) for s in moved], how="vertical_relaxed") for n in PART_FRAMES
    }
    return frames | parts


@pytest.mark.parametrize("fold_every", [1, 3, 64])
def test_released_frames_are_the_summaries_stacked_in_order(
    summaries: list[RankSummary], fold_every: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(held_module, "FOLD_EVERY", fold_every)
    arrived = [summaries[i] for i in (5, 2, 7, 0, 3, 1, 6, 4)]  # out of rank order, as workers finish
    held = HeldSummaries(arrived)
    order = [3, 5, 1, 4, 0, 6, 2]  # ranks 0..6 by arrival index; rank 4 (arrival 7) left out
    shifts = [10.0 * i for i in range(len(order))]
    released = held.release(order, shifts)
    expected = _expected(arrived, order, shifts)
    for name in SUMMARY_FRAMES:
        assert getattr(released, name).equals(expected[name]), name
    for name in PART_FRAMES:
        assert getattr(released.kernel_parts, name).equals(expected[name]), name
    assert 4 not in released.windows.get_column("rank").to_list()
    assert [held.ranks[i].trace.rank for i in order] == [0, 1, 2, 3, 5, 6, 7]


def test_summaries_are_released_once(summaries: list[RankSummary]) -> None:
    held = HeldSummaries(summaries[:2])
    held.release([0, 1], [0.0, 0.0])
    with pytest.raises(TraceviewError):
        held.release([0, 1], [0.0, 0.0])
    with pytest.raises(TraceviewError):
        held.add(summaries[2])


def test_an_empty_frame_adds_no_row(summaries: list[RankSummary]) -> None:
    emptied = replace(summaries[1], top_gaps=summaries[1].top_gaps.clear())
    released = HeldSummaries([summaries[0], emptied, summaries[2]]).release([0, 1, 2], [0.0, 0.0, 0.0])
    expected = pl.concat([summaries[0].top_gaps, summaries[2].top_gaps])
    assert released.top_gaps.equals(expected)


def _with_rank(source: Path, target: Path, rank: int, kernel_scale: float) -> None:
    """`source` written to `target` as rank `rank`, every kernel `kernel_scale` times as long."""
    document = json.loads(gzip.decompress(source.read_bytes()))
    document["distributedInfo"]["rank"] = rank
    for event in document["traceEvents"]:
        if event.get("cat") == "kernel" and "dur" in event:
            event["dur"] *= kernel_scale
    target.write_bytes(gzip.compress(json.dumps(document).encode()))


def _rank_comp_us(folder: Path, rank: int) -> float:
    analysis = analyze_files(folder, build_options(folder))
    per_rank = analysis.budget.per_rank.filter(pl.col("rank") == rank)
    return float(per_rank.get_column("comp_us").item())


def test_the_file_kept_for_a_claimed_rank_is_the_one_reduced(tmp_path: Path) -> None:
    """Two files claim rank 3: the first by path is kept (and said so); its figures are reported, not the
    other file's (the reduce once took the summary of the last file read for that rank)."""
    alone, both = tmp_path / "alone", tmp_path / "both"
    for folder in (alone, both):
        folder.mkdir()
        for rank in range(8):
            name = f"rank-{rank}.pt.trace.json.gz"
            shutil.copy(SAMPLES / "dp8_straggler" / name, folder / name)
    claiming = tmp_path / "claiming"
    claiming.mkdir()
    _with_rank(SAMPLES / "dp8_straggler" / "rank-7.pt.trace.json.gz", claiming / "zz-rank3.json.gz", 3, 3.0)
    shutil.copy(claiming / "zz-rank3.json.gz", both / "zz-rank3.json.gz")
    kept = _rank_comp_us(alone, 3)
    assert _rank_comp_us(claiming, 3) != kept  # the claiming file's own figures differ
    assert _rank_comp_us(both, 3) == kept


def test_the_pool_lets_go_of_each_summary_once_it_is_taken() -> None:
    """The parent keeps only what its caller holds: a summary taken from the pool and dropped is freed once
    the next is taken (the futures once held every summary until the last was read)."""
    files = sorted((SAMPLES / "dp8_straggler").glob("rank-*.json.gz"))[:3]
    options = build_options(SAMPLES / "dp8_straggler", UserOptions(workers=1))
    results = map_ranks(files, options, parallel_min_bytes=0)
    first = weakref.ref(next(results))
    second = next(results)
    gc.collect()
    assert first() is None
    assert [second.rank, *(summary.rank for summary in results)] == [1, 2]
