"""Bubbles (SPEC section 7): idle gaps with their causes on factory traces, the pipeline bubble on a GPipe
schedule built by hand and on the simulator's pipeline sample, and invariants on every real trace.

Expected values are arithmetic on the planted times; the real-trace identity (gaps add up to the budget's idle
time) compares two independent computations: holes between merged segments vs |W| - |G|.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests import kineto_factory as kf
from tests.shared_data import requires_shared
from tests.simulate.engine import write_run
from tests.simulate.scenario import GroundTruth
from traceview.bubbles.gaps import GAP_CAUSES, BubbleAnalysis, analyze_bubbles
from traceview.bubbles.pipeline_bubble import compute_union, pipeline_bubble, pipeline_stages
from traceview.budget.time_budget import all_step_windows, classified_events, time_budget
from traceview.collectives.calls import launches
from traceview.collectives.tables import analyze_collectives
from traceview.core.errors import TraceviewError, UsageError
from traceview.load.inputs import load_run
from traceview.model.trace import Run

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "data" / "real" / "kineto"
REAL_RUNS = sorted(p for p in REAL.iterdir() if p.is_dir()) if REAL.is_dir() else []
NCCL_AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
NCCL_P2P = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"


def bubbles_of(run: Run, virtual_stages: int = 1) -> BubbleAnalysis:
    events, windows = classified_events(run), all_step_windows(run)
    kernels = analyze_collectives(run, events).kernels
    return analyze_bubbles(events, windows, launches(run), kernels, virtual_stages)


def run_of(tmp_path: Path, docs: dict[int, dict[str, object]]) -> Run:
    for rank, doc in docs.items():
        kf.write(doc, tmp_path / f"rank{rank}.json")
    return load_run(tmp_path)


def gap_rows(analysis: BubbleAnalysis) -> list[tuple[int, float, float, str]]:
    return analysis.gaps.select("step", "start_us", "end_us", "cause").rows()


# ---------------------------------------------------------------- idle gaps


def attribution_events() -> list[kf.Event]:
    """Step 1 = [1000, 1200), step 2 = [1200, 1350) on the GPU; kernels with their launches."""
    return [
        kf.step(1, 1000, 200, on_gpu=True),
        kf.step(2, 1200, 150, on_gpu=True),
        kf.launch(990, 1),
        kf.kernel("gemm_a", 1000, 50, 1),  # [1000, 1050)
        kf.launch(1060, 2),
        kf.kernel("gemm_b", 1080, 20, 2),  # launched 1060 >= 1050: host-bound 30
        kf.launch(1070, 3),
        kf.kernel("gemm_c", 1120, 30, 3),  # launched 1070 < 1100: dependency-bound 20
        # comm, launched 1075 < 1150: comm-wait 10
        kf.launch(1075, 4),
        kf.kernel(NCCL_AR, 1160, 20, 4, stream=20),
        # comm launched 1182 >= 1180: host-bound 5
        kf.launch(1182, 5),
        kf.kernel(NCCL_AR, 1185, 5, 5, stream=20),
        # trailing [1190, 1200) of step 1: the next event is gemm_f, launched 1230 >= 1190: host-bound 10
        kf.launch(1230, 6),
        kf.kernel("gemm_f", 1240, 60, 6),  # leading [1200, 1240) of step 2: host-bound 40
        kf.kernel("gemm_g", 1320, 10),  # no correlation: [1300, 1320) unattributed 20
        # trailing [1330, 1350): nothing follows, unattributed 20
    ]


def test_each_gap_gets_the_cause_of_its_next_kernel(tmp_path: Path) -> None:
    analysis = bubbles_of(run_of(tmp_path, {0: kf.document(attribution_events())}))
    assert gap_rows(analysis) == [
        (1, 1050.0, 1080.0, "host-bound"),
        (1, 1100.0, 1120.0, "dependency-bound"),
        (1, 1150.0, 1160.0, "comm-wait"),
        (1, 1180.0, 1185.0, "host-bound"),
        (1, 1190.0, 1200.0, "host-bound"),
        (2, 1200.0, 1240.0, "host-bound"),
        (2, 1300.0, 1320.0, "unattributed"),
        (2, 1330.0, 1350.0, "unattributed"),
    ]
    assert analysis.gaps.get_column("position").to_list() == ["inner"] * 4 + [
        "trailing",
        "leading",
        "inner",
        "trailing",
    ]
    assert analysis.gaps.get_column("next_name").to_list()[:2] == ["gemm_b", "gemm_c"]


def test_totals_per_step_and_cause_add_up_to_idle(tmp_path: Path) -> None:
    analysis = bubbles_of(run_of(tmp_path, {0: kf.document(attribution_events())}))
    step1, step2 = analysis.per_step.rows(named=True)
    assert step1["host_bound_us"] == pytest.approx(30 + 5 + 10)
    assert step1["dependency_bound_us"] == pytest.approx(20)
    assert step1["comm_wait_us"] == pytest.approx(10)
    assert step1["unattributed_us"] == 0
    assert step1["idle_us"] == pytest.approx(200 - (50 + 20 + 30 + 20 + 5))
    assert (step2["host_bound_us"], step2["unattributed_us"], step2["gaps"]) == (40, 20 + 20, 3)
    assert step2["idle_us"] == pytest.approx(150 - (60 + 10))
    per_cause = {
        (r["step"], r["cause"]): (r["gaps"], r["idle_us"]) for r in analysis.per_cause.rows(named=True)
    }
    assert per_cause[(1, "host-bound")] == (3, 30 + 5 + 10)
    assert per_cause[(2, "unattributed")] == (2, 20 + 20)
    figures = analysis.gate_figures()
    assert figures["idle_host_bound_us"] == pytest.approx((45 + 40) / 2)
    assert figures["pipeline_bubble"] is None


def test_overlapping_streams_and_memory_ops_close_gaps(tmp_path: Path) -> None:
    events = [
        kf.step(1, 0, 100, on_gpu=True),
        kf.launch(0, 1),
        kf.kernel("gemm", 0, 30, 1),
        # [10, 50) on another stream: one segment [0, 50)
        kf.launch(1, 2),
        kf.kernel("conv", 10, 40, 2, stream=9),
        kf.launch(40, 3),
        kf.memcpy(60, 10, 3),  # memcpy [60, 70)
        kf.launch(2, 4),
        kf.kernel("gemm", 70, 10, 4),  # [70, 80) starts right after the memcpy: no gap
        kf.launch(75, 5),
        kf.kernel("gemm", 90, 10, 5),
        kf.launch(20, 6),
        kf.kernel("relu", 90, 5, 6, stream=9),
    ]
    analysis = bubbles_of(run_of(tmp_path, {0: kf.document(events)}))
    # [50, 60): the memcpy was launched at 40, before the gap: dependency-bound. [80, 90): two kernels start
    # at 90; the one launched first (relu, at 20) decides: dependency-bound.
    assert gap_rows(analysis) == [(1, 50.0, 60.0, "dependency-bound"), (1, 80.0, 90.0, "dependency-bound")]
    assert analysis.gaps.get_column("next_name").to_list()[1] == "relu"
    assert analysis.per_step.item(0, "idle_us") == pytest.approx(100 - (50 + 10 + 10 + 10))


def test_cpu_step_windows_charge_the_gap_between_steps_to_the_next(tmp_path: Path) -> None:
    events = [
        kf.step(1, 0, 100),
        kf.step(2, 100, 100),
        kf.launch(10, 1),
        kf.kernel("gemm", 20, 30, 1),
        kf.launch(120, 2),
        kf.kernel("gemm", 150, 30, 2),
    ]
    analysis = bubbles_of(run_of(tmp_path, {0: kf.document(events)}))
    # CPU steps: window 1 = [20, 50) (its first to its last activity), window 2 = [50, 180) (from where step
    # 1's device work ended): the gap before step 2's kernel, launched at 120 >= 50, leads step 2.
    assert gap_rows(analysis) == [(2, 50.0, 150.0, "host-bound")]
    assert analysis.gaps.get_column("position").to_list() == ["leading"]
    assert analysis.per_step.get_column("idle_us").to_list() == [0.0, 150 - 50]


def test_a_window_without_device_activity_is_one_leading_gap(tmp_path: Path) -> None:
    events = [
        kf.step(1, 0, 100, on_gpu=True),
        kf.step(2, 100, 100, on_gpu=True),
        kf.launch(5, 1),
        kf.kernel("gemm", 10, 10, 1),
        kf.launch(240, 2),
        kf.kernel("gemm", 250, 10, 2),  # after both windows
    ]
    analysis = bubbles_of(run_of(tmp_path, {0: kf.document(events)}))
    # [0, 10): launched 5 >= 0; [20, 100) and [100, 200): the next event, launched 240, is after both starts.
    assert gap_rows(analysis) == [
        (1, 0.0, 10.0, "host-bound"),
        (1, 20.0, 100.0, "host-bound"),
        (2, 100.0, 200.0, "host-bound"),
    ]
    assert analysis.gaps.get_column("position").to_list() == ["leading", "trailing", "leading"]
    assert analysis.per_step.get_column("idle_us").to_list() == [100 - 10, 100]


def test_virtual_stages_must_be_positive(tmp_path: Path) -> None:
    run = run_of(tmp_path, {0: kf.document([kf.kernel("gemm", 0, 10)])})
    with pytest.raises(UsageError, match="virtual-stages"):
        bubbles_of(run, virtual_stages=0)


# ---------------------------------------------------------------- pipeline bubble


def p2p(ts: float, collective: str, low: int) -> kf.Event:
    args = {
        "Collective name": collective,
        "Process Group Name": f"pp_{low}",
        "Process Group Ranks": f"[{low}, {low + 1}]",
        "Group size": 2,
        "dtype": "BFloat16",
        "In msg nelems": 1024,
        "Out msg nelems": 1024,
    }
    return kf.kernel(NCCL_P2P, ts, 1, stream=20, args=args)


def gpipe_docs(stages: int, micro: int, fwd: float, bwd: float) -> dict[int, dict[str, object]]:
    """A GPipe schedule: forward of micro-batch m on stage s at (s + m) * fwd, backward at (M + P - 1) * fwd +
    (P - 1 - s + m) * bwd; a send and its receive (1 us, comm stream) on the two stages at each hand-over."""
    end = (micro + stages - 1) * (fwd + bwd)
    docs: dict[int, dict[str, object]] = {}
    for s in range(stages):
        events = [kf.step(1, 0, end, on_gpu=True)]
        for m in range(micro):
            f_end, b_start = (s + m + 1) * fwd, (micro + stages - 1) * fwd + (stages - 1 - s + m) * bwd
            events += [kf.kernel("fwd", f_end - fwd, fwd), kf.kernel("bwd", b_start, bwd)]
            events += [p2p(f_end - 2, "send", s)] if s < stages - 1 else []  # activation to s + 1
            events += [p2p((s + m) * fwd - 2, "recv", s - 1)] if s > 0 else []  # when s - 1 sends it
            events += [p2p(b_start + bwd - 2, "send", s - 1)] if s > 0 else []  # gradient to s - 1
            events += [p2p(b_start - 2, "recv", s)] if s < stages - 1 else []  # from s + 1
        docs[s] = kf.document(events, rank=s, world_size=stages)
    return docs


def test_gpipe_bubble_equals_the_theory(tmp_path: Path) -> None:
    stages, micro, fwd, bwd = 3, 4, 100.0, 200.0
    analysis = bubbles_of(run_of(tmp_path, gpipe_docs(stages, micro, fwd, bwd)))
    rows = analysis.pipeline.rows(named=True)
    assert [(r["rank"], r["stage"], r["stages"]) for r in rows] == [(0, 0, 3), (1, 1, 3), (2, 2, 3)]
    assert [r["p2p_kernels"] for r in rows] == [2 * micro, 4 * micro, 2 * micro]
    assert [r["micro_batches"] for r in rows] == [micro] * 3
    step = (micro + stages - 1) * (fwd + bwd)
    for row in rows:
        assert row["step_us"] == pytest.approx(step)
        assert row["compute_us"] == pytest.approx(micro * (fwd + bwd))
        assert row["bubble_fraction"] == pytest.approx((step - micro * (fwd + bwd)) / step)
        assert row["theory_fraction"] == pytest.approx((3 - 1) / (4 * 1 + 3 - 1))
        assert row["excess"] == pytest.approx(0.0, abs=1e-12)
    assert analysis.pipelines.row(0, named=True)["ranks"] == "0, 1, 2"
    assert analysis.gate_figures()["pipeline_bubble"] == pytest.approx(2 / 6)


def test_interleaved_schedule_counts_more_boundaries() -> None:
    # P = 2, V = 2, M = 4: each stage's chunks touch 2V - 1 = 3 stage boundaries, 2 kernels per micro-batch
    # each.
    p2p_frame = pl.DataFrame(
        {
            "rank": [0] * 24 + [1] * 24,
            "start_us": [10.0] * 48,
            "pg_key": ["pp"] * 48,
            "members": [[0, 1]] * 48,
        }
    )
    events = pl.DataFrame(
        {
            "rank": [0, 1],
            "start_us": [0.0, 0.0],
            "end_us": [80.0, 60.0],
            "event_class": ["compute", "compute"],
        }
    )
    windows = pl.DataFrame(
        {"rank": [0, 1], "step": [1, 1], "window_start_us": [0.0, 0.0], "window_end_us": [100.0, 100.0]}
    )
    rows = pipeline_bubble(compute_union(events, windows), windows, p2p_frame, virtual_stages=2).rows(
        named=True
    )
    assert [r["micro_batches"] for r in rows] == [math.ceil(24 / (2 * 3))] * 2
    assert [r["theory_fraction"] for r in rows] == [pytest.approx((2 - 1) / (4 * 2 + 2 - 1))] * 2
    assert [r["bubble_fraction"] for r in rows] == [
        pytest.approx((100 - 80) / 100),
        pytest.approx((100 - 60) / 100),
    ]


def test_pipelines_are_connected_components_of_p2p_groups() -> None:
    members = [[0, 4], [4, 8], [8, 12], [1, 5], [5, 9], [9, 13], [2, 6], None]
    frame = pl.DataFrame({"members": members}, schema={"members": pl.List(pl.Int64)})
    stages = pipeline_stages(frame)
    by_rank = {r["rank"]: (r["pipeline"], r["stages"], r["stage"]) for r in stages.rows(named=True)}
    assert by_rank[12] == (0, 4, 3)
    assert by_rank[9] == (1, 4, 2)
    assert by_rank[6] == (2, 2, 1)
    assert len(by_rank) == 4 + 4 + 2


def test_unknown_groups_and_all_to_all_are_no_pipeline(tmp_path: Path) -> None:
    a2a = {"Collective name": "all_to_all", "Process Group Ranks": "[0, 1]", "Group size": 2}
    events = [kf.kernel(NCCL_P2P, 0, 10, args=a2a), kf.kernel(NCCL_P2P, 20, 10)]  # the second: no args
    analysis = bubbles_of(run_of(tmp_path, {0: kf.document(events)}))
    assert not analysis.pipeline_detected
    assert analysis.pipeline.height == 0
    assert analysis.unknown_group_p2p == 1


def test_fallback_without_the_collectives_frame_reads_kernel_args(tmp_path: Path) -> None:
    run = run_of(tmp_path, gpipe_docs(2, 2, 50.0, 50.0))
    events, windows = classified_events(run), all_step_windows(run)
    analysis = analyze_bubbles(events, windows, launches(run), None)
    assert analysis.pipeline.get_column("micro_batches").to_list() == [2, 2]
    assert analysis.pipeline.get_column("theory_fraction").to_list() == [pytest.approx(1 / (2 + 1))] * 2


def test_cli_passes_virtual_stages_to_the_json_and_the_gate(tmp_path: Path) -> None:
    for rank, doc in gpipe_docs(3, 4, 100.0, 200.0).items():
        kf.write(doc, tmp_path / f"rank{rank}.json")
    command = [sys.executable, "-m", "traceview", "summary", str(tmp_path), "--json"]
    done = subprocess.run(
        [*command, "--virtual-stages", "2", "--fail-on", "pipeline_bubble>0.3"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1  # measured (6 - 4) / 6 > 0.3
    bubbles = json.loads(done.stdout)["bubbles"]
    assert bubbles["virtual_stages"] == 2
    # V = 2: stage 0 touches 2 * 2 - 1 = 3 boundaries, 8 kernels -> M = ceil(8 / 6) = 2; stage 1: ceil(16 /
    # 8).
    assert [row["micro_batches"] for row in bubbles["pipeline_per_step"]] == [2, 2, 2]
    assert bubbles["pipelines"][0]["theory_fraction"] == pytest.approx((3 - 1) / (2 * 2 + 3 - 1))
    refused = subprocess.run(
        [*command, "--virtual-stages", "0"], capture_output=True, text=True, timeout=120, check=False
    )
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1
    assert "'--virtual-stages': 0 is not in the range 1<=x<=1024" in refused.stderr


# ---------------------------------------------------------------- the simulator's pipeline sample


@pytest.fixture(scope="module")
def pp4(tmp_path_factory: pytest.TempPathFactory) -> tuple[GroundTruth, BubbleAnalysis]:
    """The sample's own scenario (`sample_traces/make_samples.py`), written afresh: two 2-stage pipelines."""
    spec = importlib.util.spec_from_file_location("make_samples", ROOT / "sample_traces" / "make_samples.py")
    assert spec is not None
    assert spec.loader is not None
    samples = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(samples)
    folder = tmp_path_factory.mktemp("pp4")
    truth = write_run(samples.pp4_mismatch(), folder)
    return truth, bubbles_of(load_run(folder))


