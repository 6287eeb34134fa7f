"""The verdict card a notebook shows for an analysis (`traceview.Analysis._repr_html_`): the verdict's label
and sentence and the headline figures, as a small HTML fragment with inline styles (a notebook has no
stylesheet of ours). Renders only: every figure comes from the results; input text is HTML-escaped."""

from __future__ import annotations

from html import escape

from traceview.core.sanitize import shown
from traceview.reduce.results import RunAnalysis

LABEL_COLOURS = {"compute-bound": "#009E73", "communication-bound": "#D55E00", "idle-bound": "#999999"}
"""The label's colour (Okabe-Ito, as the report's verdict); others grey-blue."""

HEADLINE_FIGURES: tuple[tuple[str, str, float, str], ...] = (
    ("step_us", "median step", 1e-3, "ms"),
    ("comp_us", "T_comp", 1e-3, "ms"),
    ("comm_us", "T_comm", 1e-3, "ms"),
    ("exposed_comm_us", "exposed communication", 1e-3, "ms"),
    ("gamma", "gamma = T_comm / T_comp", 1.0, ""),
    ("exposed_gamma", "exposed gamma", 1.0, ""),
    ("gamma_pred", "predicted gamma", 1.0, ""),
    ("stragglers", "stragglers", 1.0, ""),
)
"""(gate figure, its name, scale, unit): the rows of the card."""


def _value(value: float | None, scale: float, unit: str) -> str:
    if value is None:
        return "-"
    number = value * scale
    text = f"{number:.0f}" if unit == "" and float(number).is_integer() else f"{number:.3g}"
    return f"{text} {unit}".strip()


def _text(value: object) -> str:
    return escape(shown(str(value)))


CARD_RECOMMENDATIONS = 3
"""Recommendations the card lists (in their ranked order, the most saved first; `result.recommendations` holds
them all)."""


def _recommendations(analysis: RunAnalysis) -> str:
    rows = analysis.recommendation_rows()[:CARD_RECOMMENDATIONS]
    if not rows:
        return ""
    items = "".join(
        f"<li>{_text(row['sentence'])}"
        + (
            ""
            if row["time_per_step_us"] is None
            else f" <i>({row['time_per_step_us'] / 1e3:.3g} ms per step)</i>"
        )
        + "</li>"
        for row in rows
    )
    return f"<div style='margin-top:4px'>What to change:<ol style='margin:2px 0'>{items}</ol></div>"


def verdict_card(analysis: RunAnalysis) -> str:
    """The card: the run (source, ranks, steps), the verdict's label and sentence, the headline figures."""
    header, verdict = analysis.header, analysis.verdict
    figures, withheld = analysis.gate_figures(), analysis.withheld()
    steps = analysis.budget.per_step.get_column("step").n_unique() if analysis.budget.per_step.height else 0
    colour = LABEL_COLOURS.get(verdict.label, "#56B4E9")
    shown = verdict.gamma_pred_source and "gamma_pred" not in withheld
    source = {"gamma_pred": f" ({verdict.gamma_pred_source})"} if shown else {}
    rows = "".join(
        f"<tr><td style='padding:1px 12px 1px 0'>{name}{_text(source.get(key, ''))}</td>"
        f"<td style='text-align:right'>"
        f"{'withheld' if key in withheld else _value(figures.get(key), scale, unit)}</td></tr>"
        for key, name, scale, unit in HEADLINE_FIGURES
    )
    return (
        f"<div class='traceview-card' style='border-left:6px solid {colour};padding:6px 12px;"
        "font-family:sans-serif;max-width:60em'>"
        f"<div style='color:#555'>traceview: {_text(header.source)}, {len(header.ranks)} rank(s), {steps} "
        f"step(s)"
        "</div>"
        f"<div style='margin:4px 0'><b style='color:{colour}'>{_text(verdict.label)}</b> "
        f"{_text(verdict.sentence)}"
        "</div>"
        f"<table style='font-size:90%'>{rows}</table>{_recommendations(analysis)}</div>"
    )
