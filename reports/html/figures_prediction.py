"""Figures of the predicted-gamma section: the gamma model's strong-scaling figure made real (gamma against
the worker count K, log axes, break-even line at 1, the model's curve for this hardware, the run's measured
and predicted points) and the factors of measured / predicted gamma. No computation beyond unit conversion.
"""

from __future__ import annotations

import plotly.graph_objects as go
from traceview.reports.html.figures import LAYOUT

from traceview.prediction.gamma import Prediction
from traceview.reduce.analysis import RunAnalysis


def scaling_figure(prediction: Prediction) -> go.Figure | None:
    """gamma_pred against K at the run's global batch, with gamma = 1 and the run's points; None without a
    what-if (no predicted gamma)."""
    what_if = prediction.what_if
    if what_if is None:
        return None
    curve = what_if.curve
    figure = go.Figure()
    figure.add_trace(
        go.Scatter(
            x=curve["K"].to_list(),
            y=curve["gamma_pred"].to_list(),
            mode="lines+markers",
            name="alpha-beta model, this hardware",
            hovertemplate="K = %{x}<br>gamma_pred = %{y:.3g}<extra></extra>",
        )
    )
    k_values = curve["K"].to_list()
    figure.add_trace(
        go.Scatter(
            x=[min(k_values), max(k_values)],
            y=[1, 1],
            mode="lines",
            name="break-even (gamma = 1)",
            line={"dash": "dash", "color": "#999999"},
        )
    )
    points = (
        ("predicted, this run", prediction.run.get("median_gamma_pred"), "#0072B2"),
        ("measured, this run", prediction.run.get("median_gamma"), "#D55E00"),
    )
    for name, value, colour in points:
        if value is not None and value > 0:
            figure.add_trace(
                go.Scatter(
                    x=[what_if.workers],
                    y=[value],
                    mode="markers",
                    name=name,
                    marker={"size": 12, "color": colour},
                )
            )
    figure.update_layout(
        title="gamma against workers K (strong scaling at the run's global batch)",
        xaxis={"type": "log", "title": "workers K (data-parallel group size)"},
        yaxis={"type": "log", "title": "gamma = T_comm / T_comp"},
        legend={"orientation": "h", "yanchor": "top", "y": -0.28, "x": 0},
        **LAYOUT,
    )
    return figure


def factor_figure(prediction: Prediction) -> go.Figure:
    """Each factor's effect on measured / predicted gamma (value ** exponent), log axis; 1 = no effect."""
    shown = [(name, effect) for _, name, _, effect in prediction.factors if effect is not None]
    names, effects = [name for name, _ in shown], [effect for _, effect in shown]
    figure = go.Figure(go.Bar(x=effects, y=names, orientation="h", hovertemplate="x%{x:.3g}<extra></extra>"))
    figure.update_layout(
        title="What moves measured gamma away from predicted (effect on the ratio; 1 = none)",
        xaxis={"type": "log", "title": "effect on gamma / gamma_pred"},
        **LAYOUT,
    )
    return figure


def prediction_figures(analysis: RunAnalysis) -> dict[str, go.Figure]:
    """`fig-gamma-scaling` (when there is a predicted gamma) and `fig-gamma-factors`."""
    if analysis.prediction is None:
        return {}
    found = {"fig-gamma-factors": factor_figure(analysis.prediction)}
    scaling = scaling_figure(analysis.prediction)
    return found if scaling is None else {"fig-gamma-scaling": scaling, **found}
