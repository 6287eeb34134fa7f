"""Flight Recorder dumps read with a run: `report --flight-recorder`, run.json's `flight_recorder` key (the
summary's `flight_recorder` object), and the API's `traceview.hang(paths)`. The dumps are hand-made
(tests/flight_recorder_factory.py): rank 3 never enters collective 5 (created at 5 s) and the dumps are
taken at 100 s."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import traceview
from tests.flight_recorder_factory import Op, RankDump, steady, write_dumps
from tests.shared_data import REAL_NCCL_LOGS, requires_shared

RUN = Path(__file__).resolve().parents[1] / "sample_traces" / "gloo_dp2"
WORLD = (0, 1, 2, 3)


def _dumps(folder: Path) -> Path:
    ops = steady(WORLD, 4)
    for rank in (0, 1, 2):
        ops[rank].append(Op("all_reduce", 5, created_s=5.0))
    write_dumps(folder, [RankDump(rank, ops[rank]) for rank in WORLD])
    return folder


def _traceview(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "traceview", *map(str, args)], capture_output=True, text=True, check=False
    )


def test_api_hang_names_the_rank(tmp_path: Path) -> None:
    analysis = traceview.hang(_dumps(tmp_path / "fr"))
    assert analysis.verdict == "divergence"
    assert analysis.findings[0].ranks_apart == (3,)
    assert analysis.findings[0].waited_s == pytest.approx(100.0 - 5.0)
    with pytest.raises(traceview.TraceviewError, match="paths"):
        traceview.hang([])


def test_report_adds_the_section(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    done = _traceview("report", RUN, "--flight-recorder", _dumps(tmp_path / "fr"), "-o", page, "-q")
    assert done.returncode == 0, done.stderr
    text = page.read_text(encoding="utf-8")
    assert 'id="hang-headline">HANG DIVERGED: group 0 #5: rank 3 never entered it' in text
    assert 'id="table-hang-groups"' in text


def test_run_json_lists_the_dumps(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    _dumps(run / "fr")
    manifest = json.loads((run / "run.json").read_text(encoding="utf-8"))
    manifest["flight_recorder"] = ["fr"]
    (run / "run.json").write_text(json.dumps(manifest), encoding="utf-8")
    done = _traceview("summary", run, "--json", "-q")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)["flight_recorder"]
    assert found["verdict"] == "divergence"
    assert [f["ranks_apart"] for f in found["findings"]] == [[3]]
    plain = _traceview("summary", RUN, "--json", "-q")
    assert json.loads(plain.stdout)["flight_recorder"] is None


@requires_shared
def test_nccl_log_failures_joined(tmp_path: Path) -> None:
    """`--nccl-log` adds the log's failures to the hang output: the same kinds and counts as `traceview nccl`
    finds in that log."""
    log = REAL_NCCL_LOGS / "NVIDIA_nccl_963.log"
    alone = json.loads(_traceview("nccl", log, "--json").stdout)
    expected = sorted((p["kind"], p["count"]) for job in alone["jobs"] for p in job["problems"])
    assert expected  # the log holds NCCL errors (error traces and WARN lines)
    done = _traceview("hang", _dumps(tmp_path / "fr"), "--nccl-log", log, "--json")
    joined = json.loads(done.stdout)["nccl"]["problems"]
    assert sorted((p["kind"], p["count"]) for p in joined) == expected
    text = _traceview("hang", tmp_path / "fr", "--nccl-log", log).stdout
    assert f"NCCL {expected[0][0]} x{expected[0][1]}" in text
