"""`traceview report RUN -o report.html`: the self-contained HTML report of a run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from traceview.cli.app import say, size_text, write_text
from traceview.cli.base import AnalysisCommand
from traceview.core.errors import UsageError
from traceview.core.sanitize import printable

PLOTLYJS = ("inline", "cdn")

if TYPE_CHECKING:
    from traceview.reduce.results import RunAnalysis


def _plotly_hint(plotlyjs: str) -> str:
    """What `--plotlyjs cdn` would save, said when plotly.js is inline."""
    if plotlyjs != "inline":
        return ", plotly.js from its CDN: the page needs the network"
    from plotly.offline import get_plotlyjs

    return f" with plotly.js inline; --plotlyjs cdn makes it {size_text(len(get_plotlyjs()))} smaller"


class Report(AnalysisCommand):
    """Write the self-contained HTML report of a run."""

    name = "report"
    outputs = ("output",)

    def check(self, plotlyjs: str = "inline", **_: object) -> None:
        """`--plotlyjs` is inline or cdn."""
        if plotlyjs not in PLOTLYJS:
            raise UsageError(f"--plotlyjs {printable(plotlyjs)!r}: takes 'inline' or 'cdn'")

    def render(
        self,
        analysis: RunAnalysis,
        output: Annotated[
            Path, typer.Option("-o", "--output", help="Where to write the HTML report.")
        ] = Path("report.html"),
        plotlyjs: Annotated[
            str, typer.Option("--plotlyjs", help="'inline' (default, works offline) or 'cdn'.")
        ] = "inline",
        open_page: Annotated[
            bool, typer.Option("--open", help="Open the report in the default browser once written.")
        ] = False,
    ) -> None:
        """Write the page, say where and what it says, open it when asked."""
        from traceview.reports.html.page import render_html

        size = write_text(output, render_html(analysis, plotlyjs=plotlyjs))
        say(
            f"wrote {printable(output)} ({size_text(size)}{_plotly_hint(plotlyjs)}): "
            f"{printable(analysis.verdict.sentence, 1000)}"
        )
        if open_page:
            import webbrowser

            webbrowser.open(output.resolve().as_uri())
