"""The kernels analysis on small factory traces (traceview.kernels): class time with the overlap term, top
kernels, the innermost operator of each kernel, launch statistics, graphs, the host side of a step and the
slow rank explained; expected values written as arithmetic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests import kineto_factory as kf
from traceview.kernels import slow_rank
from traceview.kernels.analysis import KernelAnalysis
from traceview.kernels.slow_rank import references
from traceview.load.inputs import load_run
from traceview.reduce.analysis import analyze

GEMM = "volta_sgemm_128x64_nn"
FILL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "at::detail::Array<char*, 1> >(int)"
)
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def kernels_of(tmp_path: Path, ranks: dict[int, list[kf.Event]]) -> KernelAnalysis:
    for rank, events in ranks.items():
        kf.write(kf.document(events, rank=rank, world_size=len(ranks)), tmp_path / f"rank{rank}.json")
    found = analyze(load_run(tmp_path)).kernels
    assert found is not None
    return found


def _classes(kernels: KernelAnalysis, step: int = 1, rank: int = 0) -> dict[str, dict[str, Any]]:
    rows = kernels.parts.class_steps.filter((pl.col("step") == step) & (pl.col("rank") == rank))
    return {row["kernel_class"]: row for row in rows.iter_rows(named=True)}


def test_class_times_with_the_overlap_term_add_up_to_t_comp(tmp_path: Path) -> None:
    events = [
        kf.step(1, 0, 100, on_gpu=True),
        kf.kernel(GEMM, 10, 30),  # gemm [10, 40)
        kf.kernel(FILL, 30, 30, stream=8),  # elementwise [30, 60) on another stream
        kf.kernel(NCCL, 50, 40, stream=20),  # communication [50, 90)
        kf.memcpy(92, 3),  # memcpy HtoD [92, 95)
    ]
    classes = _classes(kernels_of(tmp_path, {0: events}))
    assert classes["gemm"]["time_us"] == pytest.approx(40 - 10)
    assert classes["gemm"]["exclusive_us"] == pytest.approx(30 - 10)
    assert classes["elementwise"]["exclusive_us"] == pytest.approx(60 - 40)
    assert classes["overlap"]["exclusive_us"] == pytest.approx(40 - 30)
    comp = sum(row["exclusive_us"] for row in classes.values() if row["in_comp"])
    assert comp == pytest.approx(60 - 10)  # T_comp: the union of the compute kernels
    assert classes["communication"]["time_us"] == pytest.approx(90 - 50)
    assert classes["communication"]["in_comp"] is False
    assert classes["memcpy_htod"]["time_us"] == pytest.approx(95 - 92)


def test_class_parts_equal_the_budget_t_comp(tmp_path: Path) -> None:
    events = [kf.step(1, 0, 200, on_gpu=True), kf.step(2, 200, 200, on_gpu=True)]
    events += [kf.kernel(GEMM, 10 + 30 * i, 25, stream=7 + i % 3) for i in range(12)]
    kf.write(kf.document(events), tmp_path / "rank0.json")
    analysis = analyze(load_run(tmp_path))
    assert analysis.kernels is not None
    parts = (
        analysis.kernels.parts.class_steps.filter(pl.col("in_comp"))
        .group_by("step")
        .agg(pl.col("exclusive_us").sum())
    )
    budget = analysis.budget.per_step.select("step", "comp_us")
    joined = parts.join(budget, on="step")
    assert joined.height == 2
    for row in joined.iter_rows(named=True):
        assert row["exclusive_us"] == pytest.approx(row["comp_us"])


def test_top_kernels_count_total_median_p99(tmp_path: Path) -> None:
    durations = [1.0, 2.0, 3.0, 4.0, 100.0]
    events = [kf.kernel(GEMM, 10 + 200 * i, d) for i, d in enumerate(durations)]
    top = kernels_of(tmp_path, {0: events}).parts.top_kernels.row(0, named=True)
    assert top["name"] == GEMM
    assert top["count"] == 5
    assert top["total_us"] == pytest.approx(1 + 2 + 3 + 4 + 100)
    assert top["median_us"] == pytest.approx(3.0)
    assert top["p99_us"] == pytest.approx(4 + (4 * 0.99 - 3) * (100 - 4))  # linear between the 4th and 5th
    assert top["kernel_class"] == "gemm"
    assert top["key"] == "volta_sgemm_#_nn"


def test_each_kernel_belongs_to_its_innermost_operator_once(tmp_path: Path) -> None:
    events = [
        kf.step(1, 0, 300),
        kf.cpu_op("aten::linear", 0, 50),
        kf.cpu_op("aten::addmm", 5, 40),
        kf.launch(10, correlation=1),  # inside addmm, inside linear
        kf.launch(46, correlation=2),  # inside linear only
        kf.cpu_op("aten::add", 0, 50, tid=2),  # another thread: contains neither call
        kf.launch(60, correlation=3),  # inside no operator
        kf.kernel(GEMM, 100, 20, correlation=1),
        kf.kernel(FILL, 130, 5, correlation=2),
        kf.kernel(FILL, 140, 5, correlation=3),
    ]
    kernels = kernels_of(tmp_path, {0: events})
    ops = {row["operator"]: row for row in kernels.parts.operators.iter_rows(named=True)}
    assert set(ops) == {"aten::addmm", "aten::linear"}
    assert ops["aten::addmm"]["kernels"] == 1
    assert ops["aten::addmm"]["kernel_us"] == pytest.approx(20)
    assert ops["aten::linear"]["kernels"] == 1
    assert ops["aten::linear"]["kernel_us"] == pytest.approx(5)
    rank = kernels.parts.ranks.row(0, named=True)
    assert rank["linked_kernels"] == 2
    assert rank["linked_share"] == pytest.approx(2 / 3)
    assert kernels.linked_share == pytest.approx(2 / 3)


def test_a_zero_length_operator_at_a_call_s_start_is_not_its_parent(tmp_path: Path) -> None:
    """A zero-length operator starting where a call starts is open at that start but contains nothing: the
    call's kernel belongs to the operator around both; one ended earlier on the thread is closed."""
    events = [
        kf.step(1, 0, 300),
        kf.cpu_op("aten::linear", 0, 50),
        kf.cpu_op("aten::empty", 5, 0),  # zero length, ended before the first call
        kf.cpu_op("aten::view", 10, 0),  # zero length, at the first call's start
        kf.cpu_op("aten::view", 10, 0),  # and a second one there
        kf.launch(10, correlation=1),
        kf.cpu_op("aten::addmm", 20, 20),
        kf.cpu_op("aten::t", 25, 0),  # zero length, at the second call's start inside addmm
        kf.launch(25, correlation=2),
        kf.kernel(GEMM, 100, 20, correlation=1),
        kf.kernel(FILL, 130, 5, correlation=2),
    ]
    kernels = kernels_of(tmp_path, {0: events})
    ops = {row["operator"]: row for row in kernels.parts.operators.iter_rows(named=True)}
    assert set(ops) == {"aten::linear", "aten::addmm"}
    assert ops["aten::linear"]["kernel_us"] == pytest.approx(20)
    assert ops["aten::addmm"]["kernel_us"] == pytest.approx(5)
    assert kernels.linked_share == pytest.approx(2 / 2)


