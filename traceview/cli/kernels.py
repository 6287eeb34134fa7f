"""`traceview kernels RUN [--json] [--rank R] [--step S] [--top N]`: where the compute time went, per rank and
step: kernel classes, top kernels and operators, launches, the host side, the roofline, the slow rank's
kernels (through the map/reduce pipeline, like `summary`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from traceview.cli.app import print_json, stdout_console
from traceview.cli.base import AnalysisCommand, WideOpt
from traceview.core.errors import UsageError

if TYPE_CHECKING:
    from traceview.reduce.results import RunAnalysis

TOP_DEFAULT = 10


class Kernels(AnalysisCommand):
    """Where the compute time went: kernel classes, top kernels and operators, launches, FLOP/s, the slow
    ranks."""

    name = "kernels"
    prints_warnings = True

    def check(self, **own: object) -> None:
        """`--top` must be at least 1."""
        top = own.get("top")
        if isinstance(top, int) and top < 1:
            raise UsageError(f"--top must be at least 1, got {top}")

    def render(
        self,
        analysis: RunAnalysis,
        json_output: Annotated[
            bool, typer.Option("--json", help="Print the kernels JSON object instead.")
        ] = False,
        rank: Annotated[
            int | None,
            typer.Option("--rank", help="One rank: its tables, and its kernels against the median rank's."),
        ] = None,
        step: Annotated[
            int | None,
            typer.Option("--step", help="One step (its ProfilerStep number): its classes and kernels."),
        ] = None,
        top: Annotated[
            int, typer.Option("--top", help="Kernels and operators listed per rank (the summary keeps 24).")
        ] = TOP_DEFAULT,
        wide: WideOpt = False,
    ) -> None:
        """The kernels tables, or their JSON object."""
        kernels = analysis.kernels
        if kernels is None:
            raise UsageError("the run has no kernels analysis")
        ranks = analysis.header.ranks
        if rank is not None and rank not in ranks:
            raise UsageError(f"--rank {rank}: the run has ranks {ranks[0]}-{ranks[-1]} ({len(ranks)} in all)")
        steps = set(kernels.parts.class_steps.get_column("step").to_list())
        if step is not None and step not in steps:
            raise UsageError(f"--step {step}: the run's steps are {', '.join(map(str, sorted(steps)))}")
        if json_output:
            from traceview.reports.json.kernels import kernels_document

            print_json(kernels_document(kernels, full=False, rank=rank, step=step, top=top))
        else:
            from traceview.reports.text.kernels import render_kernels

            explained = kernels.explain(rank) if rank is not None else None
            render_kernels(
                kernels, stdout_console(200, wide=wide), rank=rank, step=step, top=top, explained=explained
            )
