"""The one `traceview` command-line application and what every command shares: the stderr line, stdout
consoles and JSON, the analysis with its progress bar, the gates, the skipped inputs, output files.

Each command is a class of its own module (`traceview.cli.base`), registered on `app` by `traceview.cli.main`,
which also maps errors to exit codes; nothing else exits. A command raises `TraceviewError` for anything the
user can fix.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from traceview.cli.streams import console, may_be_terminal
from traceview.core.errors import PartialRun, ThresholdCrossed
from traceview.core.sanitize import printable
from traceview.core.version import __version__

if TYPE_CHECKING:
    from rich.console import Console

    from traceview.options.run import RunOptions, RunSpec
    from traceview.reduce.results import RunAnalysis, RunHeader

EXIT_OK, EXIT_THRESHOLD, EXIT_INPUT, EXIT_INTERNAL, EXIT_PARTIAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130


def _click_exceptions() -> Any:
    """click's exception module: typer >= 0.16 vendors click as `typer._click`, older typer depends on it."""
    for name in ("typer._click.exceptions", "click.exceptions"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("neither typer._click nor click is installed")  # pragma: no cover


_CLICK = _click_exceptions()
CommandLineError: Any = _CLICK.UsageError
"""click's usage error (unknown command or option, missing or extra argument, bad value): exit 2."""
ClickError: Any = _CLICK.ClickException

app = typer.Typer(
    add_completion=False,
    no_args_is_help=False,
    help="Where the time went in a distributed training job.",
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode=None,  # help as plain text by click: `--help` imports no rich (docs/scaling.md)
    pretty_exceptions_enable=False,  # `main` turns every error into one line; rich's tracebacks cost 30 ms
)


def stderr_console() -> Console:
    """The console of stderr's lines and progress bar: one line per message, never wrapped."""
    return console(stderr=True, soft_wrap=True)


def say(message: str) -> None:
    """One line on stderr, input-derived text already made printable by the caller (never read as markup or
    emoji codes)."""
    stderr_console().print(message, markup=False, highlight=False, emoji=False)


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"traceview {__version__}\n")
        raise typer.Exit(EXIT_OK)


