"""The `traceview` console script (`traceview`, `python -m traceview`): `traceview --version` is answered
before anything else is imported; Ctrl-C is answered from the moment this module is imported (a handler set
before any other import: `traceview: interrupted`, exit 130, no traceback), then by one mechanism
(`traceview.cli.interrupts`), so an interrupt while the program is still importing ends it with one line and
exit 130, like one at any later time (`traceview.cli.main`). Only the interpreter's own start (before this
module is imported, a few tens of milliseconds) is out of its reach.

An address-space limit (`ulimit -v`) is read next, before polars is imported
(`traceview.core.address_space`): too small, one line and exit 2; else the threads are capped to fit. A
`MemoryError` that escapes everything else is one line and exit 2, never a traceback; so is a limit of open
files too low to start (raised toward its hard limit when it can be)."""

from __future__ import annotations

import os
import signal
from types import FrameType

EXIT_INPUT, EXIT_INTERRUPTED = 2, 130


def _interrupted_early(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C before the command line's own handler is installed: nothing is written yet, so stop at once."""
    os.write(2, b"traceview: interrupted\n")
    os._exit(EXIT_INTERRUPTED)


if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # an ignored SIGINT stays ignored
    signal.signal(signal.SIGINT, _interrupted_early)

import contextlib  # noqa: E402 - after the handler: an interrupt while importing is one line
import sys  # noqa: E402
from collections.abc import Iterator  # noqa: E402


def _say_and_exit(line: str, code: int) -> None:
    """One line on stderr and exit `code` at once (nothing else may be importable or allocatable)."""
    with contextlib.suppress(OSError):
        os.write(2, f"traceview: error: {line}\n".encode("utf-8", "replace"))
    os._exit(code)


def _fit_memory() -> None:
    """Read the address-space limit before polars is imported: too small, one line and exit 2."""
    from traceview.core.address_space import AddressSpaceTooSmall, fit_address_space, fit_open_files

    try:
        fit_open_files()
        fit_address_space()
    except AddressSpaceTooSmall as exc:
        _say_and_exit(str(exc), EXIT_INPUT)


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """Hold Ctrl-C back while the command line imports: an interrupt raised inside an import's callbacks
    would be printed by Python as an ignored exception; held, it arrives when the block ends, in this
    frame (threads started meanwhile inherit the mask: they never take the signal)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def main() -> None:
    """Import the command line, then run it; Ctrl-C at any point: `traceview: interrupted`, exit 130."""
    if sys.argv[1:] == ["--version"]:
        from traceview.core.version import __version__

        sys.stdout.write(f"traceview {__version__}\n")
        sys.exit(0)
    try:
        _fit_memory()
        from traceview.cli.interrupts import guard_interrupts, interrupted_exit

        try:
            guard_interrupts()
            with _interrupts_held():
                from traceview.cli.main import main as run

            run()
        except KeyboardInterrupt:
            interrupted_exit()
    except MemoryError:
        _say_and_exit(_out_of_memory(), EXIT_INPUT)
    except OSError as exc:  # the system refused while the command line imports (no file descriptor left)
        _say_and_exit(f"cannot start: {exc.strerror or exc}", EXIT_INPUT)


def _out_of_memory() -> str:
    """The line for a `MemoryError` no one else took, naming the address-space limit when there is one."""
    try:
        from traceview.core.address_space import limit_text

        under = f" under {limit_text()}" if limit_text() else ""
    except MemoryError:
        under = ""
    return f"out of memory{under} (use --max-trace-bytes, or fewer --workers)"
