"""The critical path on factory traces built from the runtime names (docs/metrics.md, "Critical path"): a step
tiled by hand, and the issue's three idle stories (allocator churn, one blocking copy, first-call module
loading with allocator calls) told by the advice with the holder and its time, the `.item()` read beside
them left out (under 3% of the step).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import traceview
from tests.kineto_factory import cpu_op, document, kernel, launch, memcpy, step, write
from traceview.critical_path.categories import CATEGORY_COLUMNS
from traceview.reduce.analysis import RunAnalysis

GEMM, ELEMENTWISE = "ampere_sgemm_128x64_nn", "vectorized_elementwise_kernel"


def runtime(name: str, ts: float, dur: float, tid: int = 1) -> dict[str, Any]:
    """A runtime call that launches nothing (an allocator call, a synchronize)."""
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": name,
        "pid": 1,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": {},
    }


def analysed(tmp_path: Path, events: list[dict[str, Any]]) -> RunAnalysis:
    return traceview.analyze(write(document(events), tmp_path / "rank0.json")).raw


def path_row(analysis: RunAnalysis) -> dict[str, float]:
    path = analysis.critical_path
    assert path is not None
    assert path.per_step.height == 1
    return path.per_step.row(0, named=True)


def test_a_step_tiled_by_hand(tmp_path: Path) -> None:
    events = [
        step(1, 0, 100, on_gpu=True),
        step(1, 0, 100),
        cpu_op("aten::mm", 5, 20),
        launch(10, 1),
        kernel(GEMM, 20, 30, correlation=1),
        runtime("cudaFree", 55, 20),
        launch(76, 2),
        kernel(ELEMENTWISE, 80, 10, correlation=2),
    ]
    analysis = analysed(tmp_path, events)
    row = path_row(analysis)
    assert row["step_us"] == 100
    assert row["compute_gemm_us"] == 50 - 20
    assert row["compute_elementwise_us"] == 90 - 80
    assert row["launch_us"] == (12 - 10) + (78 - 76)
    assert row["host_other_us"] == (10 - 5) + (20 - 12)  # aten::mm around its launch, before the kernel
    assert row["blocking_alloc_us"] == 75 - 55
    assert row["host_python_us"] == (5 - 0) + (55 - 50) + (76 - 75) + (80 - 78) + (100 - 90)
    assert row["other_us"] == 0
    assert sum(row[c] for c in CATEGORY_COLUMNS) == 100
    assert analysis.bubbles is not None
    idle = analysis.bubbles.idle_by_path.row(0, named=True)  # bubbles' causes of idle are the path's
    assert idle["blocking_alloc_us"] == 75 - 55
    assert sum(value for key, value in idle.items() if key != "rank") == 100 - (50 - 20) - (90 - 80)


def item_read(ts: float) -> list[dict[str, Any]]:
    """A `.item()`: the operator, its copy call and the 8-byte device-to-host copy (1 us of each)."""
    return [
        cpu_op("aten::item", ts, 3),
        launch(ts + 1, 900, dur=1, name="cudaMemcpyAsync"),
        memcpy(ts + 1.5, 1, 900),
    ]


def test_allocator_churn_is_named_not_the_item_read(tmp_path: Path) -> None:
    """Ten hipFree calls of 90 us between kernels hold 900 of the step's idle; a `.item()` read holds 3 us."""
    events: list[dict[str, Any]] = [step(1, 0, 1200, on_gpu=True), step(1, 0, 1200)]
    for index in range(10):
        start = 100 * index
        events += [
            runtime("hipFree", start, 90),
            launch(start + 90, index + 1, dur=2, name="hipLaunchKernel"),
            kernel(ELEMENTWISE, start + 92, 8, correlation=index + 1),
        ]
    events += item_read(1100)
    analysis = analysed(tmp_path, events)
    row = path_row(analysis)
    assert row["blocking_alloc_us"] == 10 * 90
    advice = analysis.recommendations
    assert advice is not None
    assert advice.top is not None
    assert advice.top.rule == "idle-gpu"
    assert "10 `hipFree` call(s) hold 900.0 us" in advice.top.sentence
    assert "caching allocator" in advice.top.sentence
    assert "item" not in advice.top.sentence  # 3 us of a 1,200 us step: under 3%
    assert advice.top.saved_us == 1200 - 10 * 8 - 1  # the idle: the step less the kernels and the copy


def test_the_document_carries_the_path(tmp_path: Path) -> None:
    """The JSON summary's `critical_path` and each recommendation's `saved_us`."""
    events = [step(1, 0, 100, on_gpu=True), step(1, 0, 100), runtime("cudaFree", 0, 60), launch(60, 1)]
    events.append(kernel(GEMM, 62, 38, correlation=1))
    summary = traceview.analyze(write(document(events), tmp_path / "rank0.json")).summary()
    path = summary["critical_path"]
    assert path["run_median"]["blocking_alloc_us"] == 60
    assert path["holders"][0]["name"] == "cudaFree"
    assert path["holders"][0]["share"] == 60 / 100
    assert summary["recommendations"]["items"][0]["saved_us"] == 62  # the idle: 100 - 38


def test_one_blocking_copy_holds_the_idle(tmp_path: Path) -> None:
    """A 60-byte host-to-device copy whose call blocks 493 ms of a 500 ms step."""
    events = [
        step(1, 0, 500_000, on_gpu=True),
        step(1, 0, 500_000),
        launch(0, 1),
        kernel(GEMM, 2, 3_000, correlation=1),
        launch(3_000, 2, dur=493_000, name="cudaMemcpyAsync"),
        memcpy(495_990, 2, correlation=2),
        launch(496_000, 3),
        kernel(GEMM, 496_002, 3_998, correlation=3),
    ]
    analysis = analysed(tmp_path, events)
    row = path_row(analysis)
    assert row["blocking_copy_us"] == (495_990 - 3_002) + (
        496_000 - 495_992
    )  # the call, less the device's work
    advice = analysis.recommendations
    assert advice is not None
    assert advice.top is not None
    assert "1 `cudaMemcpyAsync` call(s) hold 493.00 ms" in advice.top.sentence
    assert "non_blocking" in advice.top.sentence


def test_module_loading_and_allocator_calls(tmp_path: Path) -> None:
    """A first-call launch of 40 ms (module loading), a cudaFree of 30 ms and a cudaMalloc of 20 ms."""
    events = [
        step(1, 0, 100_000, on_gpu=True),
        step(1, 0, 100_000),
        runtime("cudaMalloc", 0, 20_000),
        runtime("cudaFree", 20_000, 30_000),
        launch(50_000, 1, dur=40_000),
        kernel(GEMM, 90_000, 10_000, correlation=1),
    ]
    analysis = analysed(tmp_path, events)
    row = path_row(analysis)
    assert row["blocking_module_load_us"] == 40_000
    assert row["blocking_alloc_us"] == 20_000 + 30_000
    advice = analysis.recommendations
    assert advice is not None
    assert advice.top is not None
    sentence = advice.top.sentence
    assert "1 `cudaLaunchKernel` call(s) hold 40.00 ms" in sentence
    assert "modules are loaded" in sentence
    assert "1 `cudaFree` call(s) hold 30.00 ms" in sentence
    assert "1 `cudaMalloc` call(s) hold 20.00 ms" in sentence
    assert "records no data loading" not in sentence
