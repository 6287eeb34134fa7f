"""The report's sections as data: each row names its template, its figures and when it is shown.

A new analysis adds one row here, one template `templates/section_<id>.html.j2` and a figure builder; the page
(`report.html.j2`) renders the rows in order. Figure ids are `fig-<name>` and must be unique across sections.
"""

from __future__ import annotations

from collections.abc import Callable

import plotly.graph_objects as go
from traceview.reports.html import (
    drilldown,
    figures,
    figures_bubbles,
    figures_collectives,
    figures_critical_path,
    figures_crossrank,
    figures_kernels,
    figures_nccl,
    figures_parallel,
    figures_prediction,
)

from traceview.core.records import record
from traceview.reduce.analysis import RunAnalysis


@record
class Section:
    """One section of the report."""

    id: str
    title: str
    template: str
    figures: Callable[[RunAnalysis], dict[str, go.Figure]]
    shown: Callable[[RunAnalysis], bool]
    empty: str = ""
    """The one line the page shows instead of the section when `shown` is false: why it is empty."""


def _budget_figures(analysis: RunAnalysis) -> dict[str, go.Figure]:
    return {"fig-budget": figures.budget_bars(analysis), "fig-gamma": figures.gamma_bars(analysis)}


SECTIONS: tuple[Section, ...] = (
    Section(
        "drilldown",
        "Steps and ranks",
        "section_drilldown.html.j2",
        drilldown.drilldown_figures,
        lambda a: a.budget.per_step.height > 0,
        "No (rank, step) window was analysed: nothing to draw per rank and step.",
    ),
    Section("time-budget", "Time budget", "section_budget.html.j2", _budget_figures, lambda a: True),
    Section(
        "collectives",
        "Collectives",
        "section_collectives.html.j2",
        figures_collectives.collective_figures,
        lambda a: a.collectives is not None and a.collectives.kernels.height > 0,
        "No communication kernel in the traces: a single-process run, or kernels no pattern names "
        "(--comm-pattern REGEX).",
    ),
    Section(
        "bubbles",
        "Bubbles",
        "section_bubbles.html.j2",
        figures_bubbles.bubble_figures,
        lambda a: a.bubbles is not None and a.bubbles.per_step.height > 0,
        "No step window with device activity: no idle time to split by cause.",
    ),
    Section(
        "critical-path",
        "Critical path",
        "section_critical_path.html.j2",
        figures_critical_path.critical_path_figures,
        lambda a: a.critical_path is not None and a.critical_path.per_step.height > 0,
        "No step window was analysed: no critical path to draw.",
    ),
    Section(
        "prediction",
        "Predicted gamma",
        "section_prediction.html.j2",
        figures_prediction.prediction_figures,
        lambda a: a.prediction is not None and a.prediction.calls.height > 0,
        "No collective call to price: the alpha-beta model needs communication kernels linked to their "
        "calls.",
    ),
    Section(
        "across-ranks",
        "Across ranks",
        "section_crossrank.html.j2",
        figures_crossrank.crossrank_figures,
        lambda a: a.crossrank is not None and a.crossrank.instances.height > 0,
        "No collective matched across ranks: the run has one rank, or no collective that two ranks both "
        "recorded.",
    ),
    Section(
        "kernels",
        "Kernels and operators",
        "section_kernels.html.j2",
        figures_kernels.kernel_figures,
        lambda a: a.kernels is not None and a.kernels.per_rank.height > 0,
    ),
    Section(
        "dimensions",
        "Parallelism dimensions",
        "section_dimensions.html.j2",
        figures_parallel.dimension_figures,
        lambda a: a.dimensions is not None and a.dimensions.groups.height > 0,
    ),
    Section(
        "moe",
        "MoE balance",
        "section_moe.html.j2",
        figures_parallel.moe_figures,
        lambda a: a.moe is not None and (a.moe.measurable or bool(a.moe.unmeasured)),
    ),
    Section(
        "roofline",
        "Communication roofline",
        "section_roofline.html.j2",
        figures_parallel.roofline_figures,
        lambda a: a.roofline is not None and a.roofline.missing is None,
    ),
    Section(
        "links-measured",
        "Links measured",
        "section_links_measured.html.j2",
        figures_parallel.fit_figures,
        lambda a: a.links_measured is not None and a.links_measured.classes.height > 0,
    ),
    Section(
        "replay",
        "Replay",
        "section_replay.html.j2",
        lambda a: {},
        lambda a: a.replay is not None,
        "No replay: no collective was matched on two ranks or more.",
    ),
    Section(
        "nccl",
        "NCCL log",
        "section_nccl.html.j2",
        figures_nccl.nccl_figures,
        lambda a: a.nccl is not None,
        "No NCCL_DEBUG log given or found in the run folder (NCCL_DEBUG=INFO writes them; pass them with "
        "--nccl-log).",
    ),
    Section(
        "hang",
        "Hang forensics",
        "section_hang.html.j2",
        lambda a: {},
        lambda a: a.flight_recorder is not None,
        "No Flight Recorder dump given (pass them with --flight-recorder, or list them in run.json's "
        "flight_recorder).",
    ),
)
