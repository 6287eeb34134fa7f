"""The command line's standard streams: one guard for stdout and stderr, one place terminal consoles are made
(docs/metrics.md, "Errors and exit codes").

- `guard_streams()` wraps stdout and stderr once, at start. A write to a stdout its reader closed (a broken
  pipe: `traceview summary RUN | head -1`; a stdout closed before start: `>&-`) raises `StdoutClosed`, which
  stops the command quietly with exit 0: the reader chose to stop. Any other failure to write stdout (a full
  disk) is `StdoutFailed`, one line naming standard output (exit 2). A stderr that cannot be written is left
  alone (there is no one to tell). stdout is written to its descriptor with every byte accounted for
  (`write_all`): a short write (a file-size limit, `ulimit -f`, EFBIG) is a failure, never a file silently
  cut; a shell redirect keeps what was written before the failure. Characters the terminal's encoding lacks
  (`PYTHONIOENCODING=ascii`, `LANG=C`) are written as backslash escapes, never an error.
- `console(...)` makes every rich console: no emoji codes (`:x:` stays `:x:`), no highlighting, and no escape
  codes at all when `NO_COLOR` is set (it wins over `FORCE_COLOR`, https://no-color.org), nor when the stream
  is not a terminal unless `FORCE_COLOR` asks for them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from typing import TYPE_CHECKING, Any, TextIO

from traceview.core.errors import TraceviewError

if TYPE_CHECKING:
    from rich.console import Console


class StdoutClosed(BaseException):
    """The reader of stdout is gone (a broken pipe, a closed stdout): stop quietly, exit 0. A BaseException so
    that no handler of ordinary errors on the way (click's own exits 1 on a broken pipe) takes it."""


class StdoutFailed(TraceviewError):
    """Writing stdout failed for another reason (a full disk): one line naming standard output, exit 2."""


def _gone(error: BaseException) -> bool:
    return isinstance(error, BrokenPipeError | ValueError) or getattr(error, "errno", None) == errno.EPIPE


class GuardedStream:
    """A text stream standing for stdout or stderr: `stream` is the real one (None when it was closed before
    start); write errors become `StdoutClosed` / `StdoutFailed` on stdout and are dropped on stderr."""

    def __init__(self, stream: TextIO | None, name: str, quiet_errors: bool) -> None:
        self.stream, self.name, self.quiet_errors = stream, name, quiet_errors
        self.closed_by_reader = False
        if stream is not None and hasattr(stream, "reconfigure"):
            with contextlib.suppress(ValueError, OSError):
                stream.reconfigure(errors="backslashreplace")

    def _failed(self, error: BaseException) -> None:
        if self.quiet_errors:
            return
        if _gone(error):
            self.closed_by_reader = True
            raise StdoutClosed from None
        reason = getattr(error, "strerror", None) or error
        raise StdoutFailed(f"{self.name}: cannot write: {reason}") from None

    def write(self, text: str) -> int:
        """Write `text`; see the class docstring for what a failure becomes. stdout is written straight to its
        descriptor, every byte accounted for (`write_all`): Python's buffered writer drops the rest of a
        short write (a file-size limit) without a word."""
        if self.stream is None:
            self._failed(BrokenPipeError())
            return len(text)
        try:
            descriptor = None if self.quiet_errors else self._descriptor()
            if descriptor is None:
                return self.stream.write(text)
            self.stream.flush()
            write_all(descriptor, text.encode(self.encoding, "backslashreplace"))
        except (OSError, ValueError) as error:
            self._failed(error)
        return len(text)

    def _descriptor(self) -> int | None:
        """The real stream's descriptor, None when it has none (a stream in memory)."""
        try:
            return self.stream.fileno() if self.stream is not None else None
        except (OSError, ValueError, AttributeError):
            return None

    def flush(self) -> None:
        """Flush the real stream, failures handled as for `write`."""
        if self.stream is None:
            return
        try:
            self.stream.flush()
        except (OSError, ValueError) as error:
            self._failed(error)

    def isatty(self) -> bool:
        """Whether the real stream is a terminal (False when closed)."""
        try:
            return self.stream is not None and self.stream.isatty()
        except (OSError, ValueError):
            return False

    def fileno(self) -> int:
        """The real stream's descriptor; `OSError` when it has none."""
        if self.stream is None:
            raise OSError(errno.EBADF, f"{self.name} is closed")
        return self.stream.fileno()

    @property
    def encoding(self) -> str:
        """The real stream's encoding (UTF-8 when closed)."""
        return getattr(self.stream, "encoding", None) or "utf-8"

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def write_all(descriptor: int, data: bytes) -> None:
    """Write every byte of `data` to `descriptor` (a pipe may take it in parts); a write that takes nothing,
    or fails (EFBIG past `ulimit -f`, ENOSPC), raises `OSError`."""
    view = memoryview(data)
    while view:
        written = os.write(descriptor, view)
        if written <= 0:
            raise OSError(errno.EIO, f"short write: {len(view)} of {len(data)} bytes not written")
        view = view[written:]


def guard_streams() -> GuardedStream:
    """Wrap `sys.stdout` and `sys.stderr` (once); returns the stdout guard."""
    if not isinstance(sys.stderr, GuardedStream):
        sys.stderr = GuardedStream(sys.stderr, "standard error", quiet_errors=True)
    if not isinstance(sys.stdout, GuardedStream):
        sys.stdout = GuardedStream(sys.stdout, "standard output", quiet_errors=False)
    return sys.stdout


def silence_stdout() -> None:
    """After `StdoutClosed`: point descriptor 1 at /dev/null, so the interpreter's last flush of what is still
    buffered goes nowhere instead of failing on the closed pipe."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)


def colour_wanted() -> bool:
    """Whether colours and styles may be written: not when `NO_COLOR` is set (to anything but empty)."""
    return not os.environ.get("NO_COLOR")


def may_be_terminal(stream: TextIO) -> bool:
    """Whether a console on `stream` may take it for a terminal (`console`): it is one, or the environment
    says to treat it as one (`TTY_COMPATIBLE=1` or `FORCE_COLOR`, unless `NO_COLOR` is set: then only a
    terminal is). When False, rich need not be imported to learn that nothing will be drawn."""
    forced = os.environ.get("TTY_COMPATIBLE") == "1" or bool(os.environ.get("FORCE_COLOR"))
    return stream.isatty() or (forced and colour_wanted())


def console(*, stderr: bool = False, width_when_piped: int | None = None, **settings: Any) -> Console:
    """A rich console on stdout (or stderr): the terminal's width, or `width_when_piped` when not a terminal;
    no emoji codes, no highlighting, no escape codes under `NO_COLOR` (see the module docstring)."""
    stream = sys.stderr if stderr else sys.stdout
    terminal = stream.isatty()
    columns = os.environ.get("COLUMNS", "")
    stated = int(columns) if columns.isdigit() and int(columns) > 0 else None
    width = None if terminal else (stated or width_when_piped)
    if not colour_wanted():
        settings.update(color_system=None, force_terminal=terminal)
    from rich.console import Console  # rich only when something is printed: `--help` never imports it

    return Console(stderr=stderr, width=width, emoji=False, highlight=False, **settings)
