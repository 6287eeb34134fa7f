"""`traceview collectives RUN [--json]`: every communication kernel linked to its call, with bytes and busbw, and
the tables per process group, collective and size (through the map/reduce pipeline, like `summary`)."""

from __future__ import annotations

from typing import Annotated

import typer

from traceview.cli.app import (
    analyse,
    app,
    finish,
    print_json,
    report_skipped,
    report_warnings,
    stdout_console,
)
from traceview.cli.options import (
    CommPatternOpt,
    ComputePatternOpt,
    MaxTraceBytesOpt,
    QuietOpt,
    RunsArg,
    WorkersOpt,
    options_from,
    run_spec,
)


@app.command()
def collectives(
    runs: RunsArg,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the collectives as JSON instead.")
    ] = False,
    comm_pattern: CommPatternOpt = None,
    compute_pattern: ComputePatternOpt = None,
    workers: WorkersOpt = None,
    max_trace_bytes: MaxTraceBytesOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Every communication kernel linked to its collective call: bytes, busbw and the tables per group."""
    options = options_from(comm_pattern, 1, compute_pattern)
    analysis = analyse(run_spec(runs), options, workers, "local", None, quiet, max_trace_bytes)
    report_skipped(analysis)
    report_warnings(analysis)
    assert analysis.collectives is not None  # the reduce always builds the collective tables
    if json_output:
        from traceview.reports.json.summary import collectives_document

        print_json(collectives_document(analysis.collectives))
    else:
        from traceview.reports.text.collectives import render_collectives

        render_collectives(analysis.collectives, stdout_console(200))
    finish(analysis, None)