def test_a_kernel_whose_id_two_calls_claim_belongs_to_the_first_call_s_operator(tmp_path: Path) -> None:
    events = [
        kf.step(1, 0, 300),
        kf.cpu_op("aten::addmm", 0, 50),
        kf.launch(10, correlation=1),
        kf.cpu_op("aten::add", 100, 50),
        kf.launch(110, correlation=1),  # the same id again, later: not the kernel's call
        kf.launch(120, correlation=2),
        kf.kernel(GEMM, 160, 20, correlation=1),
        kf.kernel(FILL, 190, 5, correlation=2),
    ]
    operators = kernels_of(tmp_path, {0: events}).parts.operators
    ops = {row["operator"]: row for row in operators.iter_rows(named=True)}
    assert {name: row["kernels"] for name, row in ops.items()} == {"aten::addmm": 1, "aten::add": 1}
    assert ops["aten::addmm"]["kernel_us"] == pytest.approx(20)
    assert ops["aten::add"]["kernel_us"] == pytest.approx(5)


def test_launch_statistics(tmp_path: Path) -> None:
    events = [
        kf.step(1, 0, 100),
        kf.launch(10, correlation=1, dur=5),  # returns at 15
        kf.launch(20, correlation=2, dur=5),  # returns at 25
        kf.kernel(GEMM, 16, 3, correlation=1),  # 3 us < its 5 us launch; queued 16 - 15
        kf.kernel(GEMM, 40, 10, correlation=2),  # queued 40 - 25
    ]
    row = kernels_of(tmp_path, {0: events}).parts.launches.row(0, named=True)
    assert row["launches"] == 2
    assert row["launch_us"] == pytest.approx(5 + 5)
    assert row["device_us"] == pytest.approx(3 + 10)
    assert row["kernels"] == 2
    assert row["short_kernels"] == 1
    assert row["queue_median_us"] == pytest.approx(((16 - 15) + (40 - 25)) / 2)
    assert row["graph_launches"] == 0
    assert row["capture_step"] is False


