"""The one exception family of traceview, and the warnings a parse may carry.

Every error names the file, where in it (byte offset, line or rank) and what is wrong, in one line. Only the
CLI turns them into exit codes (`traceview.cli.main`): `TraceviewError` 2 (bad input or usage),
`ThresholdCrossed` 1, `PartialRun` 4 (docs/metrics.md, "Errors and exit codes").
"""

from __future__ import annotations

from pathlib import Path

from traceview.core.records import record


class TraceviewError(Exception):
    """Base of every error traceview raises on purpose; its message is one line a user can act on."""


class InputError(TraceviewError):
    """An input file cannot be read as what it was given as.

    `where` is a place inside the file ("byte 1234", "line 17", "rank 3"), or empty.
    """

    def __init__(self, path: str | Path | object, problem: str, where: str = "") -> None:
        self.path = str(path)  # a path, or a `traceview.core.location.Url`
        self.problem = problem
        self.where = where
        location = f"{self.path} ({where})" if where else self.path
        super().__init__(f"{location}: {problem}")

    @property
    def reason(self) -> str:
        """What is wrong and where, without the file's name (for a line that names the file already)."""
        return f"{self.where}: {self.problem}" if self.where else self.problem


def reason_of(error: TraceviewError) -> str:
    """What `error` says, without the file's name when it is an `InputError` (which names it first)."""
    return error.reason if isinstance(error, InputError) else str(error)


class NotKinetoError(InputError):
    """The file is JSON (or text) of another kind: the message says what it looks like instead."""


class RunError(TraceviewError):
    """The set of inputs is inconsistent (no files, two files claiming one rank, ...)."""


class UsageError(TraceviewError):
    """An option or a threshold expression given on the command line or the API is malformed."""


class ThresholdCrossed(TraceviewError):
    """A `--fail-on` threshold the user set was crossed (exit code 1, not an input error)."""


class PartialRun(TraceviewError):
    """The run was analysed, but some inputs were skipped, each named (exit code 4)."""


@record
class ParseWarning:
    """Something a parser recovered from: the result is still usable, and the report says what was lost."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"
