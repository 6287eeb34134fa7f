"""`traceview hang DUMPS... [--json] [--nccl-log LOG]`: PyTorch Flight Recorder dumps of one job read together
(docs/metrics.md, "Hang forensics"): the first line names the earliest place where the ranks stop agreeing.

Exit codes: 0 the ranks agree (or only unsure findings); 1 a divergence; 2 bad input (nothing could be read);
4 some ranks' dumps missing or unreadable (each named; the others analysed). 1 outranks 4.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from traceview.cli.app import print_json, say, stdout_console
from traceview.cli.base import Command, WideOpt
from traceview.core.errors import PartialRun, ThresholdCrossed
from traceview.core.sanitize import printable


class Hang(Command):
    """Read PyTorch Flight Recorder dumps (one per rank) and name the rank and collective where the job
    stopped agreeing: one table per process group, divergences earliest first."""

    name = "hang"

    def run(
        self,
        dumps: Annotated[
            list[str],
            typer.Argument(
                metavar="DUMPS...",
                help="Flight Recorder dumps (pickle or JSON, plain or compressed): files, folders, globs, "
                "URLs.",
            ),
        ],
        json_output: Annotated[
            bool, typer.Option("--json", help="Print the analysis as JSON instead.")
        ] = False,
        nccl_logs: Annotated[
            list[Path] | None,
            typer.Option(
                "--nccl-log", help="An NCCL_DEBUG log (or a folder of logs) of the same job; repeatable."
            ),
        ] = None,
        wide: WideOpt = False,
    ) -> None:
        """Read Flight Recorder dumps and name where the ranks stopped agreeing."""
        from traceview.flight_recorder.job import hang_job

        analysis = hang_job(dumps, nccl_logs or ())
        for dump in analysis.unread:
            say(f"traceview: warning: dump skipped: {printable(dump.path)}: {printable(dump.reason)}")
        if json_output:
            from traceview.reports.json.hang import hang_document

            print_json(hang_document(analysis))
        else:
            from traceview.reports.text.hang import render_hang

            render_hang(analysis, stdout_console(200, wide=wide))
        if analysis.verdict == "divergence":
            raise ThresholdCrossed(f"divergence: {analysis.findings[0].sentence}")
        if analysis.partial:
            raise PartialRun(_partial_line(len(analysis.unread), analysis.missing_ranks))


def _partial_line(unread: int, missing: Sequence[int]) -> str:
    """The one line of a partial read: the unreadable dumps and the ranks without one, each said when any."""
    parts = [f"{unread} dump(s) could not be read"] if unread else []
    parts += [f"no dump for rank(s) {', '.join(map(str, missing))}"] if missing else []
    return "partial: " + ("; ".join(parts) or "some ranks' dumps are missing")