@app.callback(invoke_without_command=True)
def _root(
    context: typer.Context,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """Where the time went in a distributed training job."""
    if context.invoked_subcommand is None:  # bare `traceview`: a usage error naming the commands, in one line
        raise CommandLineError(f"no command given; one of: {', '.join(command_names())}", ctx=context)


def command_names() -> list[str]:
    """The names of the registered commands, in the order they were registered."""
    return [
        info.name or (info.callback.__name__ if info.callback else "") for info in app.registered_commands
    ]


WIDE = 1_000
"""The console width `--wide` gives: room for every column (the terminal wraps the lines)."""


def stdout_console(width_when_piped: int = 160, wide: bool = False) -> Console:
    """A console for tables on stdout: the terminal's width (`COLUMNS` when piped), or a fixed one when
    piped; `wide`: room for every column (`traceview.cli.streams.console`: no emoji codes, `NO_COLOR`
    honoured)."""
    shown = console(width_when_piped=WIDE if wide else width_when_piped)
    if wide:
        shown.width = WIDE
    return shown


_JSON_UNSAFE = (
    0x7F,
    *range(0x80, 0xA0),
    0x61C,
    0x200E,
    0x200F,
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
)
_JSON_ESCAPES = {code: f"\\u{code:04x}" for code in _JSON_UNSAFE}


def write_json_text(text: str) -> None:
    """Write JSON text to stdout with DEL, C1 and bidi-override characters as `\\uXXXX` escapes: the same
    document (they only occur inside strings, where the escape means the same character), safe on a terminal.
    The encoder already escapes C0 controls."""
    sys.stdout.write((text if text.isascii() else text.translate(_JSON_ESCAPES)) + "\n")


def print_json(document: Any) -> None:
    """Write `document` to stdout as indented JSON (terminal-safe, `write_json_text`; names that are not
    UTF-8 shown as `\\xNN`, `traceview.reports.json.encode`)."""
    from traceview.reports.json.encode import json_text

    write_json_text(json_text(document))


def analyse(spec: RunSpec, options: RunOptions, quiet: bool) -> RunAnalysis:
    """The run's analysis through the map/reduce pipeline, with the load's progress bar on stderr."""
    from traceview.map.progress import load_progress
    from traceview.reduce.pipeline import analyze_files

    drawn = not quiet and may_be_terminal(sys.stderr)  # else rich is not imported at all
    with load_progress(stderr_console() if drawn else None) as progress:
        return analyze_files(spec, options, progress)


def check_thresholds(fail_on: Sequence[str] | None, known: Collection[str] | None = None) -> None:
    """Refuse a malformed `--fail-on`, or one naming a figure not in `known`, before any work is done."""
    from traceview.verdict.gates import check_metric, parse_threshold

    for text in fail_on or ():
        threshold = parse_threshold(text)
        if known is not None:
            check_metric(threshold, known)


def run_inputs(spec: RunSpec, options: RunOptions) -> list[str | Path]:
    """Every input file of the run `spec` names (traces, NCCL logs, `run.json`): what no output may be."""
    from traceview.core.location import is_url
    from traceview.load.inputs import resolve_trace_files

    specs = [spec] if isinstance(spec, str | Path) else list(spec)
    if any(is_url(one) for one in specs):
        return []
    files: list[str | Path] = [*resolve_trace_files(spec, options.listed_traces), *options.nccl_logs]  # type: ignore[list-item]
    return [*files, *([options.manifest] if options.manifest else []), *specs]


def gate(
    figures: Mapping[str, float | None],
    fail_on: Sequence[str] | None,
    withheld: Mapping[str, str] | None = None,
) -> list[str]:
    """Raise `ThresholdCrossed` when a `--fail-on` threshold fires on `figures`; else the thresholds not
    evaluated (`not evaluated: METRIC (why)`: a figure withheld or absent), for the caller to end on
    (exit 4)."""
    from traceview.verdict.gates import crossings, not_evaluated, parse_threshold

    thresholds = [parse_threshold(text) for text in fail_on or ()]
    present = {name: value for name, value in figures.items() if value is not None}
    fired = crossings([t for t in thresholds if t.metric in present], present)
    if fired:
        detail = "; ".join(f"{c.threshold} (measured {c.measured:.4g})" for c in fired)
        raise ThresholdCrossed(f"threshold crossed: {detail}")
    return not_evaluated(thresholds, figures, withheld)


def finish(analysis: RunAnalysis, fail_on: Sequence[str] | None) -> None:
    """After rendering: the threshold gate (exit 1), then a partial run (exit 4), each in one line."""
    unevaluated = gate(analysis.gate_figures(), fail_on, analysis.withheld())
    nccl = analysis.nccl
    skipped = [*analysis.header.skipped, *(nccl.skipped if nccl else ()), *(nccl.foreign if nccl else ())]
    if skipped:
        raise PartialRun(f"analysed without {len(skipped)} input(s), each named above with the reason")
    lacking = promised_ranks_lacking(analysis.header)
    if lacking or unevaluated:
        raise PartialRun("; ".join([*unevaluated, *([lacking] if lacking else [])]))


def promised_ranks_lacking(header: RunHeader) -> str | None:
    """`ranks 2-7 not read: ...` when a folder, a glob or a run.json promises ranks (its world size) it
    lacks; None for a trace given alone (one rank of N: said beside the verdict, exit 0) or a whole run."""
    from traceview.core.ranks import absent_ranks, rank_ranges

    absent = absent_ranks(header.ranks, header.world_size)
    alone = header.manifest is None and len(header.files) == 1 and Path(header.source).is_file()
    if not absent or alone:
        return None
    return (
        f"rank(s) {rank_ranges(absent)} not read: the run has {len(header.ranks)} of world size "
        f"{header.world_size}"
    )


def report_skipped(analysis: RunAnalysis) -> None:
    """Name every input the run was analysed without, one line each, on stderr (NCCL logs that could not be
    read, and those of another job, included)."""
    from traceview.load.non_traces import ignored_line

    ignored = ignored_line(analysis.header.ignored)
    if ignored:
        say(f"traceview: note: {printable(ignored)}")
    for path, reason in analysis.header.skipped:
        say(f"traceview: warning: skipped {printable(path)}: {printable(reason)}")
    for _, reason in analysis.nccl.skipped if analysis.nccl else ():
        say(f"traceview: warning: NCCL log skipped: {printable(reason)}")
    for path, reasons in analysis.nccl.foreign if analysis.nccl else ():
        say(f"traceview: warning: NCCL log set apart, another job's: {printable(path)}: {printable(reasons)}")


def report_warnings(analysis: RunAnalysis) -> None:
    """Every warning of the run (what a parser recovered from, a clock placed without its base, another job
    set apart), one line each, on stderr: for the commands whose output has no place for them."""
    for warning in analysis.header.warnings:
        say(f"traceview: warning: {printable(warning)}")


def write_text(path: Path, text: str) -> int:
    """Write an output file atomically (`traceview.core.output`); a path that cannot be written is a usage
    error naming it. Returns the bytes written."""
    from traceview.core.output import write_output

    return write_output(path, text)


def size_text(size_bytes: int) -> str:
    """A file's size for the `wrote ...` line: `5.1 MB`, `12 kB`, `812 bytes`."""
    if size_bytes >= 1_000_000:
        return f"{size_bytes / 1e6:.1f} MB"
    return f"{size_bytes / 1e3:.0f} kB" if size_bytes >= 1_000 else f"{size_bytes} bytes"
