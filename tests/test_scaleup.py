"""`traceview scaleup SMALL LARGE`: two simulated data-parallel runs of one model at 8 and 16 GPUs (their
communication known from the simulator's alpha-beta costs, so the efficiency follows by hand), and a run of
another model (8x the parameters, stated) that it refuses on that evidence."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.simulate.engine import write_run
from tests.simulate.scenario import data_parallel_scenario
from tests.test_compare_planted import summary
from traceview.compare.scaleup import model_differences, scaleup

PARAMS, LOCAL_BATCH, FLOPS, BUCKETS = 100_000_000, 50_000, 150e12, 4
BUCKET_BYTES = PARAMS // BUCKETS * 2  # bf16 gradients
COMPUTE_US = 6 * PARAMS * LOCAL_BATCH / FLOPS * 1e6


def allreduce_us(workers: int, alpha_s: float, bandwidth: float) -> float:
    """Ring all-reduce of one bucket: 2(K-1) alpha + 2(K-1)/K S / B."""
    return (2 * (workers - 1) * alpha_s + 2 * (workers - 1) / workers * BUCKET_BYTES / bandwidth) * 1e6


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("scaleup")
    for workers, params in ((8, PARAMS), (16, PARAMS)):
        scenario = data_parallel_scenario(workers, params, LOCAL_BATCH, FLOPS, 25e9, alpha_s=5e-6, steps=4)
        scenario = replace(scenario, intra_host_bandwidth_Bps=300e9, intra_host_alpha_s=1e-6)
        name = f"{workers}x{params // PARAMS}"
        write_run(scenario, root / name)
        (root / f"{name}.json").write_text(json.dumps(summary(root / name)))
    return root


def _cli(lab: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "traceview", "scaleup", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=lab, check=False)


def test_same_model_headline_and_factors(lab: Path) -> None:
    small = json.loads((lab / "8x1.json").read_text())
    large = json.loads((lab / "16x1.json").read_text())
    assert model_differences(small, large) == []
    found = scaleup(small, large)
    step_8 = COMPUTE_US + BUCKETS * allreduce_us(8, 1e-6, 300e9)
    step_16 = COMPUTE_US + BUCKETS * allreduce_us(16, 5e-6, 25e9)
    assert found.scaling.measured_efficiency == pytest.approx(step_8 / step_16, rel=1e-3)
    factors = dict(zip(found.scaling.factors["factor"], found.scaling.factors["delta_us"], strict=True))
    assert factors["exposed transfer (bandwidth)"] == pytest.approx(step_16 - step_8, rel=1e-3)
    done = _cli(lab, "8x1.json", "16x1.json")
    assert done.returncode == 0, done.stderr
    headline = " ".join(done.stdout.split("\n\n")[0].split())
    assert headline.startswith("Scaling 8 -> 16 GPUs: measured scaling efficiency")
    assert "same model: not verifiable" in headline.split("Where the step time went")[0]
    assert f"{(step_16 - step_8) / 1000:+.2f} ms" in done.stdout  # the loss in absolute time


def _stating(document: dict[str, Any], params: float) -> dict[str, Any]:
    """`document` as if its run.json stated `params` parameters."""
    stated = {"name": "P (parameters)", "source": "manifest", "value": params}
    rows = [r for r in document["prediction"]["assumptions"] if not str(r["name"]).startswith("P (")]
    document["prediction"]["assumptions"] = [*rows, stated]
    return document


def test_two_models_are_refused_on_evidence(lab: Path) -> None:
    small = json.loads((lab / "8x1.json").read_text())
    large = json.loads((lab / "16x1.json").read_text())
    same = _stating(copy.deepcopy(large), PARAMS)
    assert model_differences(_stating(small, PARAMS), same) == []
    assert scaleup(small, same).same_model == "same model: stated parameters agree"
    (lab / "16x8-stated.json").write_text(json.dumps(_stating(large, 8 * PARAMS)))
    (lab / "8x1-stated.json").write_text(json.dumps(small))
    done = _cli(lab, "8x1-stated.json", "16x8-stated.json")
    assert done.returncode == 2
    assert "different models: stated parameters 1e+08 -> 8e+08" in done.stderr


def test_compare_points_to_scaleup(lab: Path) -> None:
    command = [sys.executable, "-m", "traceview", "compare", "8x1.json", "16x1.json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=lab, check=False)
    assert done.returncode == 2
    assert "traceview scaleup SMALL LARGE" in done.stderr


def test_json_states_the_same_post_mortem(lab: Path) -> None:
    """`scaleup --json`: versioned, the efficiency by hand, the factors' points summing to the loss 1 - E."""
    done = _cli(lab, "8x1.json", "16x1.json", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    summary_version = json.loads((lab / "8x1.json").read_text())["schema_version"]
    assert document["schema_version"] == summary_version
    assert (document["small"], document["large"]) == ("8x1.json", "16x1.json")
    step_8 = COMPUTE_US + BUCKETS * allreduce_us(8, 1e-6, 300e9)
    step_16 = COMPUTE_US + BUCKETS * allreduce_us(16, 5e-6, 25e9)
    scaling = document["scaling"]
    assert (scaling["baseline_world_size"], scaling["candidate_world_size"]) == (8, 16)
    assert scaling["measured_efficiency"] == pytest.approx(step_8 / step_16, rel=1e-3)
    points = sum(row["efficiency_points"] for row in scaling["factors"])
    assert points == pytest.approx(1 - step_8 / step_16, abs=1e-3)
    assert document["same_model"].startswith("same model: not verifiable")
    terminal = " ".join(_cli(lab, "8x1.json", "16x1.json").stdout.split())
    assert terminal.startswith(document["headline"])  # the terminal's first line, said once
