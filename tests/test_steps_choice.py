"""GPU or CPU step annotations, chosen per rank by evidence (docs/metrics.md section 3).

Factory traces state the expected windows and shares as arithmetic. On every real trace, a plain-Python pass
over the JSON (its own interval union, its own launch matching) checks that the chosen windows hold the device
activity of the steps.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests import kineto_factory as kf
from tests.shared_data import REAL_KINETO, real_dirs, requires_shared
from traceview.budget.time_budget import all_step_windows, classified_events, time_budget
from traceview.load.inputs import load_run, resolve_trace_files
from traceview.reduce.analysis import analyze
from traceview.steps.windows import WHOLE_TRACE, choose_steps, chosen_windows, step_windows


def _run(tmp_path: Path, events: list[kf.Event]) -> Any:
    kf.write(kf.document(events), tmp_path / "rank0.json")
    return load_run(tmp_path / "rank0.json")


def _rocm_like() -> list[kf.Event]:
    """CPU steps 1 [0, 1000) and 2 [1000, 2000) launching 100 us kernels; their GPU annotations cover only
    [100, 105) and [1100, 1105) (ROCm writes GPU step annotations of a few microseconds). As many GPU as CPU
    steps: a rule counting annotations would take the GPU ones."""
    return [
        kf.step(1, 0, 1000),
        kf.step(2, 1000, 1000),
        kf.step(1, 100, 5, on_gpu=True),
        kf.step(2, 1100, 5, on_gpu=True),
        kf.launch(10, 1),
        kf.kernel("gemm", 100, 100, 1),  # [100, 200)
        kf.launch(20, 2),
        kf.kernel("gemm", 300, 100, 2),  # [300, 400)
        kf.launch(1010, 3),
        kf.kernel("gemm", 1100, 100, 3),  # [1100, 1200)
    ]


def test_gpu_annotations_covering_a_sliver_give_way_to_the_cpu_steps(tmp_path: Path) -> None:
    run = _run(tmp_path, _rocm_like())
    trace = run.ranks[0]
    assert trace.step_source == "gpu"  # the candidates present, GPU first
    choice = choose_steps(trace)
    assert choice.source == "cpu"
    assert choice.gpu_covered_us == pytest.approx((105 - 100) + (1105 - 1100))
    assert choice.reference_us == pytest.approx(3 * 100)
    assert choice.warning == (
        "rank 0: GPU ProfilerStep annotations cover 3.33% of the device activity launched in the CPU steps "
        "(10 us of 300 us); using the CPU ProfilerStep windows"
    )
    # CPU windows: step 1 from its first activity (100) to its last (400); step 2 from 400 to 1200
    assert step_windows(trace, choice).rows() == [(0, 1, 100.0, 400.0), (0, 2, 400.0, 1200.0)]


def test_the_choice_and_its_reason_reach_the_run_header(tmp_path: Path) -> None:
    analysis = analyze(_run(tmp_path, _rocm_like()))
    assert analysis.header.step_sources == ("cpu",)
    assert any("GPU ProfilerStep annotations cover 3.33%" in w for w in analysis.header.warnings)
    assert analysis.budget.per_step["comp_us"].to_list() == [pytest.approx(200), pytest.approx(100)]


def test_gpu_annotations_holding_the_steps_device_work_are_used(tmp_path: Path) -> None:
    events = [
        kf.step(1, 0, 1000),
        kf.step(2, 1000, 1000),
        kf.step(1, 100, 300, on_gpu=True),
        kf.step(2, 1100, 100, on_gpu=True),
        kf.launch(10, 1),
        kf.kernel("gemm", 100, 100, 1),
        kf.launch(20, 2),
        kf.kernel("gemm", 300, 100, 2),
        kf.launch(1010, 3),
        kf.kernel("gemm", 1100, 100, 3),
    ]
    trace = _run(tmp_path, events).ranks[0]
    choice = choose_steps(trace)
    assert (choice.source, choice.warning) == ("gpu", None)
    assert choice.gpu_covered_us == pytest.approx(300) == choice.reference_us
    assert step_windows(trace, choice).rows() == [(0, 1, 100.0, 400.0), (0, 2, 1100.0, 1200.0)]


def test_gpu_annotations_that_miss_part_of_a_step_are_rejected(tmp_path: Path) -> None:
    events = [*_rocm_like()[:2], kf.step(1, 100, 200, on_gpu=True), *_rocm_like()[4:]]
    choice = choose_steps(_run(tmp_path, events).ranks[0])
    # [100, 300) holds [100, 200) of 300 us: 1/3 < 0.9
    assert choice.source == "cpu"
    assert choice.gpu_covered_us == pytest.approx(100)


def test_without_cpu_steps_a_sliver_of_gpu_annotation_gives_the_whole_trace(tmp_path: Path) -> None:
    events = [kf.step(1, 100, 5, on_gpu=True), kf.kernel("gemm", 100, 100), kf.kernel("gemm", 300, 100)]
    trace = _run(tmp_path, events).ranks[0]
    choice = choose_steps(trace)
    assert choice.source == "none"
    assert choice.warning == (
        "rank 0: GPU ProfilerStep annotations cover 2.50% of the trace's device activity (5 us of 200 us); "
        "analysing the whole trace as one step"
    )
    assert step_windows(trace, choice).rows() == [(0, WHOLE_TRACE, 100.0, 400.0)]


def test_an_inference_trace_without_steps_is_one_window_over_all_device_activity(tmp_path: Path) -> None:
    events = [
        kf.launch(1, 1),
        kf.kernel("gemm", 50, 20, 1),  # [50, 70)
        # [60, 90)
        kf.launch(2, 2),
        kf.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 60, 30, 2, stream=20),
        kf.launch(3, 3),
        kf.kernel("softmax", 200, 10, 3),  # [200, 210)
    ]
    run = _run(tmp_path, events)
    assert choose_steps(run.ranks[0]).source == "none"
    row = time_budget(classified_events(run), all_step_windows(run)).per_step.row(0, named=True)
    assert (row["step"], row["window_start_us"], row["window_end_us"]) == (WHOLE_TRACE, 50.0, 210.0)
    assert row["comp_us"] == pytest.approx((70 - 50) + (210 - 200))
    assert row["comm_us"] == pytest.approx(90 - 60)
    assert row["overlap_us"] == pytest.approx(70 - 60)
    assert row["idle_us"] == pytest.approx((210 - 50) - ((90 - 50) + (210 - 200)))


# ---- real traces: an independent plain-Python check of what the chosen windows hold ----------------------

DEVICE_CATEGORIES = {"kernel", "Kernel", "mtia_ccp_events", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}
LAUNCH_CATEGORIES = {"cuda_runtime", "Runtime", "cuda_driver", "mtia_runtime"}


def _json_events(path: Path) -> list[dict[str, Any]]:
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if path.name.endswith(".gz") else raw)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    return [e for e in events if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))]


def _union(intervals: list[tuple[float, float]]) -> float:
    total, reach_start, reach_end = 0.0, None, None
    for start, end in sorted(intervals):
        if reach_end is None or start > reach_end:
            total += 0.0 if reach_end is None or reach_start is None else reach_end - reach_start
            reach_start, reach_end = start, end
        else:
            reach_end = max(reach_end, end)
    return total + (reach_end - reach_start if reach_end is not None and reach_start is not None else 0.0)


def _inside(intervals: list[tuple[float, float]], windows: list[tuple[float, float]]) -> float:
    clipped = [
        (max(s, ws), min(e, we)) for s, e in intervals for ws, we in windows if min(e, we) > max(s, ws)
    ]
    return _union(clipped)


def _plain_facts(path: Path) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """(every device interval, the device intervals launched inside a CPU ProfilerStep#N)."""
    events = _json_events(path)
    device = [e for e in events if e.get("cat") in DEVICE_CATEGORIES]
    intervals = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in device]
    steps = [
        (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
        for e in events
        if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation"
    ]
    launched_at = {
        (e.get("args") or {}).get("correlation"): float(e["ts"])
        for e in events
        if e.get("cat") in LAUNCH_CATEGORIES
    }
    in_steps = []
    for event, interval in zip(device, intervals, strict=True):
        at = launched_at.get((event.get("args") or {}).get("correlation"), interval[0])
        if any(start <= at <= end for start, end in steps):
            in_steps.append(interval)
    return intervals, in_steps


@requires_shared
@pytest.mark.parametrize("folder", real_dirs(REAL_KINETO), ids=lambda p: p.name)
def test_chosen_windows_hold_the_device_activity_of_the_steps(folder: Path) -> None:
    for path in resolve_trace_files(folder):
        trace = load_run(path).ranks[0]
        if trace.meta.timeline == "host":
            continue  # no device activity: its host timeline is checked in test_host_timeline.py
        choice = choose_steps(trace)
        windows = [(s, e) for _, _, s, e in step_windows(trace, choice).rows()]
        everything, in_steps = _plain_facts(path)
        if not everything:
            assert windows == []
            continue
        if choice.source == "none":
            assert _inside(everything, windows) == pytest.approx(_union(everything))
        else:
            assert choice.source == "cpu"  # no real trace has faithful GPU step annotations
            assert _inside(in_steps, windows) == pytest.approx(_union(in_steps), rel=1e-9)
            assert _inside(everything, windows) >= 0.95 * _union(everything)


@requires_shared
def test_the_rocm_trace_uses_its_cpu_steps_and_says_why() -> None:
    folder = REAL_KINETO / "hta_amd_mi250"
    path = resolve_trace_files(folder)[0]
    choice = choose_steps(load_run(path).ranks[0])
    events = _json_events(path)
    gpu_steps = [
        (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        for e in events
        if e.get("cat") == "gpu_user_annotation" and str(e.get("name")).startswith("ProfilerStep#")
    ]
    everything, in_steps = _plain_facts(path)
    covered, reference = _inside(everything, gpu_steps), _union(in_steps)
    assert covered < 0.9 * reference
    assert choice.source == "cpu"
    assert choice.gpu_covered_us == pytest.approx(covered)
    assert choice.reference_us == pytest.approx(reference)
    assert choice.warning is not None
    assert f"{covered / reference:.2%}" in choice.warning


def test_one_gpu_annotation_counts_the_union_of_the_device_work_it_holds(tmp_path: Path) -> None:
    events = [
        kf.step(1, 0, 1000),
        kf.step(1, 150, 200, on_gpu=True),  # [150, 350)
        kf.launch(10, 1),
        kf.kernel("gemm", 100, 100, 1),  # [100, 200)
        kf.launch(20, 2),
        kf.kernel("gemm", 120, 60, 2, stream=8),  # [120, 180): inside [100, 200), counted once
        kf.launch(30, 3),
        kf.kernel("gemm", 300, 100, 3),  # [300, 400)
    ]
    trace = _run(tmp_path, events).ranks[0]
    choice, windows, also = chosen_windows(trace, also=[trace.steps.lazy().select(pl.len())])
    assert choice == choose_steps(trace)
    assert choice.gpu_covered_us == pytest.approx((200 - 150) + (350 - 300))  # 100 of 200: rejected
    assert (choice.reference_us, choice.source) == (pytest.approx((200 - 100) + (400 - 300)), "cpu")
    assert windows.rows() == step_windows(trace, choice).rows() == [(0, 1, 100.0, 400.0)]
    assert also[0].item() == 2