def test_a_replayed_graph_belongs_to_its_launch_and_a_capture_step_is_marked(tmp_path: Path) -> None:
    events = [
        kf.step(1, 0, 100),
        kf.launch(5, correlation=1, name="cudaStreamBeginCapture"),
        kf.launch(10, correlation=2),  # captured: no kernel ran
        kf.launch(15, correlation=3),  # captured
        kf.launch(20, correlation=4, name="cudaStreamEndCapture"),
        kf.launch(25, correlation=5, name="cudaGraphInstantiate"),
        kf.step(2, 100, 100),
        kf.cpu_op("CompiledFunction", 110, 30),
        kf.launch(115, correlation=7, name="cudaGraphLaunch", dur=10),
        kf.kernel(GEMM, 130, 10, correlation=7),
        kf.kernel(FILL, 141, 2, correlation=7),
        kf.kernel(FILL, 144, 2, correlation=7),
    ]
    kernels = kernels_of(tmp_path, {0: events})
    launches = {row["step"]: row for row in kernels.parts.launches.iter_rows(named=True)}
    assert launches[2]["graph_launches"] == 1
    assert launches[2]["graph_kernels"] == 3
    assert launches[2]["kernels"] == 0  # replayed kernels are the graph's, not launched one by one
    assert launches[2]["launch_us"] == pytest.approx(10)
    assert launches[2]["queue_median_us"] == pytest.approx(130 - 125)  # the graph's first kernel
    assert launches[2]["capture_step"] is False
    assert launches[1]["capture_step"] is True  # it captured, ran nothing on the device
    assert launches[1]["captured_launches"] == 2
    assert launches[1]["launches"] == 0
    ops = kernels.parts.operators.row(0, named=True)
    assert ops["operator"] == "CompiledFunction"
    assert ops["kernels"] == 3
    assert kernels.parts.ranks.item(0, "graph_kernels") == 3


def test_capture_step_inside_a_step_that_also_runs(tmp_path: Path) -> None:
    events = [
        kf.step(1, 0, 100),
        kf.launch(5, correlation=1, name="cudaStreamBeginCapture"),
        kf.launch(10, correlation=2),  # captured
        kf.launch(20, correlation=4, name="cudaStreamEndCapture"),
        kf.launch(30, correlation=5),
        kf.kernel(GEMM, 40, 10, correlation=5),
    ]
    row = kernels_of(tmp_path, {0: events}).parts.launches.row(0, named=True)
    assert row["capture_calls"] == 2
    assert row["captured_launches"] == 1
    assert row["capture_step"] is True


def test_host_side_of_a_step(tmp_path: Path) -> None:
    events = [
        kf.step(1, 0, 100),
        kf.cpu_op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 20),
        kf.cpu_op("## forward ##", 20, 30, cat="user_annotation"),
        kf.cpu_op("autograd::engine::evaluate_function: MmBackward0", 50, 10, tid=2),
        kf.cpu_op("autograd::engine::evaluate_function: AddBackward0", 55, 15, tid=2),  # overlaps: one union
        kf.cpu_op("aten::item", 72, 2),
        kf.launch(80, correlation=99, dur=15, name="cudaStreamSynchronize"),
        kf.launch(21, correlation=1),
        kf.kernel(GEMM, 30, 40, correlation=1),
    ]
    kernels = kernels_of(tmp_path, {0: events})
    host = {row["phase"]: row for row in kernels.parts.host.iter_rows(named=True)}
    assert host["data_loading"]["time_us"] == pytest.approx(20)
    assert host["forward"]["time_us"] == pytest.approx(30)
    assert host["backward"]["time_us"] == pytest.approx(70 - 50)
    assert host["backward"]["spans"] == 2
    assert host["to_host"]["time_us"] == pytest.approx(2)
    assert host["synchronize"]["time_us"] == pytest.approx(15)
    facts = kernels.facts()
    assert facts["host_data_loading_us"] == pytest.approx(20)
    assert facts["host_synchronize_spans"] == 1


def test_host_phase_reads_the_kind_of_the_row(tmp_path: Path) -> None:
    # one name as an annotation (a phase) and as an operator (none): each (kind, name) classed apart
    events = [
        kf.step(1, 0, 100),
        kf.cpu_op("## forward ##", 10, 30, cat="user_annotation"),
        kf.cpu_op("## forward ##", 60, 25),
        kf.launch(21, correlation=1),
        kf.kernel(GEMM, 30, 40, correlation=1),
    ]
    for _ in range(2):  # the second run reads the phases a process keeps
        host = kernels_of(tmp_path, {0: events}).parts.host
        assert host.get_column("phase").to_list() == ["forward"]
        assert host.item(0, "time_us") == pytest.approx(40 - 10)
        assert host.item(0, "spans") == 1


