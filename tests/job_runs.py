"""Real torch jobs run by the tests. Each job probes a free port and binds it later, so a test running in
parallel can take the port in between (EADDRINUSE): such a run is repeated, once, on its output folders
cleared. Any other failure is the test's."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

PORT_TAKEN = "EADDRINUSE"


def run_job(command: Sequence[str], clear: Sequence[Path] = ()) -> subprocess.CompletedProcess[str]:
    """`command` run to its end, its output captured; once more, `clear` removed first, when it lost its
    port."""
    done = subprocess.run(list(command), capture_output=True, text=True, check=False)
    if done.returncode != 0 and PORT_TAKEN in done.stderr:
        for folder in clear:
            shutil.rmtree(folder, ignore_errors=True)
        done = subprocess.run(list(command), capture_output=True, text=True, check=False)
    return done
