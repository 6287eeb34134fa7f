"""The diff report of `traceview compare -o` and the trend page of `traceview trend -o`: self-contained HTML
like the main report (the same Content-Security-Policy, plotly.js inline, figures as script-safe JSON
islands, every input string through Jinja2 autoescaping). Renders only: figures come from the results."""

from __future__ import annotations

import datetime as dt

import plotly.graph_objects as go
from traceview.reports.html.page import (
    _ENVIRONMENT,
    content_policy,
    figure_json,
    plotly_script,
    with_script_hashes,
)
from traceview.reports.text.compare import change_text, finding_change, note_text, p_text, value_text

from traceview.compare.trend import Trend
from traceview.compare.two_runs import Comparison
from traceview.core.version import __version__

BASELINE_COLOUR, CANDIDATE_COLOUR = "#0072B2", "#E69F00"  # Okabe-Ito (reports/html/figures.py)
_ENVIRONMENT.filters["value_text"] = lambda value, metric: value_text(metric, value)
_ENVIRONMENT.filters["change_text"] = change_text
_ENVIRONMENT.filters["finding_change"] = finding_change
_ENVIRONMENT.filters["p_text"] = p_text
_ENVIRONMENT.filters["note_text"] = note_text


def budget_figure(comparison: Comparison) -> go.Figure:
    """The time budget's run medians, baseline beside candidate, in ms."""
    frame = comparison.budgets
    figure = go.Figure()
    for column, name, colour in (
        ("baseline_us", "baseline", BASELINE_COLOUR),
        ("candidate_us", "candidate", CANDIDATE_COLOUR),
    ):
        values = [None if v is None else v / 1000 for v in frame.get_column(column).to_list()]
        figure.add_bar(x=frame.get_column("figure").to_list(), y=values, name=name, marker_color=colour)
    figure.update_layout(title="Time budget (median step)", yaxis_title="ms", barmode="group")
    return figure


def busbw_figure(comparison: Comparison) -> go.Figure:
    """Median bus bandwidth of each (collective, group, bucket) compared, baseline beside candidate."""
    rows = [f for f in comparison.findings if f.metric == "busbw_Bps" and (f.baseline or f.candidate)]
    figure = go.Figure()
    for attribute, name, colour in (
        ("baseline", "baseline", BASELINE_COLOUR),
        ("candidate", "candidate", CANDIDATE_COLOUR),
    ):
        values = [None if getattr(f, attribute) is None else getattr(f, attribute) / 1e9 for f in rows]
        figure.add_bar(x=[f.subject for f in rows], y=values, name=name, marker_color=colour)
    figure.update_layout(title="Bus bandwidth per collective", yaxis_title="GB/s", barmode="group")
    return figure


CHANGE_AXIS_PCT = 300.0
"""The changes chart's axis ends here: a larger change is drawn at the end with its value written, so one
outlier never flattens the other bars."""


def changes_figure(comparison: Comparison) -> go.Figure:
    """The relative change of every judged finding, regressions red, improvements green."""
    colours = {"regression": "#D55E00", "improvement": "#0072B2", "not significant": "#bbbbbb"}
    rows = [f for f in comparison.findings if f.outcome in colours and f.change_pct is not None][:40]
    figure = go.Figure(
        go.Bar(
            x=[max(-CHANGE_AXIS_PCT, min(CHANGE_AXIS_PCT, f.change_pct or 0.0)) for f in rows],
            text=[f"{f.change_pct:+.0f}%" for f in rows],
            textposition="auto",
            y=[f"{f.metric} · {f.subject}" for f in rows],
            orientation="h",
            marker_color=[colours[f.outcome] for f in rows],
        )
    )
    figure.update_layout(
        title="Changes beyond the threshold (%)",
        xaxis_title="change %",
        height=max(300, 28 * len(rows) + 120),
    )
    return figure


def _page(
    template: str, figures: dict[str, go.Figure], generated: dt.datetime | None, **context: object
) -> str:
    inline_js, cdn_url = plotly_script("inline")
    page = _ENVIRONMENT.get_template(template).render(
        figures={figure_id: figure_json(f) for figure_id, f in figures.items()},
        plotly_inline=inline_js,
        plotly_cdn=cdn_url,
        csp=content_policy(cdn=False),
        version=__version__,
        generated=(generated or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%d %H:%M:%S UTC"),
        **context,
    )
    return with_script_hashes(page)


def render_compare_html(comparison: Comparison, generated: dt.datetime | None = None) -> str:
    """The diff report page: verdict first, top findings with their subject, budgets, busbw, scaling."""
    figures = {"fig-changes": changes_figure(comparison), "fig-budget": budget_figure(comparison)}
    if any(f.metric == "busbw_Bps" and (f.baseline or f.candidate) for f in comparison.findings):
        figures["fig-busbw"] = busbw_figure(comparison)
    noise = comparison.not_significant
    return _page("compare.html.j2", figures, generated, comparison=comparison, noise=noise)


def _dates(starts: list[float | None]) -> list[str] | None:
    """The runs' recorded starts as ISO dates for a date axis; None when any is unknown."""
    if any(start is None for start in starts):
        return None
    return [
        dt.datetime.fromtimestamp((s or 0.0) / 1e6, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S") for s in starts
    ]


def trend_figure(found: Trend, metric: str) -> go.Figure:
    """One metric over the series on a date axis (the runs' recorded starts; runs in order when a start is
    unknown), each point named by its run's label, change points as dashed vertical lines."""
    frame = found.values.filter(found.values.get_column("metric") == metric)
    in_ms = metric.endswith("_us") or metric.startswith("kernel:")  # times drawn in milliseconds
    values = frame.get_column("value").to_list()
    values = [None if v is None else v / 1e3 for v in values] if in_ms else values
    labels = frame.get_column("label").to_list()
    dates = _dates(frame.get_column("started_us").to_list())
    x = dates if dates is not None else labels
    scatter = go.Scatter(
        x=x,
        y=values,
        mode="lines+markers",
        name=metric,
        text=labels,
        hovertemplate="%{text}<br>%{y}<extra></extra>",
    )
    figure = go.Figure(scatter)
    for change in (c for c in found.changes if c.metric in (metric, "job")):
        if dates is None:
            figure.add_vline(x=change.index - 0.5, line_dash="dash", line_color="#D55E00")
        else:  # halfway between the last run before the change and the first after it
            before, after = (dt.datetime.fromisoformat(dates[i]) for i in (change.index - 1, change.index))
            figure.add_vline(
                x=(before + (after - before) / 2).isoformat(), line_dash="dash", line_color="#D55E00"
            )
    axis = {"xaxis_title": "run date (UTC)", "xaxis_type": "date"} if dates else {"xaxis_type": "category"}
    shown = f"{metric.removesuffix('_us')} (ms)" if in_ms else metric
    figure.update_layout(title=shown, yaxis_title=shown, **axis)
    return figure


def render_trend_html(found: Trend, generated: dt.datetime | None = None) -> str:
    """The trend page: verdict, one plot per metric with its change points, the latest run's judgement."""
    metrics = found.values.get_column("metric").unique(maintain_order=True).to_list()
    figures = {f"fig-trend-{i}": trend_figure(found, metric) for i, metric in enumerate(metrics)}
    return _page("trend.html.j2", figures, generated, trend=found)
