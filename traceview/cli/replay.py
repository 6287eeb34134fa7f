"""`traceview replay RUN [--lever ...] [--json]`: the run's own step skeletons replayed, `as_recorded`'s
error, and one replay per lever (docs/metrics.md, "Replay"; through the map/reduce pipeline, like
`summary`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from traceview.cli.app import print_json, stdout_console
from traceview.cli.base import AnalysisCommand

if TYPE_CHECKING:
    from traceview.reduce.results import RunAnalysis


class Replay(AnalysisCommand):
    """Replay the run's own step skeletons: the error as recorded, then what each lever would save
    (--lever no_straggler, comm:x2, compute:x2, comm_model, perfect_overlap, host_free, ranks:K)."""

    name = "replay"
    prints_warnings = True

    def render(
        self,
        analysis: RunAnalysis,
        json_output: Annotated[
            bool, typer.Option("--json", help="Print the replay JSON object instead.")
        ] = False,
    ) -> None:
        """The replay's sentence and levers, or its JSON object."""
        if json_output:
            from traceview.reports.json.replay import replay_document

            print_json(replay_document(analysis))
        else:
            from traceview.reports.text.replay import render_replay

            render_replay(analysis.replay, stdout_console(200))
