"""Parallelism dimensions read from real jobs: four 4-rank CPU jobs (gloo) over a 2-D DeviceMesh, recorded by
`traceview.profile()` in one launch (tests/jobs/mesh_train.py): data x tensor parallelism with DTensor,
FSDP2 x tensor parallelism, a two-stage pipeline x data parallelism, and an all-to-all of uneven splits x
data parallelism. Each group must be named the dimension the job built it for (the job writes its groups and
the calls it issued itself), the calls and bytes per dimension must be the job's, and the all-to-all's
imbalance the one its split sizes make. gloo names no group in its traces: the worker pools, the enqueuing
c10d ops and the send/receive pairs settle them (docs/metrics.md, "Parallelism dimensions").

CI installs torch (.ci/run); elsewhere these tests skip without it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

if importlib.util.find_spec("torch") is None:
    if os.environ.get("CI") == "true":
        raise ImportError("torch is not installed: .ci/run installs it for these tests")
    pytest.skip("torch is not installed (pip install 'traceview[record]')", allow_module_level=True)

from tests.job_runs import run_job
from traceview.api import analyze
from traceview.reduce.results import RunAnalysis

JOB = Path(__file__).parent / "jobs" / "mesh_train.py"
MODES = ("dp_tp", "fsdp_tp", "pp", "a2a")
SPLITS = (2, 6)  # tests/jobs/mesh_train.py SPLITS: rows each rank sends to ep local ranks 0 and 1


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mesh")
    done = run_job([sys.executable, str(JOB), "--out", str(out), "--steps", "3"], clear=[out])
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def facts(out: Path, mode: str) -> dict[int, dict[str, Any]]:
    found = [
        json.loads(p.read_text(encoding="utf-8")) for p in (out / mode / "facts").glob("facts.rank*.json")
    ]
    return {fact["rank"]: fact for fact in found}


def analysed(out: Path, mode: str) -> RunAnalysis:
    return analyze(out / mode / "run" / "run.json", workers=1).raw


def per_step(recorded: dict[int, dict[str, Any]], rank: int) -> dict[str, tuple[int, int]]:
    """The calls and bytes the rank issued per recorded step, per dimension of the job (its last step)."""
    calls = recorded[rank]["steps"][-1]
    return {
        dim: (sum(1 for c in calls if c[0] == dim), sum(c[2] for c in calls if c[0] == dim))
        for dim in {c[0] for c in calls}
    }


@pytest.mark.parametrize("mode", ["dp_tp", "fsdp_tp", "a2a"])
def test_each_group_is_the_dimension_the_job_built_it_for(jobs: Path, mode: str) -> None:
    analysis = analysed(jobs, mode)
    assert analysis.dimensions is not None
    labels = dict(analysis.dimensions.groups.select("group", "dimension").iter_rows())
    built = {g["name"]: g["dimension"] for fact in facts(jobs, mode).values() for g in fact["groups"]}
    assert labels == built
    descs = dict(analysis.dimensions.groups.select("group", "desc").iter_rows())
    assert {descs[name] for name in built} == {
        f"mesh_{g['mesh_dim']}" for f in facts(jobs, mode).values() for g in f["groups"]
    }


def test_the_pipeline_is_found_from_its_sends_and_receives(jobs: Path) -> None:
    analysis = analysed(jobs, "pp")
    assert analysis.dimensions is not None
    named = analysis.dimensions.named
    assert sorted(named.get_column("dimension").to_list()) == ["dp", "pp"]
    groups = analysis.dimensions.groups.filter(pl.col("dimension") == "pp").row(0, named=True)
    assert (
        groups["desc"] == "mesh_pp"
    )  # gloo's send and receive run on the calling thread: paired across ranks
    recorded = facts(jobs, "pp")
    rows = {row["dimension"]: row for row in named.iter_rows(named=True)}
    issued = [per_step(recorded, rank) for rank in sorted(recorded)]
    # the median over ranks (the two stages hold different layers: their gradient buckets differ)
    for dimension in ("pp", "dp"):
        calls = statistics.median(found[dimension][0] for found in issued)
        size = statistics.median(found[dimension][1] for found in issued)
        assert (rows[dimension]["calls"], rows[dimension]["bytes"]) == (calls, size)


def test_the_pipeline_volume_needs_its_micro_batches_and_then_matches_the_job(jobs: Path) -> None:
    unstated = analysed(jobs, "pp").dimensions
    assert unstated is not None
    row = unstated.volumes.filter(pl.col("dimension") == "pp").row(0, named=True)
    assert row["ratio"] is None
    assert "micro_batches" in row["missing"]
    stated = analyze(jobs / "pp" / "run" / "run.json", workers=1, shape="micro_batches=2").raw.dimensions
    assert stated is not None
    assert stated.inputs is not None
    # gloo puts both pipelines ([0, 1] and [2, 3]) on one stream: every rank still has its own stage
    assert sorted(stated.inputs.stages.get_column("rank").to_list()) == sorted(facts(jobs, "pp"))
    row = stated.volumes.filter(pl.col("dimension") == "pp").row(0, named=True)
    # each stage has one boundary: an activation of (BATCH / 2) x HIDDEN float32 forward and its gradient
    # back, per micro-batch: 2 x 1 x 2 x (4 x 32) x 4 bytes; the job's own bytes per stage
    assert row["expected_bus_bytes"] == 2 * 1 * 2 * (8 // 2 * 32) * 4
    issued = [per_step(facts(jobs, "pp"), rank)["pp"][1] for rank in (0, 1)]
    assert row["measured_bus_bytes"] == statistics.median(issued)
    assert row["ratio"] == pytest.approx(1.0)


@pytest.mark.parametrize("mode", ["dp_tp", "a2a"])
def test_calls_and_bytes_per_dimension_are_the_jobs(jobs: Path, mode: str) -> None:
    analysis = analysed(jobs, mode)
    assert analysis.dimensions is not None
    rows = {row["dimension"]: row for row in analysis.dimensions.per_dimension.iter_rows(named=True)}
    issued = per_step(facts(jobs, mode), 0)
    assert {dim: rows[dim]["calls"] for dim in issued} == {dim: calls for dim, (calls, _) in issued.items()}
    # a gloo all-to-all's op records one tensor, not always the one it sends: its bytes are checked through
    # the split sizes (below); the all-reduce's are the job's
    assert rows["dp"]["bytes"] == issued["dp"][1]


def test_the_uneven_all_to_all_is_imbalanced_as_its_splits_say(jobs: Path) -> None:
    analysis = analysed(jobs, "a2a")
    assert analysis.moe is not None
    assert analysis.moe.measurable
    # the dispatch: every member sends SPLITS, so ep local rank 1 receives 2 x 6 rows, local rank 0 2 x 2
    received = [2 * SPLITS[0], 2 * SPLITS[1]]
    imbalance = max(received) / (sum(received) / len(received))
    ep_groups = {
        g["name"]: g["ranks"]
        for f in facts(jobs, "a2a").values()
        for g in f["groups"]
        if g["mesh_dim"] == "ep"
    }
    for row in analysis.moe.per_group.iter_rows(named=True):
        assert row["imbalance"] == pytest.approx(imbalance)
        assert row["hottest_ranks"] == [ep_groups[row["group"]][1]]
    # the send matrix in bytes per step: a dispatch of SPLITS rows of 8 float32 to each member, and the
    # combine returning what each sent (ep local rank 0 received 2 rows from each, local rank 1 6)
    low, high = ep_groups["3"]
    matrix = analysis.moe.matrix.filter(pl.col("group") == "3").iter_rows(named=True)
    cells = {(r["src"], r["dst"]): r["bytes"] for r in matrix}
    row_bytes = 8 * 4
    assert cells[(low, high)] == (SPLITS[1] + SPLITS[0]) * row_bytes
    assert cells[(high, low)] == (SPLITS[0] + SPLITS[1]) * row_bytes
    assert cells[(high, high)] == (SPLITS[1] + SPLITS[1]) * row_bytes


def test_the_terminal_and_the_json_show_the_dimensions(jobs: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "traceview", "summary", str(jobs / "fsdp_tp" / "run" / "run.json"), "-q"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Parallelism dimensions" in done.stdout
    lines = [line.strip() for line in done.stdout.splitlines()]
    assert any(line.startswith("fsdp (groups 1, 2 of 2 ranks") for line in lines)
    assert any(line.startswith("tp (groups 3, 4 of 2 ranks; confidence 1.00") for line in lines)
    document = json.loads(
        subprocess.run(
            [
                sys.executable,
                "-m",
                "traceview",
                "summary",
                str(jobs / "fsdp_tp" / "run" / "run.json"),
                "--json",
                "-q",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert {g["group"]: g["dimension"] for g in document["dimensions"]["groups"]} == {
        "1": "fsdp",
        "2": "fsdp",
        "3": "tp",
        "4": "tp",
    }