def test_simulated_pipeline_stages_and_micro_batches(pp4: tuple[GroundTruth, BubbleAnalysis]) -> None:
    truth, analysis = pp4
    assert analysis.pipelines.get_column("ranks").to_list() == ["0, 1", "2, 3"]  # links pp_0_1 and pp_2_3
    assert analysis.pipeline.height == 4 * 4
    for row in analysis.pipeline.rows(named=True):
        # Ground-truth steps are 0-based, trace steps start at ProfilerStep#1.
        count = sum(
            1
            for i in truth.instances
            if i.collective == "SendRecv" and i.step + 1 == row["step"] and row["rank"] in i.ranks
        )
        assert (row["stages"], row["stage"], row["p2p_kernels"]) == (2, row["rank"] % 2, count)
        assert row["micro_batches"] == math.ceil(count / (2 * 1))
        assert row["theory_fraction"] == pytest.approx((2 - 1) / (row["micro_batches"] * 1 + 2 - 1))


def test_simulated_bubble_and_idle_match_the_ground_truth(pp4: tuple[GroundTruth, BubbleAnalysis]) -> None:
    truth, analysis = pp4
    measured = {(r["rank"], r["step"]): r for r in analysis.pipeline.rows(named=True)}
    idle = {(r["rank"], r["step"]): r["idle_us"] for r in analysis.per_step.rows(named=True)}
    assert len(measured) == len(truth.steps) == 4 * 4
    for step in truth.steps:
        # The GPU window spans the step's device activity: its length = idle + |C u M|.
        window = step.idle_gpu_window_us + step.t_comp_us + step.t_comm_us - step.t_overlap_us
        row = measured[(step.rank, step.step)]
        assert row["bubble_fraction"] == pytest.approx((window - step.t_comp_us) / window, abs=1e-6)
        assert idle[(step.rank, step.step)] == pytest.approx(step.idle_gpu_window_us, abs=1e-3)


