"""A rank without device activity is analysed on its host timeline (docs/metrics.md, "Host timeline"): its
host collective ops are the communication, its outermost other operators the compute."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from traceview.parsers import kineto

from tests import kineto_factory as kf
from tests.shared_data import REAL_KINETO, requires_shared
from traceview.events.host_timeline import on_host_timeline
from traceview.load.inputs import load_run
from traceview.reduce.analysis import analyze

GLOO_START = {0: 45.0, 1: 55.0}


def _cpu_rank(rank: int) -> dict[str, Any]:
    """One step of a CPU-only data-parallel rank: compute on thread 1, the gloo all-reduce on thread 2."""
    gloo_args = {"Input Dims": [[256]], "Input type": ["float"]}
    start = GLOO_START[rank]
    events = [
        kf.step(1, 0.0, 100.0),
        kf.cpu_op("aten::linear", 10.0, 20.0),
        kf.cpu_op("aten::addmm", 12.0, 16.0),
        kf.cpu_op("autograd::engine::evaluate_function: AccumulateGrad", 32.0, 12.0),
        kf.cpu_op("aten::mul", 33.0, 5.0),
        kf.cpu_op("c10d::allreduce_", 40.0, 2.0),
        kf.cpu_op("gloo:all_reduce", start, 30.0, tid=2, cat="user_annotation", args=gloo_args),
        kf.cpu_op("aten::add_", 80.0, 10.0),
    ]
    doc = kf.document(events, rank=rank, world_size=2, deviceProperties=[], base_ns=1_000_000_000)
    doc["distributedInfo"]["backend"] = "gloo"
    doc["distributedInfo"]["pg_config"] = [
        {"pg_name": "0", "pg_desc": "default_pg", "pg_size": 2, "ranks": [0, 1]}
    ]
    return doc


@pytest.fixture
def cpu_run(tmp_path: Path) -> Path:
    for rank in (0, 1):
        kf.write(_cpu_rank(rank), tmp_path / f"rank{rank}.json")
    return tmp_path


def test_host_ops_become_compute_and_comm_rows(cpu_run: Path) -> None:
    trace = on_host_timeline(kineto.parse(cpu_run / "rank0.json"))
    assert trace.meta.timeline == "host"
    rows = sorted((row["name"], row["start_us"], row["end_us"]) for row in trace.gpu.iter_rows(named=True))
    # aten::addmm sits inside aten::linear; the autograd node holds c10d::allreduce_, so its aten::mul counts
    assert rows == [
        ("aten::add_", 80.0, 90.0),
        ("aten::linear", 10.0, 30.0),
        ("aten::mul", 33.0, 38.0),
        ("gloo:all_reduce", 45.0, 75.0),
    ]


def test_budget_gamma_and_matching_on_the_host_timeline(cpu_run: Path) -> None:
    result = analyze(load_run(cpu_run, workers=1))
    assert result.header.timelines == ("host",)
    row = result.budget.per_step.filter(pl.col("rank") == 0).row(0, named=True)
    comp, comm = (30 - 10) + (38 - 33) + (90 - 80), 75 - 45
    assert (row["comp_us"], row["comm_us"]) == (comp, comm)
    assert row["step_us"] == 90 - 10  # first host activity of the step to its last
    assert row["idle_us"] == (90 - 10) - (comp + comm)
    assert row["gamma"] == pytest.approx(comm / comp)
    kernels = result.collectives.kernels if result.collectives else pl.DataFrame()
    assert kernels.select("rank", "collective", "size_bytes", "on_device").rows() == [
        (0, "AllReduce", 256 * 4, True),
        (1, "AllReduce", 256 * 4, True),
    ]
    assert result.crossrank is not None
    instances = result.crossrank.instances
    assert instances.height == 1
    assert instances.row(0, named=True)["matched"] == 2


def test_a_device_job_without_device_events_stays_without_activity(tmp_path: Path) -> None:
    events = [kf.step(1, 0.0, 100.0), kf.cpu_op("aten::linear", 10.0, 20.0)]
    path = kf.write(kf.document(events, rank=0), tmp_path / "rank0.json")  # backend nccl
    trace = on_host_timeline(kineto.parse(path))
    assert (trace.meta.timeline, trace.gpu.height) == ("device", 0)
    assert analyze(load_run(path)).verdict.label == "no-device-activity"


def _plain_events(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        events: list[dict[str, Any]] = json.load(handle)["traceEvents"]
    return [e for e in events if e.get("ph") == "X"]


@requires_shared
def test_real_gloo_cpu_trace_has_a_budget_with_communication() -> None:
    path = next((REAL_KINETO / "hta_cpu_only").glob("*.json.gz"))
    events = _plain_events(path)
    (step,) = [e for e in events if str(e["name"]).startswith("ProfilerStep#")]
    step_end = step["ts"] + step["dur"]
    launched = [e for e in events if e["name"].startswith("gloo:") and step["ts"] <= e["ts"] <= step_end]
    ends = sorted((e["ts"], e["ts"] + e["dur"]) for e in launched)
    union, reach = 0.0, float("-inf")
    for start, end in ends:  # a plain sweep over the gloo ops launched in the step
        union += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    result = analyze(load_run(path))
    budget = result.budget.per_step.row(0, named=True)
    assert budget["comm_us"] == pytest.approx(union, rel=1e-9)
    assert budget["comp_us"] == 0  # the trace's operators all lie after its one step
    assert budget["step_us"] == pytest.approx(max(e for _, e in ends) - min(s for s, _ in ends), rel=1e-9)
    assert result.verdict.label == "no-compute"  # communication and no compute in the step: gamma undefined
    gloo_ops = [e for e in events if e["name"].startswith("gloo:")]
    kernels = result.collectives.kernels if result.collectives else pl.DataFrame()
    assert kernels.height == len(gloo_ops)
    assert set(kernels["collective"]) == {"AllReduce"}
