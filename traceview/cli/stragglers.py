"""`traceview stragglers RUN [--json]`: collective instances matched across ranks on aligned clocks, skew, wait,
and the straggler(s) with a cause (through the map/reduce pipeline, like `summary`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated

import typer

from traceview.cli.app import (
    analyse,
    app,
    check_thresholds,
    finish,
    gate,
    print_json,
    report_skipped,
    report_warnings,
    stdout_console,
)
from traceview.cli.options import (
    CommPatternOpt,
    ComputePatternOpt,
    FailOnOpt,
    MaxTraceBytesOpt,
    QuietOpt,
    RanksPerHostOpt,
    RunsArg,
    WorkersOpt,
    options_from,
    run_spec,
)


@app.command()
def stragglers(
    runs: RunsArg,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the across-ranks JSON object instead.")
    ] = False,
    ranks_per_host: RanksPerHostOpt = None,
    comm_pattern: CommPatternOpt = None,
    compute_pattern: ComputePatternOpt = None,
    fail_on: FailOnOpt = None,
    workers: WorkersOpt = None,
    max_trace_bytes: MaxTraceBytesOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Across ranks: matched collectives, host clock offsets, skew, wait, and the straggler(s) with a cause."""
    check_thresholds(fail_on)
    options = replace(options_from(comm_pattern, 1, compute_pattern), ranks_per_host=ranks_per_host)
    analysis = analyse(run_spec(runs), options, workers, "local", None, quiet, max_trace_bytes)
    report_skipped(analysis)
    report_warnings(analysis)
    assert analysis.crossrank is not None  # the reduce always runs the cross-rank analysis
    if json_output:
        from traceview.reports.json.summary import crossrank_document

        print_json(crossrank_document(analysis.crossrank))
    else:
        from traceview.reports.text.stragglers import render_crossrank

        render_crossrank(analysis.crossrank, stdout_console(200))
    gate(analysis.crossrank.gate_figures(), fail_on)
    finish(analysis, None)