def _rank_events(gemm_us: float, fills: int) -> list[kf.Event]:
    """Two GPU steps of 400 us: 10 GEMMs of `gemm_us` and `fills` elementwise kernels of 2 us each."""
    events: list[kf.Event] = []
    for step in (1, 2):
        start = (step - 1) * 400.0
        events.append(kf.step(step, start, 400, on_gpu=True))
        at = start + 1
        for _ in range(10):
            events.append(kf.kernel(GEMM, at, gemm_us))
            at += gemm_us + 1
        for _ in range(fills):
            events.append(kf.kernel(FILL, at, 2))
            at += 3
    return events


def test_the_slow_rank_split_into_slower_and_more_work(tmp_path: Path) -> None:
    ranks = {0: _rank_events(10, 5), 1: _rank_events(10, 5), 2: _rank_events(13, 8)}
    kernels = kernels_of(tmp_path, ranks)
    found = kernels.explain(2)
    assert found is not None
    assert found.reference_rank == 0  # the median of ranks 0 and 1 (equal: the lower)
    assert found.excess_us == pytest.approx(10 * (13 - 10) + (8 - 5) * 2)
    by_kernel = {row["key"]: row for row in found.by_kernel.iter_rows(named=True)}
    gemm = by_kernel["volta_sgemm_#_nn"]
    assert gemm["delta_us"] == pytest.approx(10 * (13 - 10))
    assert gemm["slower_us"] == pytest.approx(10 * (13 - 10))
    assert gemm["more_work_us"] == pytest.approx(0)
    assert gemm["duration_ratio"] == pytest.approx(13 / 10)
    assert gemm["cause"] == "same work, slower"
    fill = by_kernel["at::native::vectorized_elementwise_kernel[FillFunctor]"]
    assert fill["more_work_us"] == pytest.approx((8 - 5) * 2)
    assert fill["slower_us"] == pytest.approx(0)
    assert fill["cause"] == "different work"
    assert found.remainder_us == pytest.approx(0, abs=1e-6)
    assert [s.rank for s in kernels.slow_ranks] == [2]  # explained unasked: 36 us is over 5% of 110 us
    assert (
        "Rank 2 computes 36.0 us more per step than rank 0 (the median of the other ranks" in found.sentence
    )
    assert (
        f"; by class: gemm +{10 * (13 - 10)}.0 us, elementwise +{(8 - 5) * 2}.0 us; by kernel: "
        in found.sentence
    )


def test_a_long_kernel_key_keeps_its_start_and_its_end() -> None:
    start, cta, warp = (
        "split_embedding_backward_",
        "_kernel_cta_per_row_#",
        "_kernel_warp_per_row_#",
    )
    filler = "adagrad_unweighted" * 2
    shown = {slow_rank._short(start + filler + end) for end in (cta, warp)}
    assert len(shown) == 2  # two variants stay apart
    for text in shown:
        assert len(text) == slow_rank.NAME_WIDTH
        assert text.startswith(start)
        assert "..." in text
    assert slow_rank._short("volta_sgemm_#_nn") == "volta_sgemm_#_nn"


@pytest.mark.parametrize("ranks", range(6))
def test_every_ranks_reference_is_the_lower_middle_of_the_others(ranks: int) -> None:
    """`references` (all ranks in one query) against the rule applied rank by rank in Python: the others
    sorted by (T_comp, rank), the element at (count - 1) // 2; ties included."""
    for comps in ([5.0, 1.0, 3.0, 3.0, 8.0, 2.0], [2.0] * 6, [1.0, 9.0, 1.0, 9.0, 4.0, 4.0]):
        comp = {7 * r: comps[r] for r in range(ranks)}
        found = references(pl.DataFrame({"rank": list(comp), "comp_us": list(comp.values())}))
        for rank, reference, reference_us in found.select("rank", "reference", "reference_us").iter_rows():
            others = sorted((us, other) for other, us in comp.items() if other != rank)
            expected = others[(len(others) - 1) // 2] if others else (None, None)
            assert (reference_us, reference) == expected
            assert slow_rank.reference_rank(found.select("rank", "comp_us"), rank) == expected[1]
        assert sorted(found.get_column("rank")) == sorted(comp)


def test_the_ranks_computing_five_percent_more_than_their_reference_are_explained_largest_first() -> None:
    comps = {0: 100.0, 1: 100.0, 2: 104.0, 3: 106.0, 4: 100.0, 5: 130.0}  # reference of each: 100 us
    steps = pl.DataFrame(
        {"rank": list(comps), "step": [1] * 6, "in_comp": [True] * 6, "exclusive_us": list(comps.values())}
    )
    assert slow_rank.slow_ranks(steps) == [5, 3]  # 130 >= 100 x 1.05 and 106 >= 105; 104 < 105
    assert slow_rank.slow_ranks(steps, asked=[2]) == [2, 5, 3]
