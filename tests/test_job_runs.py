"""`run_job`, the tests' launcher of real torch jobs: a job that hangs is killed with every process it
spawned after the limit and run once more; a job that lost its port is run once more; any other failure is
returned as it is, after one run."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from tests.job_runs import HUNG, run_job

SPAWNS_AND_HANGS = """
import subprocess, sys, time
from pathlib import Path
runs = Path(sys.argv[1])
runs.write_text(runs.read_text() + "run\\n")
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # holds the pipes too
Path(sys.argv[2]).write_text(str(child.pid))
time.sleep(120)
"""
FAILS = """
import sys
from pathlib import Path
runs = Path(sys.argv[1])
runs.write_text(runs.read_text() + "run\\n")
sys.exit(sys.argv[2])
"""


def _alive(pid: int) -> bool:
    """Whether `pid` still runs (a zombie, killed and not yet reaped by its new parent, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text(encoding="utf-8").split(") ")[1][0] != "Z"


def _ended(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_a_hung_job_is_killed_with_its_children_and_run_once_more(tmp_path: Path) -> None:
    runs, child = tmp_path / "runs", tmp_path / "child"
    runs.write_text("")
    (tmp_path / "out").mkdir()
    started = time.monotonic()
    done = run_job(
        [sys.executable, "-c", SPAWNS_AND_HANGS, str(runs), str(child)], clear=[tmp_path / "out"], limit_s=2.0
    )
    assert time.monotonic() - started < 60  # two limits of 2 s, not the job's 120 s
    assert done.returncode != 0
    assert HUNG in done.stderr
    assert runs.read_text().count("run") == 2
    assert not (tmp_path / "out").exists()  # cleared before the second run
    assert _ended(int(child.read_text()))  # the second run's child, killed with its session


def test_a_job_that_lost_its_port_runs_once_more_and_another_failure_once(tmp_path: Path) -> None:
    for message, expected_runs in (("bind: EADDRINUSE", 2), ("some other error", 1)):
        runs = tmp_path / f"runs{expected_runs}"
        runs.write_text("")
        done = run_job([sys.executable, "-c", FAILS, str(runs), message])
        assert done.returncode == 1
        assert message in done.stderr
        assert runs.read_text().count("run") == expected_runs
