"""The replay given a rank twice (two summaries of one rank, which only an input naming the same rank twice
gives): it keeps the first one's rows, as the loader keeps a rank's first file, so its joins never multiply
rows (docs/metrics.md, "Replay")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.kineto_factory import document, kernel, launch, step, write
from tests.simulate.engine import write_run
from tests.simulate.scenario import data_parallel_scenario
from traceview.core.errors import RunError
from traceview.events.kernel_names import user_patterns
from traceview.load.inputs import load_run
from traceview.map.rank_summary import summarize
from traceview.model.trace import Run
from traceview.reduce.analysis import RunAnalysis, analyze
from traceview.reduce.reduce import reduce_summaries
from traceview.replay.engine import Chain, run, variant_columns

GEMM = "ampere_sgemm_128x64_nn"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def _chain(tails: pl.DataFrame) -> Chain:
    """Two ranks, two collectives: A (segments 10 and 30 us after the window start, transfer 5), B (4 and 2
    after A's exit, 6); windows start at 0."""
    body = pl.DataFrame(
        {
            "step": [1, 1, 1, 1],
            "instance": [0, 0, 1, 1],
            "rank": [0, 1, 0, 1],
            "order": [0, 0, 1, 1],
            "anchor": [None, None, 0, 0],
            "segment_us": [10.0, 30.0, 4.0, 2.0],
            "transfer_us": [5.0, 5.0, 6.0, 6.0],
        }
    )
    return Chain(*variant_columns(body, tails, frozenset(), False, 0))


def test_the_engine_keeps_one_tail_a_rank_and_step() -> None:
    tails = pl.DataFrame({"step": [1, 1], "rank": [0, 1], "start_us": [0.0, 0.0], "tail_us": [3.0, 3.0]})
    repeated = pl.concat([tails, tails, tails.head(1)])  # rank 0's tail three times, rank 1's twice
    ends = run(_chain(repeated))
    assert ends.height == 2  # one row a (rank, step), as without repeats
    # A: entries 10 and 30, starts 30, done 35; B: entries 39 and 37, starts 39, done 45; + the tail 3
    assert ends.get_column("end_us").to_list() == [45.0 + 3, 45.0 + 3]
    assert ends.equals(run(_chain(tails)))


def _rank_events(first_gemm_end: float) -> list[dict[str, Any]]:
    """One step [0, 200]: a GEMM 10..`first_gemm_end`, all-reduce A from there to 120, a GEMM 120..160,
    all-reduce B 160..180."""
    return [
        step(1, 0, 200, on_gpu=True),
        step(1, 0, 200),
        launch(5, 1),
        kernel(GEMM, 10, first_gemm_end - 10, correlation=1),
        launch(45, 2),
        kernel(NCCL, first_gemm_end, 120 - first_gemm_end, correlation=2, stream=20),
        launch(115, 4),
        kernel(GEMM, 120, 40, correlation=4),
        launch(150, 5),
        kernel(NCCL, 160, 20, correlation=5, stream=20),
    ]


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The simulator's 4 data-parallel workers, 2 buckets of 1e6 bf16 gradients, 2 steps."""
    folder = tmp_path_factory.mktemp("repeats")
    write_run(data_parallel_scenario(4, 2_000_000, 16, 50e12, 20e9, buckets=2, steps=2), folder)
    return load_run(str(folder), workers=1)


def _replayed(analysis: RunAnalysis) -> tuple[pl.DataFrame, pl.DataFrame]:
    assert analysis.replay is not None
    return analysis.replay.skeleton, analysis.replay.levers


def test_a_run_built_with_a_rank_twice_is_refused(four_ranks: Run) -> None:
    first = four_ranks.ranks[0]
    with pytest.raises(RunError, match=f"rank 0 is also claimed by {first.path}"):
        analyze(Run(ranks=(first, *four_ranks.ranks), source=four_ranks.source))


def test_a_rank_summarised_twice_is_replayed_once(four_ranks: Run) -> None:
    """Summaries given to the reduce directly are not checked for repeats: the replay still keeps one."""
    clean = analyze(four_ranks)
    patterns = user_patterns((), ())
    summaries = [summarize(trace, patterns, len(four_ranks)) for trace in four_ranks]
    repeated = reduce_summaries([summaries[0], *summaries], source=four_ranks.source)
    body, levers = _replayed(repeated)
    assert body.height == 4 * 2 * 2  # ranks x steps x buckets, as in the run without the repeat
    clean_body, clean_levers = _replayed(clean)
    assert body.equals(clean_body)
    assert levers.equals(clean_levers)
    assert repeated.replay is not None
    assert clean.replay is not None
    assert "appear twice" not in clean.replay.sentence
    assert repeated.replay.sentence.endswith(
        "Rank(s) 0 appear twice in the input (two summaries of one rank): the replay keeps the first one's "
        "steps and calls, as the loader keeps a rank's first file."
    )


def test_the_loader_keeps_the_first_file_of_a_rank(tmp_path: Path) -> None:
    """What the replay mirrors: of two files claiming one rank the loader keeps the first (by path)."""
    for name, rank, first_gemm_end in (
        ("a_rank0.json", 0, 50.0),
        ("b_rank0.json", 0, 60.0),
        ("rank1.json", 1, 100.0),
    ):
        write(document(_rank_events(first_gemm_end), rank=rank, world_size=2, base_ns=0), tmp_path / name)
    loaded = load_run(str(tmp_path), workers=1)
    assert [Path(trace.path).name for trace in loaded] == ["a_rank0.json", "rank1.json"]
    assert [Path(skipped.path).name for skipped in loaded.skipped] == ["b_rank0.json"]
