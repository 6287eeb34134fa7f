"""The `traceview` command: every command registered (`COMMANDS`: one class per command,
`traceview.cli.base`), and the one place errors become exit codes (docs/metrics.md, "Errors and exit
codes").

Exit codes: 0 ok; 1 a `--fail-on` threshold was crossed; 2 bad input or usage (one line, naming the file or
the option, and for a usage error the help hint); 3 an internal error (one line naming a log file that holds
the traceback); 4 the run was analysed but some inputs were skipped (each named). Precedence when several
hold: 2 (nothing analysed) is final; otherwise 1 outranks 4. Bare `traceview` is a usage error (2) that lists
the commands' help hint; `traceview --help` exits 0.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import tempfile
import traceback
from typing import Any

import typer

from traceview.cli.app import (
    EXIT_INPUT,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_THRESHOLD,
    ClickError,
    CommandLineError,
    app,
    command_names,
    say,
)
from traceview.cli.base import Command, register
from traceview.cli.collectives import Collectives
from traceview.cli.compare import Compare, Trend
from traceview.cli.export import Export
from traceview.cli.hang import Hang
from traceview.cli.interrupts import (
    finished,
    forget_escaped_interrupt,
    interrupt_received,
    interruption_said,
)
from traceview.cli.kernels import Kernels
from traceview.cli.nccl import Nccl
from traceview.cli.record import Record, RecordMerge
from traceview.cli.replay import Replay
from traceview.cli.report import Report
from traceview.cli.scaleup import Scaleup
from traceview.cli.stragglers import Stragglers
from traceview.cli.streams import StdoutClosed, guard_streams, silence_stdout
from traceview.cli.summary import Summary
from traceview.core.address_space import limit_text
from traceview.core.errors import PartialRun, ThresholdCrossed, TraceviewError, UsageError
from traceview.core.sanitize import printable
from traceview.core.version import __version__

COMMANDS: tuple[Command, ...] = (
    Summary(),
    Report(),
    Collectives(),
    Nccl(),
    Hang(),
    Stragglers(),
    Kernels(),
    Replay(),
    Export(),
    Compare(),
    Trend(),
    Scaleup(),
    Record(),
    RecordMerge(),
)
"""Every command, in the order of `--help`."""

for _command in COMMANDS:
    register(app, _command)


def _usage_line(error: Any) -> str:
    command = error.ctx.command_path if error.ctx is not None else "traceview"
    return f"traceview: error: {printable(error.format_message())} (see '{printable(command)} --help')"


def _command_path() -> str:
    """`traceview COMMAND` as the command line named it (for a usage error's help hint)."""
    named = next((arg for arg in sys.argv[1:] if arg in command_names()), None)
    return f"traceview {named}" if named else "traceview"


def _environment_problem(error: OSError | MemoryError) -> str:
    """What an error of the operating system says, in one line naming the file where it has one."""
    if isinstance(error, MemoryError):
        limit = limit_text()
        return (
            f"out of memory{f' under {limit}' if limit else ''} (use --max-trace-bytes, or fewer --workers)"
        )
    where = f"{printable(error.filename)}: " if error.filename is not None else ""
    return f"{where}{printable(error.strerror or error)}"


def _crash_log(error: BaseException) -> str:
    """Write the traceback of an internal error to a file of its own (in `$TMPDIR`, else the system's
    temporary folder, else the working folder); returns where, or why it could not be written."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    text = f"traceview {__version__}, {sys.argv!r}\n" + "".join(traceback.format_exception(error))
    for folder in (None, "/tmp", "."):
        try:
            handle, name = tempfile.mkstemp(prefix=f"traceview-crash-{stamp}-", suffix=".log", dir=folder)
        except OSError:
            continue
        with os.fdopen(handle, "w", encoding="utf-8", errors="traceview.bytes") as log:
            log.write(text)
        return f"traceback in {printable(name)}"
    return "no folder could take the traceback; set TMPDIR to a writable folder"


def _exit_code(error: BaseException) -> int:
    """Print what `error` means in one line and return the exit code it maps to."""
    if isinstance(error, ThresholdCrossed):
        say(f"traceview: {printable(error)}")
        return EXIT_THRESHOLD
    if isinstance(error, PartialRun):
        say(f"traceview: warning: {printable(error)}")
        return EXIT_PARTIAL
    if isinstance(error, UsageError):
        say(f"traceview: error: {printable(error)} (see '{_command_path()} --help')")
        return EXIT_INPUT
    if isinstance(error, TraceviewError):
        say(f"traceview: error: {printable(error)}")
        return EXIT_INPUT
    if isinstance(error, OSError | MemoryError):  # the machine refused (a path too long, a full disk, memory)
        say(f"traceview: error: {_environment_problem(error)}")
        return EXIT_INPUT
    if isinstance(error, CommandLineError):
        say(_usage_line(error))
        return EXIT_INPUT
    if isinstance(error, ClickError):
        say(f"traceview: error: {printable(error.format_message())}")
        return EXIT_INPUT
    if _from_interrupt(error):
        interruption_said()  # the line is said here, not by the deadline's watcher
        say("traceview: interrupted")
        return EXIT_INTERRUPTED
    log = _crash_log(error)
    say(f"traceview: internal error: {type(error).__name__}: {printable(error, 300)} ({log})")
    return EXIT_INTERNAL


def _from_interrupt(error: BaseException | None) -> bool:
    """Whether `error` is a Ctrl-C: an interrupt, or an error raised while one unwound (Python wraps one that
    comes while a class is built, during an import, in a `RuntimeError` whose cause it is)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, typer.Abort | KeyboardInterrupt):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def _run() -> int:
    """The app's exit code, every error mapped to one (one line each, never a traceback)."""
    try:
        code = app(standalone_mode=False, prog_name="traceview")
        if code == EXIT_INTERRUPTED:  # typer returns an interrupt as 130, silently: said here
            code = _exit_code(KeyboardInterrupt())
        sys.stdout.flush()  # a closed reader is found here, as a broken pipe
    except typer.Exit as done:  # typer turns an interrupt into Exit(130), silently: said here
        interrupt = done.__cause__
        code = _exit_code(interrupt) if isinstance(interrupt, KeyboardInterrupt) else done.exit_code
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else EXIT_INPUT
    except StdoutClosed:
        raise
    except BaseException as error:
        if os.environ.get("TRACEVIEW_DEBUG") and not isinstance(error, TraceviewError | ClickError):
            raise
        code = _exit_code(error)
    return code if isinstance(code, int) else EXIT_OK


def main() -> None:
    """Console entry point: run the app and map errors to exit codes. A stdout whose reader is gone (a broken
    pipe, a closed stdout) stops the command quietly with exit 0 (`traceview.cli.streams`)."""
    guard_streams()
    try:
        code = _run()
    except StdoutClosed:
        silence_stdout()
        code = EXIT_OK
    if code != EXIT_INTERRUPTED and interrupt_received():  # a library swallowed it: still an interrupt
        code = _exit_code(KeyboardInterrupt())
    if code != EXIT_INTERRUPTED:  # an interrupted command stays under the deadline until it has exited
        finished()
    forget_escaped_interrupt()
    sys.exit(code)
