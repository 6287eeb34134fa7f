"""`traceview hang` on real Flight Recorder dumps of 3-rank gloo jobs (tests/jobs/flight_recorder_job.py),
each class gloo can show planted by the job: a rank that skips a collective, one stuck before its first, one
that broadcasts where the others all-reduce, one that all-reduces twice the elements; a healthy job
dumped on demand mid-run three times; and a skip whose ranks flushed a profiled window (Kineto traces) before
the hang, all but one. Every expected value comes from what the job says it called (its
facts files) and its constants, never from traceview.

Also: a real dump read in a process where torch cannot be imported. CI installs torch (.ci/run); elsewhere
these tests skip without it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("torch") is None:
    if os.environ.get("CI") == "true":
        raise ImportError("torch is not installed: .ci/run installs it for these tests")
    pytest.skip("torch is not installed (pip install 'traceview[record]')", allow_module_level=True)

from tests.job_runs import run_job

JOB = Path(__file__).parent / "jobs" / "flight_recorder_job.py"
SCENARIOS = ("healthy", "skip", "first", "op", "size", "traced")
CULPRIT, WORLD, TRACELESS = 2, 3, 0  # the job's own constants (as named in flight_recorder_job.py)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each scenario run once for the module: its folder of dumps and facts."""
    root = tmp_path_factory.mktemp("flight_recorder")
    folders = {}
    for scenario in SCENARIOS:
        folder = root / scenario
        done = run_job([sys.executable, str(JOB), "--scenario", scenario, "--out", str(folder)], [folder])
        assert done.returncode == 0, done.stderr[-2000:]
        folders[scenario] = folder
    return folders


def _facts(folder: Path) -> dict[int, list[list[Any]]]:
    found = [json.loads(p.read_text(encoding="utf-8")) for p in folder.glob("facts.rank*.json")]
    return {fact["rank"]: fact["calls"] for fact in found}


def _collectives(calls: list[list[Any]]) -> list[list[Any]]:
    """The calls that entered a collective (not the planted skip, not the error that ended the job)."""
    return [call for call in calls if call[0] not in ("skipped", "error")]


def _hang_json(*paths: Path) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "traceview", "hang", "--json", *map(str, paths)],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode, json.loads(done.stdout)


def _pickles(folder: Path, stem: str = "rank") -> list[Path]:
    return sorted(folder.glob(f"{stem}.rank*.pickle"))


@pytest.mark.parametrize("dump", [1, 2, 3])
def test_healthy_job_dumped_mid_run_agrees(jobs: dict[str, Path], dump: int) -> None:
    folder = jobs["healthy"]
    code, document = _hang_json(*_pickles(folder, f"dump{dump}"))
    assert code == 0, document["headline"]
    assert document["verdict"] == "agree"
    calls = _facts(folder)
    for row in document["groups"]:  # mid-run: each rank called more all-reduces after its dump
        assert 1 <= row["last_enqueued"] < len(calls[row["rank"]])


def test_skipped_collective_names_the_rank(jobs: dict[str, Path]) -> None:
    calls = _facts(jobs["skip"])
    planted = len(_collectives(calls[CULPRIT])) + 1  # the collective the culprit never entered
    for paths in (_pickles(jobs["skip"]), sorted(jobs["skip"].glob("rank[0-9].json"))):
        code, document = _hang_json(*paths)
        assert code == 1
        first = document["findings"][0]
        assert (first["kind"], first["seq"], first["ranks_apart"]) == ("missing_rank", planted, [CULPRIT])
        assert first["ranks_waiting"] == [r for r in range(WORLD) if r != CULPRIT]
        assert first["waited_s"] >= document["diverged_limit_s"]
    _, document = _hang_json(*_pickles(jobs["skip"]))
    assert "flight_recorder_job.py" in document["findings"][0]["stack"]  # this dump was taken with stacks


def test_rank_stuck_before_its_first_collective(jobs: dict[str, Path]) -> None:
    code, document = _hang_json(*_pickles(jobs["first"]))
    assert code == 1
    first = document["findings"][0]
    assert (first["kind"], first["seq"], first["ranks_apart"]) == ("before_first", 1, [CULPRIT])
    assert _collectives(_facts(jobs["first"])[CULPRIT]) == []


@pytest.mark.parametrize(("scenario", "kind"), [("op", "op_mismatch"), ("size", "size_mismatch")])
def test_mismatch_at_one_sequence_number(jobs: dict[str, Path], scenario: str, kind: str) -> None:
    calls = {rank: _collectives(found) for rank, found in _facts(jobs[scenario]).items()}
    planted = len(calls[CULPRIT])  # the culprit's last call is the planted one
    code, document = _hang_json(*_pickles(jobs[scenario]))
    assert code == 1
    first = document["findings"][0]
    assert (first["kind"], first["seq"], first["ranks_apart"]) == (kind, planted, [CULPRIT])
    sides = {tuple(side["ranks"]): side for side in first["sides"]}
    for ranks, side in sides.items():
        op, elements = calls[ranks[0]][planted - 1]
        assert side["op"] == op
        assert side["input_sizes"] == f"[[{elements}]]"


def test_traces_flushed_before_the_hang_joined(jobs: dict[str, Path]) -> None:
    """Every rank profiled the all-reduces before the plant; all but TRACELESS flushed the trace. gloo's
    traces name no group and no sequence number: the last call's order in the trace is the count of the
    all-reduces the job says it made before the plant."""
    folder = jobs["traced"]
    calls = _facts(folder)
    planted = len(_collectives(calls[CULPRIT])) + 1
    code, document = _hang_json(folder)
    assert code == 1
    first = document["findings"][0]
    assert (first["kind"], first["seq"], first["ranks_apart"]) == ("missing_rank", planted, [CULPRIT])
    assert len(document["kineto_traces"]) == WORLD - 1
    sides = {tuple(side["ranks"]): side for side in document["kineto_at_first_finding"]}
    assert sides[(TRACELESS,)]["state"] == "no_trace"
    flushed = sides[tuple(rank for rank in range(WORLD) if rank != TRACELESS)]
    assert (flushed["state"], flushed["collective"]) == ("order_any_group", "AllReduce")
    assert flushed["order"] == planted - 1
    assert flushed["seq"] is None


def test_real_dump_read_without_torch(jobs: dict[str, Path]) -> None:
    """The pickle loader never imports torch: a process where `import torch` fails reads a real dump."""
    dump = _pickles(jobs["skip"])[0]
    script = (
        "import sys, json\n"
        "sys.modules['torch'] = None  # import torch now raises ImportError\n"
        "from traceview.parsers import flight_recorder\n"
        f"parsed = flight_recorder.parse(__import__('pathlib').Path({str(dump)!r}))\n"
        "print(json.dumps([parsed.rank, parsed.version, parsed.entries['op'].to_list()]))\n"
        "assert 'torch.jit' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    rank, version, ops = json.loads(done.stdout)
    assert rank == 0
    assert version
    assert ops == [call[0] for call in _collectives(_facts(jobs["skip"])[0])]
