"""`traceview export`: the whole run as one Chrome/Perfetto trace on the aligned clock (docs/metrics.md,
"Export")."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from traceview.cli.app import analyse, app, finish, report_skipped, report_warnings, say
from traceview.cli.options import (
    CommPatternOpt,
    ComputePatternOpt,
    QuietOpt,
    RanksPerHostOpt,
    RunsArg,
    WorkersOpt,
    options_from,
    run_spec,
)
from traceview.core.errors import UsageError
from traceview.core.sanitize import printable


@app.command()
def export(
    runs: RunsArg,
    output: Annotated[
        Path, typer.Option("-o", "--output", help="Where to write the trace (.json, or .json.gz compressed).")
    ] = Path("run.perfetto.json.gz"),
    ranks: Annotated[
        str | None, typer.Option("--ranks", help="Ranks to export, e.g. 0-7,12 (default all).")
    ] = None,
    steps: Annotated[
        str | None, typer.Option("--steps", help="Steps to export, e.g. 3-5 (default all).")
    ] = None,
    window: Annotated[
        str | None,
        typer.Option("--window", help="START:END in ms since the run's first step, aligned clock."),
    ] = None,
    max_events: Annotated[
        int,
        typer.Option(
            "--max-events", min=1, max=2**40, help="Events written at most (Perfetto loads about 2 GB)."
        ),
    ] = 5_000_000,
    comm_pattern: CommPatternOpt = None,
    compute_pattern: ComputePatternOpt = None,
    workers: WorkersOpt = None,
    quiet: QuietOpt = False,
    ranks_per_host: RanksPerHostOpt = None,
) -> None:
    """Write the whole run as one Chrome/Perfetto trace on the aligned clock (open it in ui.perfetto.dev)."""
    from traceview.export.perfetto import ExportBounds, export_run, parse_ranges, parse_window

    bounds = ExportBounds(
        ranks=parse_ranges(ranks, "--ranks") if ranks is not None else None,
        steps=parse_ranges(steps, "--steps") if steps is not None else None,
        window_ms=parse_window(window) if window is not None else None,
        max_events=max_events,
    )
    options = replace(options_from(comm_pattern, 1, compute_pattern), ranks_per_host=ranks_per_host)
    analysis = analyse(run_spec(runs), options, workers, "local", None, quiet)
    report_skipped(analysis)
    report_warnings(analysis)
    try:
        stats = export_run(analysis, output, bounds)
    except OSError as exc:
        raise UsageError(f"-o {printable(output)}: cannot write: {exc.strerror or exc}") from exc
    cut = f"; stopped at --max-events {max_events}" if stats.truncated else ""
    say(
        f"wrote {printable(output)}: {len(stats.ranks)} rank(s), {stats.events} events, "
        f"{stats.flows} collective flows, aligned clock{cut}"
    )
    finish(analysis, None)
