"""`traceview export`: one Chrome/Perfetto trace of the run on the aligned clock, read back as data."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
PLANTED_OFFSET_US = 25_000.0  # host 1 (ranks 4-7) records 25 ms ahead (sample_traces/README.md)


def traceview(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "traceview", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    out = tmp_path_factory.mktemp("export") / "run.perfetto.json.gz"
    done = traceview("export", str(SAMPLES / "dp8_straggler"), "-o", str(out), "--steps", "1-3")
    assert done.returncode == 0, done.stderr
    document: dict[str, object] = json.loads(gzip.decompress(out.read_bytes()))
    return document


def _events(document: dict[str, object]) -> list[dict[str, object]]:
    return document["traceEvents"]  # type: ignore[return-value]


def test_valid_chrome_trace(exported: dict[str, object]) -> None:
    events = _events(exported)
    slices = [e for e in events if e["ph"] == "X"]
    assert slices
    for event in slices:
        assert {"name", "ts", "dur", "pid", "tid"} <= event.keys()
        assert isinstance(event["ts"], float | int)
        assert event["dur"] >= 0  # type: ignore[operator]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}  # type: ignore[index]
    assert sorted(names) == list(range(8))
    assert "straggler" in str(names[5])


def _original_kernels(rank: int) -> dict[tuple[str, int], float]:
    """(name, correlation) -> ts of every kernel of one rank's own trace file, by a plain JSON pass."""
    path = SAMPLES / "dp8_straggler" / f"rank-{rank}.pt.trace.json.gz"
    document = json.loads(gzip.decompress(path.read_bytes()))
    kernels = [e for e in document["traceEvents"] if e.get("cat") == "kernel"]
    return {(e["name"], e["args"]["correlation"]): e["ts"] for e in kernels}


def test_each_rank_is_shifted_by_its_hosts_offset(exported: dict[str, object]) -> None:
    exported_kernels = defaultdict(dict)
    for event in _events(exported):
        if event["ph"] == "X" and event.get("cat") == "kernel":
            exported_kernels[event["pid"]][(event["name"], event["args"]["correlation"])] = event["ts"]  # type: ignore[index]
    for rank in (0, 5):
        original = _original_kernels(rank)
        shifts = {ts - original[key] for key, ts in exported_kernels[rank].items() if key in original}  # type: ignore[attr-defined]
        expected = 0.0 if rank < 4 else -PLANTED_OFFSET_US
        assert shifts
        assert all(abs(s - expected) < 1e-3 for s in shifts), (rank, sorted(shifts)[:3])


def test_flows_join_the_members_of_one_instance(exported: dict[str, object]) -> None:
    by_id = defaultdict(list)
    for event in _events(exported):
        if event["ph"] in ("s", "f"):
            by_id[event["id"]].append(event)
    assert by_id
    for pair in by_id.values():
        start, end = sorted(pair, key=lambda e: e["ph"] != "s")
        assert start["ph"] == "s"
        assert (end["ph"], end.get("bp")) == ("f", "e")
        assert start["name"] == end["name"]  # the same instance
        assert start["pid"] != end["pid"]
        assert start["ts"] <= end["ts"]  # from the first rank to arrive
    # every flow ends on an exported collective kernel of its rank, on the aligned clock
    kernels = {
        (e["pid"], round(e["ts"], 3))
        for e in _events(exported)
        if e["ph"] == "X" and "AllReduce" in str(e["name"])
    }
    assert all((p["pid"], round(p["ts"], 3)) in kernels for pair in by_id.values() for p in pair)


def test_bounds_are_stated(exported: dict[str, object]) -> None:
    other = exported["otherData"]
    assert other["bounds"]["steps"] == [1, 2, 3]  # type: ignore[index]
    assert other["truncated"] is False  # type: ignore[index]
