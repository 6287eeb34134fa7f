"""Ctrl-C (SIGINT) ends every command the same way: `traceview: interrupted` on stderr, exit 130, within a
second, the workers stopped and no partial output file left (docs/metrics.md, "Errors and exit codes").

One mechanism, installed first thing (`guard_interrupts`, before the command line is imported):

- the first signal raises `KeyboardInterrupt` in the main thread (later ones are ignored), which unwinds the
  command (workers stopped, Ray tasks cancelled, temporary outputs removed by their own `finally` blocks) and
  becomes exit 130 in `traceview.cli.main`;
- a command that ends as if no signal came (a library caught the `KeyboardInterrupt` and went on) still
  ends with the line and exit 130 (`interrupt_received`, read by `traceview.cli.main`);
- the signal also arms a deadline (`HARD_EXIT_AFTER_S`), watched by a thread woken by the signal itself
  (`signal.set_wakeup_fd`, so it is woken even while the main thread is busy in compiled code): when the
  command has not ended by then (a library swallowed the interrupt, or the main thread is stuck in a long
  native call), the thread removes the unfinished outputs, ends the worker processes and exits 130 itself.

A Ctrl-C ignored by the parent shell (a background job: `SIGINT` inherited as ignored) stays ignored.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
import threading
from types import FrameType

HARD_EXIT_AFTER_S = 0.9
"""Seconds after the signal when the command ends from the watcher thread if it has not ended by itself."""

INTERRUPTED_LINE = "traceview: interrupted\n"
EXIT_INTERRUPTED = 130

_finished = threading.Event()
"""Set when the command has its exit code: the deadline no longer applies."""

_received = threading.Event()
"""Set by the first Ctrl-C, whatever becomes of the `KeyboardInterrupt` it raises."""

_line_said = threading.Event()
"""Set when the command has said `traceview: interrupted` itself (the deadline, still armed, says nothing)."""


def _hard_exit() -> None:
    """End the process now: unfinished outputs removed, workers ended, one line, exit 130."""
    if _finished.is_set():
        return
    from traceview.core.output import remove_unfinished_outputs

    remove_unfinished_outputs()
    for child in multiprocessing.active_children():
        with contextlib.suppress(Exception):
            child.terminate()
    if not _line_said.is_set():
        with contextlib.suppress(OSError):
            os.write(2, INTERRUPTED_LINE.encode())
    os._exit(EXIT_INTERRUPTED)


def _watch(reader: int) -> None:
    """The watcher thread: wait for SIGINT's byte on the wakeup pipe, then for the deadline. The thread blocks
    the signal itself, so that the kernel hands it to the main thread (or another) and never to this one."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    while True:
        try:
            received = os.read(reader, 64)
        except OSError:
            return
        if not received:
            return
        if signal.SIGINT in received:
            if not _finished.wait(HARD_EXIT_AFTER_S):
                _hard_exit()
            return


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    """The first Ctrl-C stops the command; later ones are ignored (they would break the stopping in the
    middle), the deadline ending the command should the stopping take too long."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _received.set()
    raise KeyboardInterrupt


def interrupt_received() -> bool:
    """Whether Ctrl-C came during the command (even where a library swallowed its `KeyboardInterrupt`)."""
    return _received.is_set()


def guard_interrupts() -> None:
    """Install the handler and the watcher (once, from the main thread); an ignored SIGINT is left ignored."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return
    reader, writer = os.pipe()
    os.set_blocking(writer, False)
    try:
        signal.set_wakeup_fd(writer, warn_on_full_buffer=False)
    except ValueError:  # not the main thread: the default handler stays
        os.close(reader)
        os.close(writer)
        return
    signal.signal(signal.SIGINT, _raise_interrupt)
    threading.Thread(target=_watch, args=(reader,), name="traceview-interrupts", daemon=True).start()


def finished() -> None:
    """The command has its exit code (the deadline no longer applies)."""
    _finished.set()


def interruption_said() -> None:
    """The command says `traceview: interrupted` itself; the deadline stays armed for what follows."""
    _line_said.set()


def interrupted_exit() -> None:
    """Say `traceview: interrupted` and exit 130 (an interrupt outside the command, at start or at exit)."""
    _line_said.set()
    if sys.stderr is not None:
        with contextlib.suppress(Exception):
            sys.stderr.write(INTERRUPTED_LINE)
            sys.stderr.flush()
    os._exit(EXIT_INTERRUPTED)


def forget_escaped_interrupt() -> None:
    """Make the interpreter exit with the code it is given. CPython notes a `KeyboardInterrupt` that escaped
    code an extension ran through `PyRun_String` (as PyO3 modules do), and at exit kills itself with SIGINT
    instead of returning the exit code (a status of -2, not 130); the note is cleared by the next such run,
    an empty one here."""
    with contextlib.suppress(AttributeError, OSError):
        ctypes.pythonapi.PyRun_SimpleString(b"")
