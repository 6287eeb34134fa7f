"""`traceview export`: the whole run as one Chrome/Perfetto trace on the aligned clock (docs/metrics.md,
"Export")."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from traceview.cli.app import say, size_text
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
    outputs = ("output",)

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
        """Write the trace (atomically: `traceview.core.output`) and say what it holds; an export of nothing
        is a usage error, and writes nothing."""
        from traceview.core.output import atomic_output
        from traceview.export.perfetto import check_selection, export_run

        bounds = _bounds(ranks, steps, window, max_events)
        check_selection(analysis, bounds)
        with atomic_output(output) as temporary:
            stats = export_run(analysis, temporary, bounds)
            if stats.events == 0:
                chosen = ", ".join(f"{flag} {value}" for flag, value in self._chosen(ranks, steps, window))
                raise UsageError(f"nothing to export: no event of the run lies within {chosen or 'the run'}")
            size = temporary.stat().st_size
        cut = f"; stopped at --max-events {max_events}" if stats.truncated else ""
        say(
            f"wrote {printable(output)} ({size_text(size)}): {len(stats.ranks)} rank(s), {stats.events} "
            f"events, "
            f"{stats.flows} collective flows, aligned clock{cut}"
        )

    @staticmethod
    def _chosen(ranks: str | None, steps: str | None, window: str | None) -> list[tuple[str, str]]:
        given = (("--ranks", ranks), ("--steps", steps), ("--window", window))
        return [(flag, printable(value)) for flag, value in given if value is not None]
