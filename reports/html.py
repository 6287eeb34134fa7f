"""The self-contained HTML report: a Jinja2 template, plotly figures as JSON data islands, plotly.js inline.

Every string from a trace reaches the page through Jinja2 autoescaping or through JSON whose `<`, `>` and `&` are
written as unicode escapes, so nothing in an input file can open a tag or end a script.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import plotly.graph_objects as go
from jinja2 import Environment, PackageLoader, select_autoescape

from traceview import __version__
from traceview.analysis import RunAnalysis
from traceview.reports.sections import SECTIONS



def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value / 1000:.3f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


CDN_URL = "https://cdn.plot.ly/plotly-{version}.min.js"
_ENVIRONMENT = Environment(
    loader=PackageLoader("traceview.reports", "templates"),
    autoescape=select_autoescape(["html", "j2"], default=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
_ENVIRONMENT.filters["ms"] = _ms
_ENVIRONMENT.filters["ratio"] = _ratio


def script_safe_json(data: Any) -> str:
    """JSON text safe inside a <script> element: `<`, `>`, `&` and line separators become unicode escapes."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False, default=str)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escaped)
    return text


def _figure_json(figure: go.Figure) -> str:
    return script_safe_json(json.loads(figure.to_json()))


def plotly_script(mode: str) -> tuple[str, str]:
    """(inline JS, CDN URL): exactly one is non-empty; `mode` is `inline` or `cdn`."""
    import plotly
    from plotly.offline import get_plotlyjs

    if mode == "cdn":
        return "", CDN_URL.format(version=plotly.__version__)
    return get_plotlyjs().replace("</script", "<\\/script"), ""


def render_html(analysis: RunAnalysis, plotlyjs: str = "inline", generated: dt.datetime | None = None) -> str:
    """The whole report page as one string."""
    inline_js, cdn_url = plotly_script(plotlyjs)
    shown = [section for section in SECTIONS if section.shown(analysis)]
    figure_data = {
        figure_id: _figure_json(figure) for section in shown for figure_id, figure in section.figures(analysis).items()
    }
    template = _ENVIRONMENT.get_template("report.html.j2")
    return template.render(
        analysis=analysis,
        figures=figure_data,
        sections=shown,
        plotly_inline=inline_js,
        plotly_cdn=cdn_url,
        version=__version__,
        generated=(generated or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%d %H:%M:%S UTC"),
    )
