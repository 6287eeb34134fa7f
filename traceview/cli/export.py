"""`traceview export`: the whole run as one Chrome/Perfetto trace on the aligned clock (docs/metrics.md,
"Export")."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from traceview.cli.app import say
from traceview.cli.base import AnalysisCommand
from traceview.core.errors import UsageError
from traceview.core.sanitize import printable

if TYPE_CHECKING:
    from traceview.export.perfetto import ExportBounds
    from traceview.reduce.results import RunAnalysis

RanksOpt = Annotated[str | None, typer.Option("--ranks", help="Ranks to export, e.g. 0-7,12 (default all).")]
StepsOpt = Annotated[str | None, typer.Option("--steps", help="Steps to export, e.g. 3-5 (default all).")]
WindowOpt = Annotated[
    str | None, typer.Option("--window", help="START:END in ms since the run's first step, aligned clock.")
]
MaxEventsOpt = Annotated[
    int,
    typer.Option(
        "--max-events", min=1, max=2**40, help="Events written at most (Perfetto loads about 2 GB)."
    ),
]


def _bounds(ranks: str | None, steps: str | None, window: str | None, max_events: int) -> ExportBounds:
    """The export's bounds from its options; a malformed one is a usage error."""
    from traceview.export.perfetto import ExportBounds, parse_ranges, parse_window

    return ExportBounds(
        ranks=parse_ranges(ranks, "--ranks") if ranks is not None else None,
        steps=parse_ranges(steps, "--steps") if steps is not None else None,
        window_ms=parse_window(window) if window is not None else None,
        max_events=max_events,
    )


class Export(AnalysisCommand):
    """Write the whole run as one Chrome/Perfetto trace on the aligned clock (open it in ui.perfetto.dev)."""

    name = "export"
    prints_warnings = True

    def check(
        self, ranks: str | None = None, steps: str | None = None, window: str | None = None, **_: object
    ) -> None:
        """The bounds parse before any file is read."""
        _bounds(ranks, steps, window, 1)

    def render(
        self,
        analysis: RunAnalysis,
        output: Annotated[
            Path,
            typer.Option("-o", "--output", help="Where to write the trace (.json, or .json.gz compressed)."),
        ] = Path("run.perfetto.json.gz"),
        ranks: RanksOpt = None,
        steps: StepsOpt = None,
        window: WindowOpt = None,
        max_events: MaxEventsOpt = 5_000_000,
    ) -> None:
        """Write the trace and say what it holds."""
        from traceview.export.perfetto import export_run

        try:
            stats = export_run(analysis, output, _bounds(ranks, steps, window, max_events))
        except OSError as exc:
            raise UsageError(f"-o {printable(output)}: cannot write: {exc.strerror or exc}") from exc
        cut = f"; stopped at --max-events {max_events}" if stats.truncated else ""
        say(
            f"wrote {printable(output)}: {len(stats.ranks)} rank(s), {stats.events} events, "
            f"{stats.flows} collective flows, aligned clock{cut}"
        )
