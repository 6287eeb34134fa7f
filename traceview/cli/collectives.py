"""`traceview collectives RUN [--json]`: every communication kernel linked to its call, with bytes and busbw,
and the tables per process group, collective and size (through the map/reduce pipeline, like `summary`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from traceview.cli.app import print_json, stdout_console
from traceview.cli.base import AnalysisCommand, WideOpt

if TYPE_CHECKING:
    from traceview.reduce.results import RunAnalysis


class Collectives(AnalysisCommand):
    """Every communication kernel linked to its collective call: bytes, busbw and the tables per group."""

    name = "collectives"
    prints_warnings = True

    def render(
        self,
        analysis: RunAnalysis,
        json_output: Annotated[
            bool, typer.Option("--json", help="Print the collectives as JSON instead.")
        ] = False,
        wide: WideOpt = False,
    ) -> None:
        """The collective tables, or their JSON object."""
        assert analysis.collectives is not None  # the reduce always builds the collective tables
        if json_output:
            from traceview.reports.json.summary import collectives_document

            print_json(collectives_document(analysis.collectives))
        else:
            from traceview.reports.text.collectives import render_collectives

            render_collectives(analysis.collectives, stdout_console(200, wide=wide))
