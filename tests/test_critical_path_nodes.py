"""The collectives as open nodes of the path (docs/metrics.md, "Critical path", Collectives as open
nodes): the map records each collective's entry and exit with the path's compute, host and communication
time up to each; the reduce resolves each matched call's peer wait from the last member's arrival, clipped
to the collective's communication on the path, and the replay's skeleton splits its segments by the path's
own compute and host time. Two ranks built by hand, every figure stated as arithmetic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest
from traceview.parsers import kineto
from traceview.reports.html.page import render_html

import traceview
from tests.collective_waits_plain import waits as plain_waits
from tests.kineto_factory import document, kernel, launch, step, write
from tests.shared_data import REAL_KINETO, requires_shared
from traceview.critical_path.analysis import collective_waits, median_steps
from traceview.critical_path.categories import CATEGORY_COLUMNS
from traceview.critical_path.nodes import NODE_SCHEMA
from traceview.map.rank_summary import summarize
from traceview.reduce.analysis import RunAnalysis
from traceview.replay.skeleton import skeleton

GEMM = "ampere_sgemm_128x64_nn"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
COMM_STREAM = 20


def rank_events(first_gemm_end: float) -> list[dict[str, Any]]:
    """One step [0, 200]: a GEMM 10..`first_gemm_end` and a second one 40..80 (rank 0 only, on another
    stream: it hides part of the wait), all-reduce A from `first_gemm_end` to 120, a GEMM 120..160,
    all-reduce B 160..180; Python around the launches."""
    events = [
        step(1, 0, 200, on_gpu=True),
        step(1, 0, 200),
        launch(5, 1),
        kernel(GEMM, 10, first_gemm_end - 10, correlation=1),
        launch(45, 2),
        kernel(NCCL, first_gemm_end, 120 - first_gemm_end, correlation=2, stream=COMM_STREAM),
        launch(115, 4),
        kernel(GEMM, 120, 40, correlation=4),
        launch(150, 5),
        kernel(NCCL, 160, 20, correlation=5, stream=COMM_STREAM),
    ]
    if first_gemm_end == 50:  # rank 0: a GEMM on stream 8 under the first 30 us of A's wait
        events += [launch(30, 3), kernel(GEMM, 40, 40, correlation=3, stream=8)]
    return events


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("nodes")
    for rank, first_gemm_end in ((0, 50.0), (1, 100.0)):
        doc = document(rank_events(first_gemm_end), rank=rank, world_size=2, base_ns=0)
        write(doc, folder / f"rank{rank}.json")
    return folder


@pytest.fixture(scope="module")
def analysis(two_ranks: Path) -> RunAnalysis:
    return traceview.analyze(two_ranks).raw


def test_the_map_leaves_each_collective_open(two_ranks: Path) -> None:
    nodes = summarize(kineto.parse(two_ranks / "rank0.json")).path_nodes
    assert dict(nodes.schema) == NODE_SCHEMA
    rows = nodes.sort("entry_us").rows(named=True)
    assert [(row["entry_us"], row["exit_us"]) for row in rows] == [(50, 120), (160, 180)]
    first, second = rows
    # up to A's entry: Python 0..5, launches 5..7 and 30..32, Python between, the GEMM 10..50
    assert (first["entry_compute_us"], first["entry_host_us"], first["entry_comm_us"]) == (50 - 10, 10, 0)
    # A's exit: the second GEMM holds 50..80, A alone 80..120
    assert (first["exit_compute_us"], first["exit_comm_us"]) == ((50 - 10) + (80 - 50), 120 - 80)
    assert second["entry_compute_us"] == (80 - 10) + (160 - 120)
    assert second["exit_comm_us"] == (120 - 80) + (180 - 160)
    assert second["exit_host_us"] == 10


def path_rows(analysis: RunAnalysis) -> dict[int, dict[str, float]]:
    path = analysis.critical_path
    assert path is not None
    return {row["rank"]: row for row in path.per_step.iter_rows(named=True)}


def test_peer_wait_resolved_per_collective(analysis: RunAnalysis) -> None:
    rows = path_rows(analysis)
    # rank 0 enters A at 50, rank 1 at 100: 50 us of waiting, of which A holds the path 80..120 only
    assert rows[0]["peer_wait_us"] == min(100 - 50, 120 - 80)
    assert rows[0]["comm_transfer_us"] == (120 - 80) + (180 - 160) - min(100 - 50, 120 - 80)
    # the per-step split T_comm - T_transfer would have moved (70 + 20) - (20 + 20) = 50 us
    assert rows[0]["peer_wait_us"] != (70 + 20) - (20 + 20)
    assert rows[1]["peer_wait_us"] == 0  # rank 1 arrives last at A, with rank 0 at B
    assert rows[1]["comm_transfer_us"] == (120 - 100) + (180 - 160)
    for row in rows.values():
        assert sum(row[c] for c in CATEGORY_COLUMNS) == pytest.approx(row["step_us"], abs=1e-6)


def test_segments_split_by_the_path(analysis: RunAnalysis) -> None:
    replay = analysis.replay
    assert replay is not None
    body = replay.skeleton.sort("rank", "order").select(
        "rank", "order", "segment_us", "compute_us", "host_us"
    )
    expected = [
        (0, 0, 50.0, 50.0 - 10, 10.0),  # window start to A: the GEMM 10..50, host 0..10
        (0, 1, 160.0 - 120, 160.0 - 120, 0.0),  # A's exit to B: the GEMM 120..160
        (1, 0, 100.0, 100.0 - 10, 10.0),
        (1, 1, 160.0 - 120, 160.0 - 120, 0.0),
    ]
    assert body.rows() == expected
    assert replay.error_median == 0  # the unchanged skeletons give the step back: 200 us
    host_free = replay.lever("host_free")
    assert host_free is not None
    # the host time before A and the tail removed: rank 1's GEMM (the last arrival), A's transfer, the
    # GEMM, B's transfer
    assert host_free["step_us"] == (100 - 10) + 20 + (160 - 120) + 20


def test_a_summary_without_nodes_moves_nothing() -> None:
    calls = pl.DataFrame(
        {
            "instance": [0, 0],
            "rank": [0, 1],
            "step": [1, 1],
            "start_us": [50.0, 100.0],
            "end_us": [120.0, 120.0],
            "aligned_start_us": [50.0, 100.0],
        }
    )
    waits = collective_waits(calls, pl.DataFrame(schema=NODE_SCHEMA))
    assert waits.get_column("wait_us").to_list() == [0.0, 0.0]


def test_without_nodes_the_skeleton_splits_by_the_share(analysis: RunAnalysis) -> None:
    crossrank = analysis.crossrank
    assert crossrank is not None
    per_step = analysis.budget.per_step
    body, _ = skeleton(crossrank.calls, per_step, analysis.collectives.kernels)
    row = body.filter((pl.col("rank") == 1) & (pl.col("order") == 0)).row(0, named=True)
    budget = per_step.filter(pl.col("rank") == 1).row(0, named=True)
    share = (budget["comp_us"] - budget["overlap_us"]) / (budget["step_us"] - budget["comm_us"])
    assert row["compute_us"] == pytest.approx(100 * share)
    assert row["compute_us"] + row["host_us"] == pytest.approx(100)


@requires_shared
def test_peer_waits_against_a_plain_pass_on_the_gloo_run() -> None:
    """On the real 2-rank gloo run, every (rank, step)'s peer wait equals the plain-Python pass over the raw
    trace events (`tests/collective_waits_plain.py`), given the clock offset the tool aligned rank 1 by."""
    folder = REAL_KINETO / "h200_pt211_gloo_dp2"
    analysis = traceview.analyze(folder).raw
    path, crossrank = analysis.critical_path, analysis.crossrank
    assert path is not None
    assert crossrank is not None
    offsets = crossrank.clocks.offsets.explode("ranks").select("ranks", "offset_us").rows()
    files = sorted(folder.glob("gloo_rank*.json.gz"))
    shifts = {int(rank): float(us) for rank, us in offsets}
    steps = path.per_step.get_column("step").unique().to_list()
    plain = {step: plain_waits(step, files, shifts) for step in steps}
    for row in path.per_step.iter_rows(named=True):
        mine = sum(call["peer_wait_us"] for call in plain[row["step"]] if call["rank"] == row["rank"])
        assert row["peer_wait_us"] == pytest.approx(mine, abs=0.01)
    assert path.per_step.get_column("peer_wait_us").max() > 1000  # rank 1 waits ms in two steps


def test_holders_and_bars_link_to_the_step_drill_down(analysis: RunAnalysis) -> None:
    path = analysis.critical_path
    assert path is not None
    # one step per rank: each rank's median step is that step
    assert path.per_rank.select("rank", "median_step").rows() == [(0, 1), (1, 1)]
    page = render_html(analysis, plotlyjs="cdn")
    assert '<a href="#cell=0-1">rank 0, step 1</a>' in page
    assert '<a href="#cell=1-1">rank 1, step 1</a>' in page
    for rank, longest in path.holders.select("rank", "longest_step").rows():
        assert f'<a href="#cell={rank}-{longest}">{longest}</a>' in page
    assert '"customdata":["#cell=0-1","#cell=1-1"]' in page  # the bars the page's script follows
    assert 'id="drilldown-cells"' in page  # the drill-down the links open


def test_median_step_is_the_step_nearest_the_median() -> None:
    per_step = pl.DataFrame(
        {"rank": [0, 0, 0, 1, 1], "step": [4, 5, 6, 4, 5], "step_us": [100.0, 300.0, 190.0, 50.0, 70.0]}
    )
    steps = median_steps(per_step)
    # rank 0: median 190 (step 6 itself); rank 1: median 60, steps 4 and 5 equally near: the first
    assert steps.sort("rank").rows() == [(0, 6), (1, 4)]
