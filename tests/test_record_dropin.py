"""Drop-in recording: real, unmodified PyTorch jobs on the CPU (gloo) under `traceview record`, with no
traceview in the script (tests/jobs/unmodified_train.py). Every expected value comes from the job's own
printout or from the raw trace JSON, never from traceview:

- the trace of each rank holds exactly the job's steps of the active window: `ProfilerStep#N` holds the
  job's own step-N statistic (an `aten::cumsum` over N + 1 elements);
- run.json states the local batch (summed over the micro-batches of an optimizer step) and the parameter
  count the job printed, with their sources; `traceview report` shows them as the prediction's inputs with
  the source `manifest`, and says which input the prediction lacks on a CPU.

Loops: plain (two ranks, torchrun), gradient accumulation of a token model (two ranks: tokens, all dims of the
ids), a trainer that steps inside closures through an optimizer wrapper (Lightning's pattern; Lightning is not
installed), each on two ranks under torchrun; and a loop without torch.optim found with `--step-on`, one
process without a process group (no collective: no prediction to read its inputs).
"""

from __future__ import annotations

import contextlib
import gzip
import html
import importlib.util
import json
import os
import re
import shutil
import signal
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

JOB = Path(__file__).parent / "jobs" / "unmodified_train.py"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
WORKER_SIGNALLED = re.compile(r"exitcode\s*: -\d+ .*\(SIG[A-Z]+\)")
"""torchrun's report of a worker killed by a signal."""


@dataclass(frozen=True)
class Recorded:
    """A recorded run, the schedule it was recorded with, and what the job printed."""

    run: Path
    window: tuple[int, int, int]  # wait, warmup, active
    printed: list[dict[str, Any]]
    stderr: str
    step_on: str | None

    @property
    def active_steps(self) -> list[int]:
        """The job's steps the window records: steps count from 0."""
        wait, warmup, active = self.window
        return list(range(wait + warmup, wait + warmup + active))

    def ranks(self) -> dict[int, dict[str, Any]]:
        return {line["rank"]: line for line in self.printed if "params" in line}

    def steps(self, rank: int) -> dict[int, dict[str, Any]]:
        return {line["step"]: line for line in self.printed if line["rank"] == rank and "step" in line}


