"""Every parser and the analyses on real files the suite keeps of its own (`tests/fixtures/`, provenance in
its README): these run on a fresh clone, where `../shared` is absent. Expected values are read from the
files by a plain-Python pass (gzip + json, grep-like line counts), never from the program's output."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from traceview.parsers import kineto, nccl_log

from traceview.core.errors import NotKinetoError

FIXTURES = Path(__file__).resolve().parent / "fixtures"
KINETO = sorted((FIXTURES / "kineto").iterdir())
NOT_KINETO = {
    "horovod_timeline_cut.json": "Horovod",
    "tensorflow_trace_cut.json": "TensorFlow",
    "pytorch_execution_trace.json.gz": "Execution Trace",
    "memory_timeline_cut.raw.gz": "memory timeline",
}
LOGS = FIXTURES / "nccl_logs"


def traceview(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "traceview", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def _document(path: Path) -> Any:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)


def test_the_fixtures_are_small_and_all_there() -> None:
    # the inputs the suite reads as files; the kernel-name lists of tests/fixtures/kernel_families/ are data
    # of their own, bounded in tests/test_kernel_families.py
    files = [p for p in FIXTURES.rglob("*") if p.is_file() and "kernel_families" not in p.parts]
    assert len(KINETO) == 4
    assert {p.name for p in (FIXTURES / "not_kineto").iterdir()} == set(NOT_KINETO)
    assert sum(p.stat().st_size for p in files) < 64 * 1024


@pytest.mark.parametrize(("name", "says"), sorted(NOT_KINETO.items()))
def test_other_formats_are_refused_in_one_line_naming_them(name: str, says: str) -> None:
    path = FIXTURES / "not_kineto" / name
    with pytest.raises(NotKinetoError) as caught:
        kineto.parse(path)
    assert str(caught.value).startswith(str(path))
    assert says in str(caught.value)
    done = traceview("summary", str(path))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert str(path) in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("path", KINETO, ids=lambda p: p.name)
def test_kernels_and_rank_as_the_file_says(path: Path) -> None:
    document = _document(path)
    events = document["traceEvents"] if isinstance(document, dict) else document
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "Kernel")]
    trace = kineto.parse(path).validate()
    assert trace.gpu.filter(trace.gpu["kind"] == "kernel").height == len(kernels)
    rank = (document.get("distributedInfo") or {}).get("rank") if isinstance(document, dict) else None
    if rank is not None:
        assert trace.rank == rank


@pytest.mark.parametrize("path", KINETO, ids=lambda p: p.name)
def test_every_analysis_runs_and_the_budget_adds_up(path: Path) -> None:
    done = traceview("summary", str(path), "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    for row in document["time_budget"]["per_step"]:  # docs/metrics.md section 4, recomputed from the JSON
        assert row["exposed_comm_us"] == pytest.approx(row["comm_us"] - row["overlap_us"], abs=1e-6)
        assert row["idle_us"] == pytest.approx(row["step_us"] - row["busy_us"], abs=1e-6)
        assert row["step_us"] == pytest.approx(row["window_end_us"] - row["window_start_us"], abs=1e-6)
    for command in ("collectives", "stragglers"):
        assert traceview(command, str(path), "--json").returncode == 0


def test_nccl_logs_as_read_by_eye() -> None:
    tests_133 = nccl_log.parse(LOGS / "NVIDIA_nccl-tests_133.log")
    assert tests_133.version == "2.10.3+cuda11.0"  # "NCCL version 2.10.3+cuda11.0" in the text
    ray = nccl_log.parse(LOGS / "NVIDIA_nccl_1193.log")
    assert ray.collectives.height == 6  # six "AllReduce: opCount" lines
    assert ray.collectives["opcount"].to_list() == [0x139D, 0x139D, 0x139E, 0x139E, 0x13A0, 0x13A1]
    done = traceview("nccl", str(LOGS / "NVIDIA_nccl_629.log"), "--json")
    assert done.returncode == 0, done.stderr
    hosts = json.loads(done.stdout)["hosts_by_rank"]
    left, right = "A03-R28-I49-2-6000166", "A03-R28-I49-3-9000018"
    expected = {2: left, 5: left, 4: left, 15: right, 14: right, 12: right, 8: right, 9: right}
    assert {int(rank): host for rank, host in _pairs(hosts)} == expected


def _pairs(hosts: Any) -> list[tuple[Any, Any]]:
    if isinstance(hosts, dict):
        return list(hosts.items())
    return [(row["rank"], row["host"]) if isinstance(row, dict) else tuple(row) for row in hosts]
