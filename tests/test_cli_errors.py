"""The error model of the command line: usage errors exit 2 in one line, a bad rank makes a partial run (exit 4)
with the others analysed, internal errors exit 3 with the traceback in a file, and nothing raw reaches stderr."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import kineto_factory as kf
from tests import report_factory as rf
from traceview import __version__

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def traceview(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "traceview", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rf.write_run(tmp_path_factory.mktemp("errors") / "run")


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((), "no command given"),
        (("sumary", "x"), "No such command"),
        (("summary", "--bogus", "x"), "No such option: --bogus"),
        (("summary",), "Missing argument"),
        (("summary", "RUN", "--workers", "0"), "--workers"),
        (("summary", "RUN", "--workers", "-3"), "--workers"),
        (("summary", "RUN", "--params", "nan"), "--params"),
        (("summary", "RUN", "--local-batch", "inf"), "--local-batch"),
        (("summary", "RUN", "--efficiency", "2"), "--efficiency"),
        (("summary", "RUN", "--fail-on", "gamma>>1"), "--fail-on"),
        (("summary", "RUN", "--nccl-log", "MISSING"), "--nccl-log"),
        (("report", "RUN", "-o", "/nonexistent-dir/r.html"), "cannot write"),
        (("report", "RUN", "--plotlyjs", "nope"), "--plotlyjs"),
        (("summary", "RUN", "--executor", "nope"), "--executor"),
    ],
)
def test_usage_errors_exit_2_in_one_line(
    run_dir: Path, tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    resolved = [
        str(run_dir) if a == "RUN" else str(tmp_path / "missing.log") if a == "MISSING" else a for a in args
    ]
    done = traceview(*resolved)
    assert done.returncode == 2, done.stderr
    assert says in one_line(done)


def test_version_and_help() -> None:
    version = traceview("--version")
    assert (version.returncode, version.stdout.strip()) == (0, f"traceview {__version__}")
    helped = traceview("--help")
    assert helped.returncode == 0
    assert "summary" in helped.stdout


def test_shell_expanded_glob_is_one_run(run_dir: Path) -> None:
    files = sorted(str(p) for p in run_dir.iterdir())
    done = traceview("summary", *files, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["run"]["ranks"] == [0, 1]


def test_a_bad_rank_is_skipped_named_and_the_run_partial(run_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for trace in run_dir.iterdir():
        (run / trace.name).write_bytes(trace.read_bytes())
    bad = run / "rank-7.json"
    bad.write_bytes(b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "\xff\xfe", "ts": [}')
    done = traceview("summary", str(run), "--json")
    assert done.returncode == 4, done.stderr
    document = json.loads(done.stdout)
    assert document["run"]["ranks"] == [0, 1]
    assert [path for path, _ in document["run"]["skipped"]] == [str(bad)]
    assert str(bad) in done.stderr
    assert "Traceback" not in done.stderr


def test_control_characters_from_a_trace_never_reach_the_terminal(tmp_path: Path) -> None:
    evil = "\x1b]0;owned\x07\x1b[2J\x00\u202e"
    doc = kf.document([kf.kernel(evil + "gemm", 0.0, 10.0)], rank=0)
    doc["deviceProperties"] = [{"name": "A100" + evil}]
    doc["distributedInfo"]["pg_config"] = [{"pg_name": "0", "pg_desc": evil, "ranks": [0]}]
    path = kf.write(doc, tmp_path / ("rank0" + "\x1b[31m" + ".json"))
    done = traceview("summary", str(path))
    assert done.returncode == 0, done.stderr
    assert not CONTROL.search(done.stdout.replace("\n", "")), done.stdout
    assert not CONTROL.search(done.stderr.replace("\n", "")), done.stderr
    missing = traceview("summary", str(tmp_path / "no\x1b[31mfile"))
    assert missing.returncode == 2
    assert not CONTROL.search(missing.stderr.replace("\n", ""))
