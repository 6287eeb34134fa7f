"""The notebook's pictures (`traceview.Analysis.plot`): the report's own plotly figures, one method each,
shown inline by Jupyter (a plotly figure draws itself). Renders only: times in milliseconds, every figure
from the results; a run without what a figure shows raises a `UsageError` saying so."""

from __future__ import annotations

import plotly.graph_objects as go
from traceview.reports.html.figures import budget_bars, timeline_figure
from traceview.reports.html.figures_collectives import collective_figures
from traceview.reports.html.figures_crossrank import wait_bars

from traceview.core.errors import UsageError
from traceview.reduce.results import RunAnalysis


class Plots:
    """`result.plot.<name>()`: plotly figures of one run (`time_budget`, `stragglers`, `collectives`,
    `timeline`)."""

    def __init__(self, analysis: RunAnalysis) -> None:
        self._analysis = analysis

    def __repr__(self) -> str:
        return "<traceview plots: time_budget(), stragglers(), collectives(), timeline()>"

    def time_budget(self) -> go.Figure:
        """Each rank's median step split into compute, overlapped, exposed communication and idle (ms)."""
        if self._analysis.budget.per_rank.height == 0:
            raise UsageError("plot.time_budget: the run has no step to draw")
        return budget_bars(self._analysis)

    def stragglers(self) -> go.Figure:
        """The time each rank waited for later peers (ms), stragglers in red."""
        crossrank = self._analysis.crossrank
        if crossrank is None or crossrank.per_rank.height == 0:
            raise UsageError("plot.stragglers: no collective was matched across ranks")
        return wait_bars(crossrank)

    def timeline(self) -> go.Figure:
        """The offered steps of every rank on one axis in ms from the run's start (the report's step view)."""
        timeline = self._analysis.timeline
        if timeline is None or timeline.drawn_segments == 0:
            raise UsageError("plot.timeline: the run has no step with device or host activity to draw")
        return timeline_figure(timeline)

    def collectives(self, collective: str | None = None) -> go.Figure:
        """Bus bandwidth against message size of `collective` (default: the first with a known busbw)."""
        found = collective_figures(self._analysis)
        if not found:
            raise UsageError("plot.collectives: no collective kernel with a known bus bandwidth")
        if collective is None:
            return next(iter(found.values()))
        for figure in found.values():
            if collective.lower() in str(figure.layout.title.text).lower():
                return figure
        raise UsageError(f"plot.collectives: no collective {collective!r} in the run")
