"""The time budget of SPEC section 4 on small factory traces, expected values written as arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import kineto_factory as kf
from traceview.budget.time_budget import all_step_windows, classified_events, step_budget, time_budget
from traceview.load.inputs import load_run
from traceview.reduce.analysis import RunOptions, analyze
from traceview.steps.windows import WHOLE_TRACE

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def budget_of(tmp_path: Path, events: list[kf.Event], name: str = "rank0.json"):
    kf.write(kf.document(events), tmp_path / name)
    run = load_run(tmp_path / name)
    return time_budget(classified_events(run), all_step_windows(run))


def test_gpu_step_window_budget(tmp_path: Path) -> None:
    events = [
        kf.step(1, 0, 100, on_gpu=True),
        kf.kernel("gemm", 10, 30),  # compute [10, 40)
        kf.kernel("relu", 35, 15),  # compute [35, 50): union of compute is [10, 50)
        kf.kernel(NCCL, 30, 40, stream=20),  # comm [30, 70), overlapping compute on [30, 50)
        kf.memcpy(80, 5),  # memory [80, 85)
    ]
    row = budget_of(tmp_path, events).per_step.row(0, named=True)
    assert row["step"] == 1
    assert row["step_us"] == pytest.approx(100 - 0)
    assert row["comp_us"] == pytest.approx(50 - 10)
    assert row["comm_us"] == pytest.approx(70 - 30)
    assert row["overlap_us"] == pytest.approx(50 - 30)
    assert row["exposed_comm_us"] == pytest.approx((70 - 30) - (50 - 30))
    assert row["overlap_ratio"] == pytest.approx((50 - 30) / (70 - 30))
    assert row["idle_us"] == pytest.approx(100 - ((70 - 10) + (85 - 80)))
    assert row["gamma"] == pytest.approx((70 - 30) / (50 - 10))
    assert row["exposed_gamma"] == pytest.approx(((70 - 30) - (50 - 30)) / (50 - 10))


def test_no_comm_gives_null_overlap_ratio_and_zero_gamma(tmp_path: Path) -> None:
    row = budget_of(tmp_path, [kf.kernel("gemm", 0, 10), kf.kernel("gemm", 20, 10)]).per_step.row(
        0, named=True
    )
    assert row["step"] == WHOLE_TRACE
    assert row["overlap_ratio"] is None
    assert row["gamma"] == 0
    assert row["idle_us"] == pytest.approx(30 - 20)


def test_cpu_steps_assign_kernels_by_their_launch(tmp_path: Path) -> None:
    # Step 1 on the CPU is [0, 100), step 2 is [100, 200). Kernel 11 is launched in step 1 but runs at 150.
    events = [
        kf.step(1, 0, 100),
        kf.step(2, 100, 100),
        kf.launch(10, correlation=10),
        kf.kernel("a", 20, 10, correlation=10),
        kf.launch(90, correlation=11),
        kf.kernel("b", 150, 20, correlation=11),
        kf.launch(120, correlation=12),
        kf.kernel("c", 180, 40, correlation=12),
    ]
    steps = budget_of(tmp_path, events).per_step.sort("step")
    # step 1 runs from its first device activity (20) to its last device end (170); step 2 from 170 to 220
    assert steps.get_column("window_start_us").to_list() == [20, 170]
    assert steps.get_column("step_us").to_list() == pytest.approx([170 - 20, 220 - 170])
    assert steps.get_column("comp_us").to_list() == pytest.approx([10 + 20, 40])
    assert steps.get_column("idle_us").to_list() == pytest.approx([(170 - 20) - (10 + 20), (220 - 170) - 40])


def test_run_median_is_over_every_rank_and_step(tmp_path: Path) -> None:
    for rank, comm in ((0, 10), (1, 30), (2, 60)):
        events = [kf.step(1, 0, 100, on_gpu=True), kf.kernel("gemm", 0, 20), kf.kernel(NCCL, 20, comm)]
        kf.write(kf.document(events, rank=rank, world_size=3), tmp_path / f"rank{rank}.json")
    analysis = analyze(load_run(tmp_path))
    assert analysis.budget.run_median["gamma"] == pytest.approx(30 / 20)
    # the three kernels are one matched instance: its transfer is the shortest member's 10 us, so transfer
    # gamma is 10 / 20 on every rank: communication takes 1.5x compute, but most of it is waiting
    assert analysis.budget.run_median["transfer_gamma"] == pytest.approx(10 / 20)
    assert analysis.verdict.label == "waiting-bound"


DEEPEP = "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*, int*, int*)"
MULTIMEM = (
    "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned long)"
)
SUSPECT = "void my_lib::fused_allreduce_rmsnorm<float>(float*)"


def test_communication_kernels_of_other_libraries_count_as_communication(tmp_path: Path) -> None:
    events = [
        kf.kernel("gemm", 0, 40),  # compute [0, 40)
        kf.kernel(MULTIMEM, 40, 10),  # comm [40, 50)
        kf.kernel(DEEPEP, 50, 30),  # comm [50, 80)
    ]
    row = budget_of(tmp_path, events).per_step.row(0, named=True)
    assert row["comm_us"] == pytest.approx(10 + 30)
    assert row["gamma"] == pytest.approx((10 + 30) / 40)


def _suspect_trace(tmp_path: Path) -> Path:
    events = [
        kf.kernel("gemm", 0, 40),  # compute [0, 40)
        kf.kernel(SUSPECT, 40, 10),  # suspected [40, 50)
        kf.kernel(SUSPECT, 60, 20),  # suspected [60, 80)
    ]
    return kf.write(kf.document(events), tmp_path / "rank0.json")


def test_suspected_kernels_are_communication_listed_and_warned(tmp_path: Path) -> None:
    analysis = analyze(load_run(_suspect_trace(tmp_path)))
    assert analysis.budget.per_step["comm_us"].to_list() == [pytest.approx(10 + 20)]
    assert analysis.collectives is not None
    suspects = analysis.collectives.suspected_comm_kernels
    assert suspects.rows() == [(SUSPECT, 1, 2, pytest.approx(10 + 20))]
    warnings = [w for w in analysis.header.warnings if "look like communication" in w]
    assert len(warnings) == 1
    assert "fused_allreduce_rmsnorm" in warnings[0]
    assert "(2 kernels, 0.030 ms)" in warnings[0]
    assert "--compute-pattern" in warnings[0]


def test_compute_pattern_turns_a_suspect_into_compute(tmp_path: Path) -> None:
    options = RunOptions(compute_patterns=(r"fused_allreduce_rmsnorm",))
    analysis = analyze(load_run(_suspect_trace(tmp_path)), options)
    row = analysis.budget.per_step.row(0, named=True)
    assert (row["comm_us"], row["comp_us"]) == (0, pytest.approx(40 + 10 + 20))
    assert analysis.collectives is not None
    assert analysis.collectives.suspected_comm_kernels.height == 0
    assert not [w for w in analysis.header.warnings if "look like communication" in w]


def test_gloo_cpu_calls_stay_calls_and_are_never_suspected(tmp_path: Path) -> None:
    gloo = kf.cpu_op("gloo:all_reduce", 10, 200, cat="user_annotation")
    path = kf.write(kf.document([gloo, kf.kernel("gemm", 0, 5)]), tmp_path / "rank0.json")
    analysis = analyze(load_run(path))
    assert analysis.collectives is not None
    assert analysis.collectives.suspected_comm_kernels.height == 0
    rows = analysis.collectives.kernels.select("name", "collective", "on_device").rows()
    assert rows == [("gloo:all_reduce", "AllReduce", False)]
    assert analysis.budget.per_step["comm_us"].to_list() == [0]


def test_step_budget_is_the_budgets_per_step_rows(tmp_path: Path) -> None:
    events = [
        kf.step(1, 0, 100, on_gpu=True),
        kf.kernel("gemm", 10, 30),  # compute [10, 40)
        kf.kernel(NCCL, 30, 40, stream=20),  # comm [30, 70)
        kf.step(2, 100, 50, on_gpu=True),
        kf.kernel("gemm", 110, 20),  # compute [110, 130)
    ]
    kf.write(kf.document(events), tmp_path / "rank0.json")
    run = load_run(tmp_path / "rank0.json")
    events_frame, windows = classified_events(run), all_step_windows(run)
    rows = step_budget(events_frame, windows)
    assert rows.equals(time_budget(events_frame, windows).per_step)
    assert rows.select("step", "comp_us", "comm_us", "overlap_us").rows() == [
        (1, 40 - 10, 70 - 30, 40 - 30),
        (2, 130 - 110, 0.0, 0.0),
    ]
