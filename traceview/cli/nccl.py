"""`traceview nccl LOG... [--json]`: what NCCL_DEBUG logs say: versions, communicators, transports, collectives,
warnings."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from traceview.cli.app import print_json, say, stdout_console
from traceview.cli.base import Command
from traceview.core.errors import PartialRun, TraceviewError
from traceview.core.sanitize import printable


class Nccl(Command):
    """Summarise NCCL_DEBUG logs: versions, communicators, transports (degraded in red), collectives, warnings."""

    name = "nccl"

    def run(
        self,
        logs: Annotated[list[Path], typer.Argument(help="NCCL_DEBUG=INFO log file(s), plain text or .gz.")],
        json_output: Annotated[
            bool, typer.Option("--json", help="Print the logs' summary as JSON instead.")
        ] = False,
    ) -> None:
        """Summarise NCCL_DEBUG logs: versions, communicators, transports (degraded in red), collectives, warnings."""
        from traceview.nccl.join import join_nccl
        from traceview.parsers import nccl_log

        parsed, skipped = [], []
        for path in logs:
            try:
                parsed.append(nccl_log.parse(path))
            except TraceviewError as exc:
                if len(logs) == 1:
                    raise
                skipped.append((str(path), str(exc)))
                say(f"traceview: warning: NCCL log skipped: {printable(exc)}")
        if json_output:
            from traceview.reports.json.summary import nccl_document

            print_json(nccl_document(join_nccl(None, parsed, skipped)))
        else:
            from traceview.reports.text.nccl import render_nccl

            console = stdout_console(200)
            for log in parsed:
                render_nccl(log, console)
        if skipped:
            raise PartialRun(f"read without {len(skipped)} log(s) that could not be read (listed above)")
