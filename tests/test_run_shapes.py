"""Run shapes said plainly and kernel families matched whole (docs/metrics.md sections 2, 3 and 5): graph
capture and replay steps, world size 1, no step annotations, DeepEP's families; factory traces, expected
values as arithmetic, and the real H200 world-size-1 recordings."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tests import kineto_factory as kf
from tests.shared_data import REAL_KINETO, requires_shared
from traceview.load.inputs import load_run
from traceview.reduce.analysis import RunAnalysis, analyze
from traceview.steps.graphs import graph_step_plan


def _analysed(tmp_path: Path, events: list[kf.Event], world_size: int = 2) -> RunAnalysis:
    kf.write(kf.document(events, rank=0, world_size=world_size), tmp_path / "rank0.json")
    return analyze(load_run(str(tmp_path)))


def _capture_step(number: int, start: float, launches: int = 30, ran: int = 2) -> list[kf.Event]:
    """A CPU step that captures a CUDA graph: `launches` kernel launches recorded, `ran` of them ran."""
    length = max(1000.0, 10.0 * launches + 200.0)
    events = [
        kf.step(number, start, length),
        kf.launch(start + 1, 9000 + number, name="cudaStreamBeginCapture"),
    ]
    for i in range(launches):
        correlation = 100 * number + i
        events.append(kf.launch(start + 10 + 10 * i, correlation))
        if i < ran:
            events.append(kf.kernel("gemm", start + 12 + 10 * i, 4, correlation=correlation))
    events.append(kf.launch(start + length - 100, 9100 + number, name="cudaStreamEndCapture"))
    return events


def _replay_step(number: int, start: float) -> list[kf.Event]:
    """A CPU step that replays the graph: one `cudaGraphLaunch`, its 5 kernels under its correlation id."""
    correlation = 7000 + number
    kernels = [kf.kernel("gemm", start + 100 + 50 * i, 40, correlation=correlation) for i in range(5)]
    return [
        kf.step(number, start, 1000),
        kf.launch(start + 50, correlation, name="cudaGraphLaunch"),
        *kernels,
    ]


def test_a_capture_step_is_said_and_left_out_of_the_medians(tmp_path: Path) -> None:
    events = [*_capture_step(1, 0.0), *_replay_step(2, 2000.0), *_replay_step(3, 4000.0)]
    analysis = _analysed(tmp_path, events)
    rows = {r["step"]: r for r in analysis.budget.per_step.iter_rows(named=True)}
    assert (rows[1]["graph_capture"], rows[1]["launches"], rows[1]["launches_ran"]) == (True, 30, 2)
    assert not rows[2]["graph_capture"]
    assert rows[2]["comp_us"] == pytest.approx(5 * 40)  # the replay counts
    assert analysis.budget.run_median["comp_us"] == pytest.approx(5 * 40)  # the capture's 2 x 4 us left out
    assert analysis.budget.per_rank.row(0, named=True)["steps"] == 2
    said = " ".join(analysis.verdict.run_shape)
    assert (
        "1 of the 3 (rank, step) windows capture a CUDA/HIP graph (30 kernel launches recorded, 2 of them "
        "ran)" in said
    )
    assert "left out of every median" in said
    assert analysis.verdict.label != "graph-capture"


def test_a_trace_of_a_capture_alone_says_so(tmp_path: Path) -> None:
    analysis = _analysed(tmp_path, _capture_step(1, 0.0, launches=546, ran=2))
    assert analysis.verdict.label == "graph-capture"
    assert "546 kernel launches were recorded and 2 of them ran" in analysis.verdict.sentence


def test_launches_that_never_ran_make_a_capture_step_without_a_capture_call(tmp_path: Path) -> None:
    events = [e for e in _capture_step(1, 0.0, launches=40, ran=1) if "Capture" not in e["name"]]
    analysis = _analysed(tmp_path, [*events, *_replay_step(2, 2000.0)])
    flags = dict(analysis.budget.per_step.select("step", "graph_capture").rows())
    assert flags == {1: True, 2: False}  # 1 of 40 ran: at most 10% of at least 20 launches


def test_a_step_none_of_whose_launches_ran_counts_none_and_is_a_capture_step(tmp_path: Path) -> None:
    events = [e for e in _capture_step(1, 0.0, launches=25, ran=0) if "Capture" not in e["name"]]
    kf.write(kf.document([*events, *_replay_step(2, 2000.0)], rank=0, world_size=2), tmp_path / "rank0.json")
    trace = load_run(str(tmp_path)).ranks[0]
    rank = pl.lit(0, pl.Int64).alias("rank")
    device = trace.gpu.lazy().with_columns(rank)
    plan = graph_step_plan(trace.cpu.with_columns(rank), trace.steps.with_columns(rank), device, [0])
    rows = {r["step"]: r for r in plan.collect().iter_rows(named=True)}
    assert (rows[1]["graph_capture"], rows[1]["launches"], rows[1]["launches_ran"]) == (True, 25, 0)
    assert (rows[2]["graph_capture"], rows[2]["launches"], rows[2]["launches_ran"]) == (False, 0, 0)


def test_without_step_annotations_the_window_and_the_recorded_span_are_said(tmp_path: Path) -> None:
    events = [
        kf.cpu_op("aten::mm", 0, 10),
        kf.launch(5, 1),
        kf.kernel("gemm", 100, 50, correlation=1),
        kf.launch(200, 2),
        kf.kernel("gemm", 300, 50, correlation=2),
        kf.cpu_op("aten::add", 900, 100),
    ]
    analysis = _analysed(tmp_path, events)
    said = " ".join(analysis.verdict.run_shape)
    window, span = 350 - 100, 1000 - 0
    assert "No ProfilerStep annotations: each rank's trace is one window" in said
    assert f"(median {window:.1f} us of the {span / 1000:.2f} ms the profiler recorded)" in said


DEEPEP = (
    "void dpsk::ep::internode::notify_dispatch<false, 4>(int const*, long*, int)",
    "void dpsk::ep::internode::dispatch<false, 8, true, 8>(int4*, float*)",
    "void dpsk::ep::internode::cached_notify<false>(int, int, int)",
    "void dpsk::ep::internode::combine<__nv_bfloat16, 8>(int4*, float*)",
)


def test_deepseeks_deepep_family_is_communication_whole(tmp_path: Path) -> None:
    """DeepEP's internode kernels on stream 16 (DeepSeek's profile-data layout), the layout kernel and a gemm
    on the compute stream: every one of the four is communication, the layout kernel is compute."""
    events = [kf.step(1, 0, 1000)]
    for i, name in enumerate(DEEPEP):
        events += [kf.launch(10 + i, i + 1), kf.kernel(name, 100 + 100 * i, 50, correlation=i + 1, stream=16)]
    events += [kf.launch(20, 10), kf.kernel("void dpsk::ep::cuda::get_dispatch_layout<1>(long)", 40, 20, 10)]
    analysis = _analysed(tmp_path, events, world_size=8)
    row = analysis.budget.per_step.row(0, named=True)
    assert row["comm_us"] == pytest.approx(4 * 50)  # cached_notify counted with dispatch/combine/notify
    assert row["comp_us"] == pytest.approx(20)
    assert analysis.collectives is not None
    kernels = analysis.collectives.kernels
    assert sorted(set(kernels.get_column("collective").to_list())) == ["AllToAll"]
    assert kernels.height == 4


@requires_shared
@pytest.mark.parametrize(("folder", "calls"), [("h200_pt211_nccl_ddp1", 56), ("h200_pt211_nccl_fsdp1", 0)])
def test_world_size_one_is_said(folder: str, calls: int) -> None:
    analysis = analyze(load_run(REAL_KINETO / folder))
    assert (
        analysis.verdict.prediction
        == "No predicted gamma: a run of one rank has no communication to predict."
    )
    said = " ".join(analysis.verdict.run_shape)
    if calls:  # counted by hand in the raw JSON: one nccl:all_reduce per DDP bucket, 14 a step, 4 steps
        assert f"World size 1: its {calls} collective call(s) ({calls} nccl:all_reduce) move nothing" in said
    else:
        assert "World size 1: no collective runs." in said
    assert "no communication kernel falls inside a step window" not in analysis.verdict.prediction
