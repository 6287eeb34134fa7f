"""The `traceview` command: each subcommand is a thin parse -> analyse -> render.

Exit codes: 0 ok; 1 a `--fail-on` threshold was crossed; 2 bad input or usage; 3 an internal error.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from traceview.analysis import AnalysisOptions, RunAnalysis, analyze
from traceview.errors import ThresholdCrossed, TraceviewError
from traceview.inputs import load_run
from traceview.model import Run
from traceview.thresholds import crossings, parse_threshold

EXIT_OK, EXIT_THRESHOLD, EXIT_INPUT, EXIT_INTERNAL = 0, 1, 2, 3

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Where the time went in a distributed training job."
)
stderr = Console(stderr=True, soft_wrap=True)  # one line per message, never wrapped

RunArg = Annotated[str, typer.Argument(help="A trace file, a folder of per-rank traces, or a glob.")]
CommPatternOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--comm-pattern", help="Extra regex (or LIBRARY=REGEX) naming communication kernels; repeatable."
    ),
]
FailOnOpt = Annotated[
    list[str] | None,
    typer.Option("--fail-on", help="Exit 1 when a figure crosses it, e.g. 'exposed_gamma>0.5'; repeatable."),
]
WorkersOpt = Annotated[
    int | None, typer.Option("--workers", help="Processes for parsing ranks (default: CPUs).")
]


def load(run_spec: str, workers: int | None = None) -> Run:
    """Parse the run, with a progress bar on stderr when it is a terminal."""
    if not stderr.is_terminal:
        return load_run(run_spec, workers=workers)
    from rich.progress import Progress

    with Progress(console=stderr, transient=True) as progress:
        task = progress.add_task("reading traces", total=None)
        return load_run(
            run_spec,
            workers=workers,
            progress=lambda done, total: progress.update(task, completed=done, total=total),
        )


def options_from(comm_pattern: list[str] | None) -> AnalysisOptions:
    """Analysis options from the command line."""
    return AnalysisOptions(comm_patterns=tuple(comm_pattern or ()))


def gate(analysis: RunAnalysis, fail_on: list[str] | None) -> None:
    """Raise `ThresholdCrossed` when a `--fail-on` threshold fires."""
    thresholds = [parse_threshold(text) for text in fail_on or ()]
    fired = crossings(thresholds, analysis.gate_figures())
    if fired:
        detail = "; ".join(f"{c.threshold} (measured {c.measured:.4g})" for c in fired)
        raise ThresholdCrossed(f"threshold crossed: {detail}")


@app.command()
def summary(
    run: RunArg,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the versioned JSON summary instead.")
    ] = False,
    comm_pattern: CommPatternOpt = None,
    fail_on: FailOnOpt = None,
    workers: WorkersOpt = None,
) -> None:
    """Terminal summary of a run: the verdict first, then the time budget."""
    for text in fail_on or ():
        parse_threshold(text)
    analysis = analyze(load(run, workers), options_from(comm_pattern))
    if json_output:
        from traceview.reports.json_out import render_json

        sys.stdout.write(render_json(analysis) + "\n")
    else:
        from traceview.reports.terminal import render_summary

        render_summary(analysis, Console(width=None if sys.stdout.isatty() else 160))
    gate(analysis, fail_on)


@app.command()
def report(
    run: RunArg,
    output: Annotated[Path, typer.Option("-o", "--output", help="Where to write the HTML report.")] = Path(
        "report.html"
    ),
    plotlyjs: Annotated[
        str, typer.Option("--plotlyjs", help="'inline' (default, works offline) or 'cdn'.")
    ] = "inline",
    comm_pattern: CommPatternOpt = None,
    fail_on: FailOnOpt = None,
    workers: WorkersOpt = None,
) -> None:
    """Write the self-contained HTML report of a run."""
    from traceview.reports.html import render_html

    if plotlyjs not in ("inline", "cdn"):
        raise typer.BadParameter("--plotlyjs takes 'inline' or 'cdn'")
    for text in fail_on or ():
        parse_threshold(text)
    analysis = analyze(load(run, workers), options_from(comm_pattern))
    output.write_text(render_html(analysis, plotlyjs=plotlyjs), encoding="utf-8")
    stderr.print(
        f"wrote {output} ({output.stat().st_size / 1e6:.1f} MB): {analysis.verdict.sentence}",
        highlight=False,
        markup=False,
    )
    gate(analysis, fail_on)


@app.command()
def collectives(
    run: RunArg,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the collectives as JSON instead.")
    ] = False,
    comm_pattern: CommPatternOpt = None,
    workers: WorkersOpt = None,
) -> None:
    """Every communication kernel linked to its collective call: bytes, busbw and the tables per group."""
    from traceview.budget import classified_events
    from traceview.collective_tables import analyze_collectives
    from traceview.kernel_names import user_patterns

    patterns = user_patterns(tuple(comm_pattern or ()))
    loaded = load(run, workers)
    result = analyze_collectives(loaded, classified_events(loaded, patterns))
    if json_output:
        import msgspec

        from traceview.reports.json_out import collectives_document

        sys.stdout.write(
            msgspec.json.format(msgspec.json.encode(collectives_document(result)), indent=2).decode() + "\n"
        )
    else:
        from traceview.reports.collectives_terminal import render_collectives

        render_collectives(result, Console(width=None if sys.stdout.isatty() else 200))


def main() -> None:
    """Console entry point: run the app and map errors to exit codes, one line each, never a traceback."""
    try:
        app(standalone_mode=False)
    except ThresholdCrossed as exc:
        stderr.print(f"traceview: {exc}", markup=False, highlight=False)
        sys.exit(EXIT_THRESHOLD)
    except TraceviewError as exc:
        stderr.print(f"traceview: error: {exc}", markup=False, highlight=False)
        sys.exit(EXIT_INPUT)
    except (typer.Exit, SystemExit) as exc:
        code = getattr(exc, "exit_code", getattr(exc, "code", 0))
        sys.exit(code if isinstance(code, int) else EXIT_INPUT)
    except (typer.BadParameter, typer.Abort) as exc:
        stderr.print(f"traceview: error: {exc}", markup=False, highlight=False)
        sys.exit(EXIT_INPUT)
    except Exception as exc:
        if os.environ.get("TRACEVIEW_DEBUG"):
            raise
        stderr.print(
            f"traceview: internal error: {type(exc).__name__}: {exc} (TRACEVIEW_DEBUG=1 shows the traceback)",
            markup=False,
            highlight=False,
        )
        sys.exit(EXIT_INTERNAL)
