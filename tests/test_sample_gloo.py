"""sample_traces/gloo_dp2: a real two-rank gloo job on the CPU recorded with `traceview record` (its
README section); analysed from its run.json and checked against what the job says it ran
(`gloo_dp2.job_facts.json`, written by tests/jobs/gloo_train.py itself)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceview

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "gloo_dp2"
FACTS: dict[str, Any] = json.loads(SAMPLE.with_name("gloo_dp2.job_facts.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def result() -> traceview.Analysis:
    return traceview.analyze(SAMPLE / "run.json", workers=1)


def test_steps_and_calls_are_the_jobs(result: traceview.Analysis) -> None:
    budget = result.time_budget
    for rank, facts in FACTS["ranks"].items():
        mine = budget.filter(pl.col("rank") == int(rank)).sort("step")
        assert mine["step"].to_list() == FACTS["recorded_steps"]
        expected = [len(facts["steps"][step]) for step in FACTS["recorded_steps"]]
        assert mine["comm_kernels"].to_list() == expected
        sizes = sorted(size for step in FACTS["recorded_steps"] for _, size in facts["steps"][step])
        kernels = result.collectives.filter(pl.col("rank") == int(rank))
        assert sorted(kernels["size_bytes"].to_list()) == sizes
        assert set(kernels["collective"]) == {"AllReduce"}


def test_the_run_is_the_jobs(result: traceview.Analysis) -> None:
    run = result.summary()["run"]
    assert run["hostnames"] == sorted({f["host"] for f in FACTS["ranks"].values()})
    assert (run["ranks"], run["backends"], run["timelines"]) == ([0, 1], ["gloo"], ["host"])
    assert run["world_size"] == FACTS["ranks"]["0"]["world_size"]
    instances = result.instances
    assert instances.height == sum(len(FACTS["ranks"]["0"]["steps"][s]) for s in FACTS["recorded_steps"])
    assert instances["consistent"].all()
    assert result.stragglers["rank"].sort().to_list() == [0, 1]
    median = result.raw.budget.run_median
    assert (median["comm_us"] or 0) > 0
    assert (median["comp_us"] or 0) > 0


def test_model_inputs_come_from_run_json(result: traceview.Analysis) -> None:
    manifest = json.loads((SAMPLE / "run.json").read_text(encoding="utf-8"))
    inputs = {a["name"]: a for a in result.summary()["prediction"]["assumptions"]}
    assert (inputs["b (local batch)"]["value"], inputs["b (local batch)"]["source"]) == (
        manifest["model"]["local_batch"],
        "manifest",
    )
    assert inputs["P (parameters)"]["value"] == manifest["model"]["params"] == FACTS["ranks"]["0"]["params"]
    assert inputs["FLOPs per step"]["source"] == "manifest"
    assert inputs["GPUs per node"]["value"] == manifest["ranks_per_host"]
