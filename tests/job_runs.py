"""Real torch jobs run by the tests. Each job probes a free port and binds it later, so a test running in
parallel can take the port in between: the job then fails to bind (EADDRINUSE) or, where its ranks reached
another job's store, waits forever. Such a run is repeated, once, on its output folders cleared: a job that
lost its port, or one still running after `JOB_LIMIT_S` (its whole process group killed, the ranks its
launcher spawned included). Any other failure is the test's."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

PORT_TAKEN = "EADDRINUSE"
JOB_LIMIT_S = 300.0
"""Far beyond any job here (20-60 s on a loaded 2-core machine): past it the job is taken to hang."""
HUNG = "the job ran past the tests' limit and was killed"


def _run(command: Sequence[str], limit_s: float) -> subprocess.CompletedProcess[str]:
    """`command` run to its end in a session of its own, its output captured; killed with every process of
    that session after `limit_s` (return code -9, `HUNG` appended to its stderr)."""
    with subprocess.Popen(
        list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    ) as process:
        try:
            out, err = process.communicate(timeout=limit_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):  # it may end between the limit and the kill
                os.killpg(process.pid, signal.SIGKILL)  # the spawned ranks hold the pipes open too
            out, err = process.communicate()
            return subprocess.CompletedProcess(list(command), -signal.SIGKILL, out, f"{err}\n{HUNG}")
    return subprocess.CompletedProcess(list(command), process.returncode, out, err)


def run_job(
    command: Sequence[str], clear: Sequence[Path] = (), limit_s: float = JOB_LIMIT_S
) -> subprocess.CompletedProcess[str]:
    """`command` run to its end, its output captured; once more, `clear` removed first, when it lost its
    port or hung."""
    done = _run(command, limit_s)
    if done.returncode != 0 and (PORT_TAKEN in done.stderr or HUNG in done.stderr):
        for folder in clear:
            shutil.rmtree(folder, ignore_errors=True)
        done = _run(command, limit_s)
    return done
