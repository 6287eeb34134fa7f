"""Running the recorded command (docs/run-manifest.md, "Exit status, output and signals"): its environment
(the settings, NCCL's logs, the start-up hook first on PYTHONPATH) and the process itself, whose output, exit
status and signals pass through unchanged.

Signals: the command runs in the recorder's process group, so a signal the terminal sends (Ctrl-C, Ctrl-\\,
a hang-up) reaches it directly and is not sent again; any other signal the recorder receives (SIGTERM from a
scheduler or `kill`, SIGUSR1/2, and SIGINT/SIGQUIT/SIGHUP sent to the recorder alone) is forwarded to it.
The recorder itself waits for the command to end, whatever the signal, to write `run.json`; a command
killed by a signal then ends the recorder by the same signal.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType

from traceview.core.errors import UsageError
from traceview.core.sanitize import printable

HOOK_DIR = Path(__file__).resolve().parent / "hook"
"""The folder `traceview record` puts first on PYTHONPATH: it holds only `sitecustomize.py`."""
TERMINAL_SIGNALS = (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP)
"""Signals a terminal sends to its whole foreground process group (the command included)."""
FORWARDED_SIGNALS = (*TERMINAL_SIGNALS, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)


def hook_env(environ: Mapping[str, str]) -> dict[str, str]:
    """PYTHONPATH with the start-up hook's folder first (the caller's entries kept after it)."""
    before = environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": os.pathsep.join([str(HOOK_DIR), *([before] if before else [])])}


def _terminal_in_front() -> bool:
    """Whether this process's group is the foreground of its terminal (a terminal's signal reached all)."""
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            if stream.isatty():
                return os.tcgetpgrp(stream.fileno()) == os.getpgrp()
    return False


@contextlib.contextmanager
def _forwarding(child: subprocess.Popen[bytes]) -> Iterator[None]:
    """While the command runs, hand the signals of `FORWARDED_SIGNALS` on to it (see the module's doc)."""

    def forward(number: int, _: FrameType | None) -> None:
        if number in TERMINAL_SIGNALS and _terminal_in_front():
            return  # the terminal sent it to the command too
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(number)

    previous = {number: signal.signal(number, forward) for number in FORWARDED_SIGNALS}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def run_command(command: Sequence[str], env: Mapping[str, str]) -> int:
    """Run the command to its end; its exit status (negative: killed by that signal)."""
    try:
        child = subprocess.Popen(list(command), env=dict(env))
    except OSError as exc:
        raise UsageError(f"{printable(command[0])}: cannot run: {exc.strerror or exc}") from exc
    with _forwarding(child):
        return child.wait()


def end_like(status: int) -> None:
    """End this process as the command ended when a signal killed it (status -N): by the same signal."""
    if status < 0:
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
