"""Real CPU recordings of the run kinds (tests/jobs/run_kinds.py, plain PyTorch profiler), each job run once
per session: a DDP job over gloo whose last rank sleeps 60 ms on the host at the start of each step, and its
healthy rerun, at 2 and 4 ranks, three recordings each; inference under `torch.inference_mode()`; a
benchmark harness whose window is mostly its warm-up. Expected values come from the jobs themselves.

The machine may set a process aside for tens of milliseconds (a shared CI runner): then its peers really
wait for it. Each job measures its own forward passes in wall and CPU time: a host-late recording where a
peer lost half the sleep is not asked to name the sleeper, and a rank named in a healthy run must be one the
job itself saw set aside. CI installs torch (.ci/run); elsewhere these tests skip.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("torch") is None:
    if os.environ.get("CI") == "true":
        raise ImportError("torch is not installed: .ci/run installs it for these tests")
    pytest.skip("torch is not installed (pip install 'traceview[record]')", allow_module_level=True)

from tests.job_runs import run_job
from traceview.load.inputs import load_run
from traceview.reduce.analysis import RunAnalysis, analyze

JOB = Path(__file__).parent / "jobs" / "run_kinds.py"
REPEATS = 3
LATE_ASIDE_S = 0.03
"""A peer whose forward pass lost this much wall time over its CPU time (half the 60 ms sleep) may arrive
after the sleeper."""
HEALTHY_ASIDE_S = 0.002
"""In a healthy run, a rank the job saw lose this much is one its peers may really wait for."""


@pytest.fixture(scope="session")
def kinds_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("kinds")
    for ranks in (2, 4):
        out = root / f"ddp{ranks}"
        command = [sys.executable, str(JOB), "ddp", "--ranks", str(ranks), "--repeats", str(REPEATS)]
        done = run_job([*command, "--out", str(out)], clear=[out])
        assert done.returncode == 0, done.stderr[-2000:]
    done = run_job([sys.executable, str(JOB), "single", "--out", str(root / "single")])
    assert done.returncode == 0, done.stderr[-2000:]
    return root


def _analysed(folder: Path) -> RunAnalysis:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return analyze(load_run(str(folder / "rank*.json")))


def _said(folder: Path) -> dict[int, dict[str, Any]]:
    found = (json.loads(p.read_text(encoding="utf-8")) for p in folder.glob("job.rank*.json"))
    return {said["rank"]: said for said in found}


def _set_aside(said: dict[int, dict[str, Any]], lost_s: float) -> set[int]:
    """The ranks whose forward pass the machine set aside for `lost_s` or more (wall - CPU time) in a
    recorded step (the job's own clocks)."""
    return {
        rank for rank, facts in said.items() if any(wall - cpu >= lost_s for wall, cpu in facts["forward_s"])
    }


@pytest.mark.parametrize("ranks", [2, 4])
def test_a_host_late_rank_is_named_and_advised_first(kinds_runs: Path, ranks: int) -> None:
    checked = 0
    for k in range(REPEATS):
        folder = kinds_runs / f"ddp{ranks}" / f"late{k}"
        said = _said(folder)
        late = ranks - 1
        assert said[late]["sleep_s"] == 0.06
        if _set_aside(said, LATE_ASIDE_S) - {late}:  # such a peer may arrive after the sleeper
            continue
        analysis = _analysed(folder)
        assert analysis.crossrank.stragglers == (late,), folder.name
        assert analysis.verdict.label == "straggler-bound"
        assert analysis.verdict.sentence.startswith(f"Rank {late} sets the pace")
        top = analysis.recommendations.top
        assert top is not None
        assert top.rule == "straggler"
        assert top.sentence.startswith(f"Rank {late}'s late arrival costs")
        checked += 1
    if checked == 0:
        pytest.skip(f"every {ranks}-rank recording had a peer set aside by the machine")


@pytest.mark.parametrize("ranks", [2, 4])
def test_the_healthy_rerun_names_nobody_the_job_did_not_see_set_aside(kinds_runs: Path, ranks: int) -> None:
    for k in range(REPEATS):
        folder = kinds_runs / f"ddp{ranks}" / f"healthy{k}"
        said = _said(folder)
        assert all(facts["sleep_s"] == 0.0 for facts in said.values())
        analysis = _analysed(folder)
        named = set(analysis.crossrank.stragglers)
        assert named <= _set_aside(said, HEALTHY_ASIDE_S), (folder.name, named, analysis.crossrank.sentence)
        if not _set_aside(said, HEALTHY_ASIDE_S):
            assert analysis.verdict.label != "straggler-bound"


def test_inference_is_said_and_not_advised_as_training(kinds_runs: Path) -> None:
    analysis = _analysed(kinds_runs / "single" / "inference")
    said = " ".join(analysis.verdict.run_shape)
    assert "A forward-only run: inference, serving or a benchmark" in said
    assert "no backward pass and no optimizer step" in said
    for item in analysis.recommendations.items:
        assert "DataLoader" not in item.sentence
        assert "backward pass" not in item.sentence


def test_a_warm_up_harness_is_not_read_as_a_step(kinds_runs: Path) -> None:
    folder = kinds_runs / "single" / "warmup"
    job = json.loads((folder / "job.json").read_text(encoding="utf-8"))
    analysis = _analysed(folder)
    assert analysis.verdict.label == "warm-up"
    share = analysis.recommendations.facts["warmup_share"]
    iterations = job["warmup_iterations"] / (job["warmup_iterations"] + job["timed_iterations"])
    assert share == pytest.approx(iterations, abs=0.08)  # iterations of one size: time follows the count
    top = analysis.recommendations.top
    assert top is not None
    assert top.rule == "warm-up-window"
    assert all(item.rule != "idle-gpu" for item in analysis.recommendations.items)
