"""`traceview nccl LOG... [--json]`: what NCCL_DEBUG logs say, read as the jobs they come from (logs grouped
by their communicators' ids, each communicator merged over its ranks' logs), failures in the first line."""

from __future__ import annotations

from typing import Annotated

import typer

from traceview.cli.app import check_thresholds, gate, print_json, say, stdout_console
from traceview.cli.base import Command, FailOnOpt, WideOpt
from traceview.core.errors import PartialRun, TraceviewError
from traceview.core.sanitize import printable


class Nccl(Command):
    """Summarise NCCL_DEBUG logs as jobs: failures first, then each communicator merged over its ranks (ranks
    seen of its size, init, transports, channels, algorithms), collectives, warnings."""

    name = "nccl"

    def run(
        self,
        logs: Annotated[
            list[str],
            typer.Argument(help="NCCL_DEBUG=INFO logs: files (plain or compressed), folders of logs, globs."),
        ],
        json_output: Annotated[
            bool, typer.Option("--json", help="Print the logs' summary as JSON instead.")
        ] = False,
        fail_on: FailOnOpt = None,
        wide: WideOpt = False,
    ) -> None:
        """Summarise NCCL_DEBUG logs as jobs: failures first, then each communicator merged over its ranks."""
        from traceview.nccl.jobs import headline, jobs_gate_figures, nccl_jobs
        from traceview.nccl.join import join_nccl
        from traceview.nccl.problems import NCCL_GATE_FIGURES
        from traceview.options.run import nccl_log_files
        from traceview.parsers import nccl_log

        check_thresholds(fail_on, frozenset(NCCL_GATE_FIGURES))
        paths = nccl_log_files(logs)
        parsed, skipped = [], []
        for path in paths:
            try:
                parsed.append(nccl_log.parse(path))
            except TraceviewError as exc:
                if len(paths) == 1:
                    raise
                skipped.append((str(path), str(exc)))
                say(f"traceview: warning: NCCL log skipped: {printable(exc)}")
        jobs = nccl_jobs(parsed)
        first = headline(jobs, len(skipped))
        figures = jobs_gate_figures(jobs)
        if json_output:
            from traceview.reports.json.nccl import nccl_jobs_document

            print_json(nccl_jobs_document(join_nccl(None, parsed, skipped), jobs, first, figures))
        else:
            from traceview.reports.text.nccl import render_nccl_jobs

            render_nccl_jobs(jobs, first, stdout_console(200, wide=wide))
        unevaluated = gate(figures, fail_on)
        if skipped:
            raise PartialRun(f"read without {len(skipped)} log(s) that could not be read (listed above)")
        if unevaluated:
            raise PartialRun("; ".join(unevaluated))
