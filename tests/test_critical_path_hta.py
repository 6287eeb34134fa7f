"""The critical path of one real trace against HolisticTraceAnalysis' own (its critical-path analysis of the
same trace, overlaid on it: every event on HTA's path carries `critical: 1`), both cut to the tool's step
window. The runtime calls that hold the idle device are the same calls for the same time on both paths; the
device time differs by design: HTA's path leaves a running kernel when the host is the longer chain at that
moment, the tool keeps every moment the device works on the path (docs/metrics.md, "Critical path"), so
HTA's device time on the path is at most the tool's."""

from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest

import traceview
from tests.shared_data import REAL, REAL_KINETO, requires_shared

pytestmark = requires_shared

TRACE = REAL_KINETO / "hta_critical_path_simple_add" / "simple_add_trace.json.gz"
REFERENCE = REAL.parent / "reference" / "hta_critical_path_simple_add.overlaid_by_hta.trace.gz"
DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")


def hta_path(low: float, high: float) -> tuple[Counter[str], float]:
    """HTA's runtime calls on the path (time per name) and its device time on the path, cut to [low, high)."""
    with gzip.open(REFERENCE, "rt") as handle:
        events = json.load(handle)["traceEvents"]
    runtime: Counter[str] = Counter()
    device = 0.0
    for event in events:
        if event.get("ph") != "X" or (event.get("args") or {}).get("critical") != 1:
            continue
        held = max(0.0, min(event["ts"] + event["dur"], high) - max(event["ts"], low))
        if event.get("cat") == "cuda_runtime":
            runtime[event["name"]] += held
        elif event.get("cat") in DEVICE:
            device += held
    return runtime, device


def test_the_calls_that_hold_the_idle_match_hta() -> None:
    analysis = traceview.analyze(TRACE).raw
    path = analysis.critical_path
    assert path is not None
    shift = analysis.header.base_shifts_us[0]
    window = analysis.budget.per_step.row(0, named=True)
    runtime, device = hta_path(window["window_start_us"] - shift, window["window_end_us"] - shift)
    holders = {row["name"]: row["us_per_step"] for row in path.holders.iter_rows(named=True)}
    assert holders["cudaFree"] == pytest.approx(runtime["cudaFree"], abs=1.0)
    assert holders["cudaStreamCreateWithFlags"] == pytest.approx(
        runtime["cudaStreamCreateWithFlags"], abs=1.0
    )
    # the tool leaves out the moments a call overlaps running device work (there the device holds the path)
    assert holders["cudaLaunchKernel"] == pytest.approx(runtime["cudaLaunchKernel"], rel=0.001)
    assert holders["cudaMalloc"] == pytest.approx(runtime["cudaMalloc"], rel=0.005)
    tool_device = sum(
        path.per_step.row(0, named=True)[f"{c}_us"] for c in path.categories if c.startswith("compute_")
    )
    assert 0 < device <= tool_device