# ---------------------------------------------------------------- every real trace


@requires_shared
@pytest.mark.parametrize("folder", REAL_RUNS, ids=[p.name for p in REAL_RUNS])
def test_real_traces_gaps_add_up_to_the_budget_idle(folder: Path) -> None:
    try:
        run = load_run(folder, workers=1)
    except TraceviewError as error:
        pytest.skip(f"not loadable: {error}")
    events, windows = classified_events(run), all_step_windows(run)
    analysis = bubbles_of(run)
    budget = time_budget(events, windows).per_step.select(
        "rank", "step", pl.col("idle_us").alias("budget_idle")
    )
    joined = analysis.per_step.join(budget, on=["rank", "step"], how="full", coalesce=True)
    assert joined.height == budget.height == analysis.per_step.height
    for row in joined.rows(named=True):
        assert row["idle_us"] == pytest.approx(row["budget_idle"], rel=1e-6, abs=1e-6)
        parts = sum(
            row[c] for c in ("host_bound_us", "dependency_bound_us", "comm_wait_us", "unattributed_us")
        )
        assert parts == pytest.approx(row["idle_us"], rel=1e-9, abs=1e-9)
    gaps = analysis.gaps
    assert set(gaps.get_column("cause").unique().to_list()) <= set(GAP_CAUSES)
    assert gaps.filter(pl.col("dur_us") <= 0).height == 0
    previous_end = pl.col("end_us").shift(1).over("rank", "step")
    assert gaps.filter(pl.col("start_us") < previous_end).height == 0  # disjoint, in order
    host = gaps.filter(pl.col("cause") == "host-bound")
    assert host.filter(pl.col("next_launch_us") < pl.col("start_us")).height == 0
    late = gaps.filter(pl.col("cause").is_in(["dependency-bound", "comm-wait"]))
    assert late.filter(pl.col("next_launch_us") >= pl.col("start_us")).height == 0
    fractions = analysis.pipeline.get_column("bubble_fraction").drop_nulls()
    assert fractions.filter((fractions < 0) | (fractions > 1)).len() == 0
