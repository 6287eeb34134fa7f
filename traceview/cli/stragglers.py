"""`traceview stragglers RUN [--json]`: collective instances matched across ranks on aligned clocks, skew,
wait, and the straggler(s) with a cause (through the map/reduce pipeline, like `summary`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from traceview.cli.app import print_json, stdout_console
from traceview.cli.base import AnalysisCommand, WideOpt

if TYPE_CHECKING:
    from traceview.reduce.results import RunAnalysis


class Stragglers(AnalysisCommand):
    """Across ranks: matched collectives, host clock offsets, skew, wait, and the straggler(s)
    with a cause."""

    name = "stragglers"
    prints_warnings = True

    def render(
        self,
        analysis: RunAnalysis,
        json_output: Annotated[
            bool, typer.Option("--json", help="Print the across-ranks JSON object instead.")
        ] = False,
        wide: WideOpt = False,
    ) -> None:
        """The across-ranks tables, or their JSON object."""
        assert analysis.crossrank is not None  # the reduce always runs the cross-rank analysis
        if json_output:
            from traceview.reports.json.summary import crossrank_document

            print_json(crossrank_document(analysis.crossrank))
        else:
            from traceview.reports.text.stragglers import render_crossrank

            render_crossrank(analysis.crossrank, stdout_console(200, wide=wide))
