"""Real multi-process PyTorch jobs on the CPU (gloo), recorded through both entry points and analysed end to
end; every expected value comes from the job itself (tests/jobs/gloo_train.py writes what it ran) or from the
settings the test passes, never from traceview.

- data parallel (two all-reduce buckets a step), launched by `torch.distributed.run` under
  `traceview record`, which hands the schedule and the local batch to the job's `traceview.profile()`;
- a two-stage pipeline (send/recv of two micro-batches a step), launched by the script itself
  (`torch.multiprocessing`), `traceview.profile(run_dir, ...)` with its own settings.

CI installs torch (.ci/run); elsewhere these tests skip without it.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("torch") is None:
    if os.environ.get("CI") == "true":
        raise ImportError("torch is not installed: .ci/run installs it for these tests")
    pytest.skip("torch is not installed (pip install 'traceview[record]')", allow_module_level=True)

from tests.job_runs import run_job

JOB = Path(__file__).parent / "jobs" / "gloo_train.py"
LOCAL_BATCH = 16  # the job's own (LOCAL_BATCH in gloo_train.py); `traceview record` passes it too


@dataclass(frozen=True)
class Recorded:
    """A recorded run, what the job says it did, and the schedule it was recorded with."""

    name: str
    run: Path
    facts: dict[int, dict[str, Any]]
    wait: int
    warmup: int
    active: int
    by_record: bool

    @property
    def active_steps(self) -> list[int]:
        """The steps the profiler recorded: `ProfilerStep#N` counts steps from 0."""
        first = self.wait + self.warmup
        return list(range(first, first + self.active))

    def calls(self, rank: int) -> list[list[Any]]:
        """The collective calls the rank issued in the recorded steps: [name, bytes]."""
        steps = self.facts[rank]["steps"]
        return [call for step in self.active_steps for call in steps[step]]


def _traceview(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "traceview", *map(str, args)], capture_output=True, text=True, check=False
    )


def _facts(folder: Path) -> dict[int, dict[str, Any]]:
    found = [json.loads(p.read_text(encoding="utf-8")) for p in folder.glob("facts.rank*.json")]
    return {fact["rank"]: fact for fact in found}


@pytest.fixture(scope="module")
def data_parallel(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    root = tmp_path_factory.mktemp("dp")
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    job = [str(JOB), "--mode", "dp", "--steps", "4", "--facts", str(root / "facts")]
    done = _traceview(
        "record",
        "-o",
        root / "run",
        "--wait",
        "1",
        "--warmup",
        "1",
        "--active",
        "2",
        "--local-batch",
        str(LOCAL_BATCH),
        "--job",
        "dp-test",
        "--",
        *launcher,
        "--monitor-interval",
        "0.1",
        *job,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "wrote" in done.stderr
    assert "run.json" in done.stderr
    assert "traceview record:" not in done.stderr  # the drop-in recorder left the job to its own profile()
    return Recorded("dp", root / "run", _facts(root / "facts"), 1, 1, 2, by_record=True)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    root = tmp_path_factory.mktemp("pp")
    command = [
        sys.executable,
        str(JOB),
        "--mode",
        "pp",
        "--spawn",
        "2",
        "--steps",
        "3",
        "--run-dir",
        str(root / "run"),
        "--facts",
        str(root / "facts"),
        "--wait",
        "0",
        "--warmup",
        "1",
        "--active",
        "2",
    ]
    done = run_job(command, clear=[root / "run", root / "facts"])
    assert done.returncode == 0, done.stderr[-3000:]
    return Recorded("pp", root / "run", _facts(root / "facts"), 0, 1, 2, by_record=False)


@pytest.fixture(params=["data_parallel", "pipeline"])
def recorded(request: pytest.FixtureRequest) -> Recorded:
    value: Recorded = request.getfixturevalue(request.param)
    return value


@pytest.fixture
def summary(recorded: Recorded) -> dict[str, Any]:
    done = _traceview("summary", recorded.run / "run.json", "--json", "-q")
    assert done.returncode == 0, done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def test_the_job_ran_on_two_ranks_of_this_host(recorded: Recorded) -> None:
    assert sorted(recorded.facts) == [0, 1]
    assert {f["host"] for f in recorded.facts.values()} == {socket.gethostname()}
    assert {f["backend"] for f in recorded.facts.values()} == {"gloo"}


def test_run_json_says_what_the_job_was(recorded: Recorded) -> None:
    manifest = json.loads((recorded.run / "run.json").read_text(encoding="utf-8"))
    facts = recorded.facts[0]
    assert (manifest["schema_version"], manifest["kind"]) == ("1.0", "traceview-run")
    assert (manifest["world_size"], manifest["backend"]) == (facts["world_size"], "gloo")
    assert [(t["rank"], t["host"]) for t in manifest["traces"]] == [(0, facts["host"]), (1, facts["host"])]
    assert manifest["ranks_per_host"] == 2
    for trace in manifest["traces"]:
        with gzip.open(recorded.run / trace["path"], "rt", encoding="utf-8") as handle:
            assert json.load(handle)["distributedInfo"]["rank"] == trace["rank"]
    assert {"name": "0", "ranks": [0, 1]}.items() <= manifest["process_groups"][0].items()
    assert manifest["versions"]["torch"] == facts["torch"]
    assert manifest["model"]["local_batch"] == LOCAL_BATCH
    assert manifest["model"]["params"] == facts["params"]
    profiler = manifest["profiler"]
    assert (profiler["wait"], profiler["warmup"], profiler["active"]) == (
        recorded.wait,
        recorded.warmup,
        recorded.active,
    )
    assert (profiler["record_shapes"], profiler["with_flops"], profiler["activities"]) == (
        True,
        True,
        ["cpu"],
    )
    assert manifest.get("nccl_logs", []) == []  # gloo never starts NCCL, so NCCL wrote no log
    steps = manifest["sources"]["profiler"]
    assert steps.endswith("steps: prof.step() of traceview.profile()")  # recorded once: by profile()
    assert manifest["sources"]["model.params"].startswith("stated")
    if recorded.by_record:
        assert manifest["sources"]["model.local_batch"].startswith("stated: traceview record --local-batch")
        assert manifest["job"] == "dp-test"
        assert manifest["nccl_env"]["NCCL_DEBUG"] == "INFO"
        assert manifest["nccl_env"]["NCCL_DEBUG_SUBSYS"] == "INIT,COLL,TUNING"


def test_steps_and_collective_calls_are_what_the_job_ran(recorded: Recorded, summary: dict[str, Any]) -> None:
    run = summary["run"]
    assert (run["ranks"], run["hostnames"], run["backends"]) == ([0, 1], [socket.gethostname()], ["gloo"])
    assert run["timelines"] == ["host"]
    assert run["manifest"] == str(recorded.run / "run.json")
    per_step = summary["time_budget"]["per_step"]
    for rank in (0, 1):
        mine = {row["step"]: row for row in per_step if row["rank"] == rank}
        assert sorted(mine) == recorded.active_steps
        for step in recorded.active_steps:
            assert mine[step]["comm_kernels"] == len(recorded.facts[rank]["steps"][step])
    per_rank = {row["rank"]: row for row in summary["collectives"]["per_rank"]}
    for rank in (0, 1):
        calls = recorded.calls(rank)
        assert per_rank[rank]["calls"] == len(calls)
        assert per_rank[rank]["size_bytes"] == sum(size for _, size in calls)


def test_budget_matching_and_stragglers_are_real(recorded: Recorded, summary: dict[str, Any]) -> None:
    median = summary["time_budget"]["run_median"]
    assert median["comm_us"] > 0
    assert median["comp_us"] > 0
    for row in summary["time_budget"]["per_step"]:
        assert row["gamma"] == pytest.approx(row["comm_us"] / row["comp_us"])
    across = summary["across_ranks"]
    instances = across["instances"]
    assert len(instances) == len(recorded.calls(0))  # every call of rank 0 met its peer's
    assert all(i["consistent"] and i["matched"] == 2 for i in instances)
    expected = "AllReduce" if recorded.name == "dp" else "SendRecv"
    assert {i["collective"] for i in instances} == {expected}
    assert sorted(row["rank"] for row in across["per_rank"]) == [0, 1]
    inputs = {a["name"]: a for a in summary["prediction"]["assumptions"]}
    assert (inputs["b (local batch)"]["value"], inputs["b (local batch)"]["source"]) == (
        LOCAL_BATCH,
        "manifest",
    )


def test_the_report_renders_and_says_host_timeline(recorded: Recorded, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    done = _traceview("report", recorded.run / "run.json", "-o", page, "-q")
    assert done.returncode == 0, done.stderr
    text = page.read_text(encoding="utf-8")
    assert 'id="run-timeline"' in text
    assert 'id="input-manifest"' in text
