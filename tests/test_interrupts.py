"""The interrupt deadline (`traceview.cli.interrupts`): a Ctrl-C that the running code swallows, or that finds
the main thread stuck, still ends the command within a second with one line and exit 130, the output being
written removed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from traceview.cli.interrupts import HARD_EXIT_AFTER_S

pytestmark = pytest.mark.usefixtures("interruptible")


SWALLOWS_INTERRUPTS = """
import sys, time
from pathlib import Path
from traceview.cli.interrupts import guard_interrupts
from traceview.core.output import atomic_output

guard_interrupts()
with atomic_output(Path(sys.argv[1])) as temporary:
    temporary.write_text("half a report")
    print("writing", flush=True)
    while True:  # a library that catches every exception, KeyboardInterrupt included
        try:
            time.sleep(0.05)
        except BaseException:
            pass
"""

STUCK_IN_A_LOCK = """
import signal, threading
from traceview.cli.interrupts import guard_interrupts

guard_interrupts()
threading.Thread(target=threading.Event().wait, daemon=True).start()  # a thread the kernel may signal
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # the main thread, as if in a long native call
print("waiting", flush=True)
threading.Event().wait()  # never woken: the signal reaches the other thread
"""


def _interrupted(code: str, *args: str) -> tuple[int, str, float]:
    process = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    process.stdout.readline()  # the program is past its start-up
    time.sleep(0.3)  # and in its loop or its wait
    signalled = time.monotonic()
    process.send_signal(signal.SIGINT)
    try:
        _, err = process.communicate(timeout=30)
    finally:
        process.kill()  # a program the interrupt did not end is not left behind
    return process.returncode, err, time.monotonic() - signalled


def test_a_swallowed_interrupt_still_ends_the_command(tmp_path: Path) -> None:
    output = tmp_path / "report.html"
    code, err, seconds = _interrupted(SWALLOWS_INTERRUPTS, str(output))
    assert code == 130, err
    assert err == "traceview: interrupted\n"
    assert HARD_EXIT_AFTER_S <= seconds < HARD_EXIT_AFTER_S + 1.5  # slack for a loaded machine
    assert os.listdir(tmp_path) == []  # neither the output nor its temporary file


def test_an_interrupt_in_a_wait_ends_the_command() -> None:
    code, err, seconds = _interrupted(STUCK_IN_A_LOCK)
    assert code == 130, err
    assert err == "traceview: interrupted\n"
    assert HARD_EXIT_AFTER_S <= seconds < HARD_EXIT_AFTER_S + 1.5  # slack for a loaded machine


INTERRUPTED_WHILE_A_CLASS_IS_BUILT = """
import sys
from traceview.cli.main import _exit_code

class Field:
    def __set_name__(self, owner, name):
        raise KeyboardInterrupt  # as a Ctrl-C arriving while an import builds a dataclass

try:
    class Log:
        settings = Field()
except RuntimeError as error:  # Python wraps it: "Error calling __set_name__ on 'Field' instance ..."
    sys.exit(_exit_code(error))
"""


def test_an_interrupt_that_python_wraps_while_building_a_class_is_said_as_an_interrupt() -> None:
    command = [sys.executable, "-c", INTERRUPTED_WHILE_A_CLASS_IS_BUILT]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 130, done.stderr
    assert done.stderr == "traceview: interrupted\n"
