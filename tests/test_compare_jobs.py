"""`compare` knows when two runs are not the same job, and ranks a new straggler as a regression with its cost
(docs/compare.md, "Different jobs", "New stragglers and mismatches")."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def traceview(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "traceview", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("saved")
    found = {}
    for run in ("dp8_ideal", "dp8_straggler"):
        done = traceview("summary", str(SAMPLES / run), "--json", "-q")
        assert done.returncode == 0, done.stderr
        found[run] = folder / f"{run}.json"
        found[run].write_text(done.stdout, encoding="utf-8")
    return found


def test_different_jobs_are_refused_naming_what_differs(saved: dict[str, Path]) -> None:
    done = traceview("compare", str(saved["dp8_ideal"]), str(saved["dp8_straggler"]))
    assert done.returncode == 2
    assert done.stdout == ""
    line = done.stderr.strip()
    assert "\n" not in line
    assert "are different jobs: parameters 350M -> 105M; model shapes" in line
    assert "--allow-different-jobs" in line


def test_allowed_the_difference_is_said_first(saved: dict[str, Path]) -> None:
    done = traceview(
        "compare", str(saved["dp8_ideal"]), str(saved["dp8_straggler"]), "--allow-different-jobs"
    )
    assert done.returncode == 1
    assert done.stdout.splitlines()[0].startswith("Different jobs (parameters 350M -> 105M")
    document = json.loads(
        traceview(
            "compare",
            str(saved["dp8_ideal"]),
            str(saved["dp8_straggler"]),
            "--allow-different-jobs",
            "--json",
        ).stdout
    )
    assert document["different_jobs"][0] == "parameters 350M -> 105M"


def _without_stragglers(document: dict[str, Any]) -> dict[str, Any]:
    calm = copy.deepcopy(document)
    calm["across_ranks"]["stragglers"] = []
    for row in calm["across_ranks"]["per_rank"]:
        row["straggler"], row["cause"] = False, None
    return calm


def test_a_new_straggler_is_a_regression_with_its_cost(saved: dict[str, Path], tmp_path: Path) -> None:
    candidate = json.loads(saved["dp8_straggler"].read_text())
    baseline = tmp_path / "before.json"
    baseline.write_text(json.dumps(_without_stragglers(candidate)), encoding="utf-8")
    done = traceview("compare", str(baseline), str(saved["dp8_straggler"]), "--json")
    assert done.returncode == 1, done.stderr
    document = json.loads(done.stdout)
    first = document["regressions"][0]
    row = next(r for r in candidate["across_ranks"]["per_rank"] if r["rank"] == 5)
    assert (first["subject"], first["metric"]) == ("rank 5", "lateness_cost_us")
    assert first["candidate"] == pytest.approx(row["lateness_cost_us"])
    assert first["change_pct"] is None  # new: no percentage of a zero baseline, its absolute cost instead
    assert "rank 5 a new straggler costing" in document["verdict"]
    same = traceview("compare", str(saved["dp8_straggler"]), str(saved["dp8_straggler"]), "--json")
    assert same.returncode == 0  # a straggler both runs have is not new