def _record(
    root: Path, window: tuple[int, int, int], command: list[str], step_on: str | None = None
) -> Recorded:
    """The job recorded into `root / "run"`. A job whose worker torchrun reports killed by a signal (torch's
    gloo threads can abort the interpreter at exit under load: "terminate called without an active exception",
    SIGABRT) is recorded again, once, into a fresh folder; any other failure is the test's."""
    wait, warmup, active = window
    schedule = ["--wait", str(wait), "--warmup", str(warmup), "--active", str(active)]
    options = ["--step-on", step_on] if step_on else []
    recorder = [sys.executable, "-m", "traceview", "record", "-o", str(root / "run"), *schedule, *options]
    for attempt in range(2):
        done = subprocess.run([*recorder, "--", *command], capture_output=True, text=True, check=False)
        if done.returncode == 0 or attempt == 1 or not WORKER_SIGNALLED.search(done.stderr):
            break
        shutil.rmtree(root / "run", ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = [json.loads(line) for line in done.stdout.splitlines()]
    return Recorded(root / "run", window, printed, done.stderr, step_on)


def _plain(root: Path) -> Recorded:
    command = [*TORCHRUN, "--monitor-interval", "0.1", str(JOB), "--loop", "plain", "--steps", "5"]
    return _record(root, (1, 1, 2), command)


def _accumulate(root: Path) -> Recorded:
    job = [
        "--loop",
        "accumulate",
        "--model",
        "tokens",
        "--accumulate",
        "3",
        "--micro-batch",
        "4",
        "--seq",
        "5",
    ]
    command = [*TORCHRUN, "--monitor-interval", "0.1", str(JOB), *job, "--steps", "5"]
    return _record(root, (2, 1, 2), command)


def _trainer(root: Path) -> Recorded:
    job = ["--loop", "trainer", "--accumulate", "2", "--micro-batch", "8", "--steps", "5"]
    command = [*TORCHRUN, "--monitor-interval", "0.1", str(JOB), *job]
    return _record(root, (1, 1, 3), command)  # the default window


def _trace(recorded: Recorded, rank: int) -> list[dict[str, Any]]:
    with gzip.open(recorded.run / f"rank{rank}.pt.trace.json.gz", "rt", encoding="utf-8") as handle:
        events: list[dict[str, Any]] = json.load(handle)["traceEvents"]
    return events


def _statistic_steps(events: list[dict[str, Any]]) -> dict[int, list[int]]:
    """ProfilerStep#N -> the sizes of the job's step statistic (cumsum over k + 1 elements) inside it."""
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    sums = [e for e in events if e.get("name") == "aten::cumsum"]
    return {
        int(step["name"].removeprefix("ProfilerStep#")): [
            s["args"]["Input Dims"][0][0] for s in sums if step["ts"] <= s["ts"] <= step["ts"] + step["dur"]
        ]
        for step in steps
    }


def _check_steps(recorded: Recorded) -> None:
    """Every rank has a trace of exactly the job's steps of the active window."""
    ranks = recorded.ranks()
    assert ranks, recorded.printed
    for rank in ranks:
        assert set(recorded.active_steps) <= set(recorded.steps(rank))  # the job ran them
        found = _statistic_steps(_trace(recorded, rank))
        assert sorted(found) == recorded.active_steps
        assert all(sizes == [step + 1] for step, sizes in found.items()), found  # the job's step N is in #N


def _check_manifest(recorded: Recorded) -> None:
    """run.json states the local batch and the parameters the job used, with their sources."""
    manifest = json.loads((recorded.run / "run.json").read_text(encoding="utf-8"))
    ranks = recorded.ranks()
    assert [t["rank"] for t in manifest["traces"]] == sorted(ranks)
    fed = {
        (recorded.steps(r)[s]["local_batch"], recorded.steps(r)[s]["unit"])
        for r in ranks
        for s in recorded.active_steps
    }
    assert len(fed) == 1
    ((local_batch, unit),) = fed
    model = manifest["model"]
    assert (model["local_batch"], model["local_batch_unit"]) == (local_batch, unit)
    assert model["params"] == ranks[0]["params"]
    sources = manifest["sources"]
    assert sources["model.local_batch"].startswith("measured")
    assert sources["model.params"].startswith("measured")
    expected_steps = f"returns of {recorded.step_on}" if recorded.step_on else "optimizer steps"
    assert expected_steps in sources["profiler"]
    profiler = manifest["profiler"]
    assert (profiler["wait"], profiler["warmup"], profiler["active"]) == recorded.window
    assert manifest.get("devices", []) == []  # a CPU
    assert manifest.get("world_size", 1) == ranks[0]["world_size"]


def _check_quiet(recorded: Recorded) -> None:
    """The job's output is its own: no line of the recorder in it, no warning on stderr."""
    assert all("traceview" not in json.dumps(line) for line in recorded.printed)
    assert "traceview record:" not in recorded.stderr  # no warning, no stand-down
    assert "wrote" in recorded.stderr


def _assumptions(page: str) -> dict[str, tuple[str, str]]:
    """input -> (value, source) of the report's table of the prediction's inputs."""
    assert 'id="table-prediction-assumptions"' in page, re.findall(
        r'<p class="verdict-line"[^>]*>.*?</p>', page
    )
    table = page[page.index('id="table-prediction-assumptions"') :].split("</table>", 1)[0]
    rows = re.findall(r"<tr><td[^>]*>(.*?)</td><td>(.*?)</td><td[^>]*>.*?</td><td[^>]*>(.*?)</td>", table)
    return {
        html.unescape(name): (html.unescape(value), html.unescape(source)) for name, value, source in rows
    }


def _check_report(recorded: Recorded, page: Path) -> None:
    """`traceview report` takes them as the prediction's inputs, source `manifest`, and says what it lacks."""
    done = subprocess.run(
        [sys.executable, "-m", "traceview", "report", str(recorded.run / "run.json"), "-o", str(page), "-q"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    text = page.read_text(encoding="utf-8")
    inputs = _assumptions(text)
    step = recorded.steps(0)[recorded.active_steps[0]]
    assert inputs["b (local batch)"] == (f"{step['local_batch']:.4g}", "manifest")
    assert inputs["P (parameters)"] == (f"{recorded.ranks()[0]['params']:.4g}", "manifest")
    sentence = html.unescape(re.search(r'id="prediction-sentence">(.*?)</p>', text)[1])  # type: ignore[index]
    assert sentence.startswith("No predicted gamma: it needs the "), sentence  # on a CPU: it says which


@pytest.mark.parametrize("loop", [_plain, _accumulate, _trainer], ids=["plain", "accumulate", "trainer"])
def test_an_unmodified_two_rank_job_is_recorded(loop: Any, tmp_path: Path) -> None:
    recorded = loop(tmp_path)
    _check_steps(recorded)
    _check_manifest(recorded)
    _check_quiet(recorded)
    _check_report(recorded, tmp_path / "report.html")


def test_a_loop_without_an_optimizer_is_recorded_with_step_on(tmp_path: Path) -> None:
    command = [sys.executable, str(JOB), "--loop", "manual", "--steps", "4"]
    recorded = _record(tmp_path, (1, 0, 2), command, step_on="unmodified_train:train_step")
    _check_steps(recorded)
    _check_manifest(recorded)
    _check_quiet(recorded)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


TWO_NODE_TIMEOUT_S = 300


def _recorded_node(folder: Path, port: int) -> list[str]:
    """One node's command: its torchrun (one rank, the rendezvous at `port`) under `traceview record`."""
    schedule = ["--wait", "1", "--warmup", "1", "--active", "2"]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1"]
    launcher += ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "two-nodes"]
    job = [*launcher, "--monitor-interval", "0.1", str(JOB), "--loop", "plain", "--steps", "5"]
    return [sys.executable, "-m", "traceview", "record", "-o", str(folder), *schedule, "--", *job]


def _two_nodes(folders: tuple[Path, Path]) -> list[subprocess.CompletedProcess[str]]:
    """A job of two nodes (one torchrun each, one rank per node, met over c10d on this host), each node's
    torchrun under its own `traceview record -o FOLDER`. The rendezvous port is probed free and then bound by
    torchrun: a parallel test can take it in between, and neither node then hosts the store (both wait) or
    the node that binds it fails, so a job that has not ended in `TWO_NODE_TIMEOUT_S` is killed, and one that
    failed is run again, once, on another port (the second run's result is the one checked)."""
    for attempt in range(2):
        port = _free_port()
        recorders = [
            subprocess.Popen(
                _recorded_node(folder, port),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,  # the node's torchrun and workers killed with it
            )
            for folder in folders
        ]
        try:
            ended = [
                subprocess.CompletedProcess(r.args, r.wait(timeout=TWO_NODE_TIMEOUT_S), *r.communicate())
                for r in recorders
            ]
            if attempt == 1 or all(done.returncode == 0 for done in ended):
                return ended
            for folder in folders:
                shutil.rmtree(folder, ignore_errors=True)
        except subprocess.TimeoutExpired:
            for recorder in recorders:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(recorder.pid, signal.SIGKILL)
                recorder.communicate()
            for folder in folders:
                shutil.rmtree(folder, ignore_errors=True)
    raise AssertionError(f"the two-node job did not end within {TWO_NODE_TIMEOUT_S} s, twice")


def _check_two_node_run(path: Path, ended: list[subprocess.CompletedProcess[str]]) -> None:
    assert [done.returncode for done in ended] == [0, 0], [done.stderr[-2000:] for done in ended]
    printed = [json.loads(line) for done in ended for line in done.stdout.splitlines()]
    recorded = Recorded(path.parent, (1, 1, 2), printed, "", None)
    manifest = json.loads(path.read_text(encoding="utf-8"))
    assert [t["rank"] for t in manifest["traces"]] == [0, 1]
    assert (manifest["world_size"], manifest.get("notes", [])) == (2, [])
    for trace in manifest["traces"]:
        with gzip.open(path.parent / trace["path"], "rt", encoding="utf-8") as handle:
            events = json.load(handle)["traceEvents"]
        assert sorted(_statistic_steps(events)) == recorded.active_steps
    assert manifest["model"]["params"] == recorded.ranks()[0]["params"]
    assert manifest["model"]["local_batch"] == recorded.steps(0)[recorded.active_steps[0]]["local_batch"]


def test_two_nodes_recorded_into_their_own_folders_merge_into_one_run(tmp_path: Path) -> None:
    ended = _two_nodes((tmp_path / "node0", tmp_path / "node1"))
    merged = subprocess.run(
        [sys.executable, "-m", "traceview", "record-merge", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert merged.returncode == 0, merged.stderr
    _check_two_node_run(tmp_path / "run.json", ended)
    paths = [t["path"] for t in json.loads((tmp_path / "run.json").read_text(encoding="utf-8"))["traces"]]
    assert {path.split("/")[0] for path in paths} == {"node0", "node1"}


def test_two_nodes_recorded_into_one_shared_folder_make_one_run(tmp_path: Path) -> None:
    ended = _two_nodes((tmp_path / "shared", tmp_path / "shared"))
    _check_two_node_run(tmp_path / "shared" / "run.json", ended)
