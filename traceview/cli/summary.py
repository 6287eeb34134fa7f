"""`traceview summary RUN [--json]`: the verdict, the advice and the time budget in the terminal, or the
versioned JSON summary (docs/json-schema.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from traceview.cli.app import stdout_console, write_json_text
from traceview.cli.base import AnalysisCommand, WideOpt

if TYPE_CHECKING:
    from traceview.reduce.results import RunAnalysis


class Summary(AnalysisCommand):
    """Terminal summary of a run: the verdict first, then the time budget."""

    name = "summary"

    def render(
        self,
        analysis: RunAnalysis,
        json_output: Annotated[
            bool, typer.Option("--json", help="Print the versioned JSON summary instead.")
        ] = False,
        full: Annotated[
            bool,
            typer.Option(
                "--full",
                help="With --json: list every collective instance (by default: those of largest skew).",
            ),
        ] = False,
        wide: WideOpt = False,
    ) -> None:
        """The terminal summary, or the JSON document."""
        if json_output:
            from traceview.reports.json.summary import render_json

            write_json_text(render_json(analysis, full=full))
        else:
            from traceview.reports.text.summary import render_summary

            render_summary(analysis, stdout_console(wide=wide))
