"""The self-contained HTML report: a Jinja2 template, plotly figures as JSON data islands, plotly.js inline.

Every string from a trace reaches the page through Jinja2 autoescaping or through JSON whose `<`, `>` and `&`
are written as unicode escapes, so nothing in an input file can open a tag or end a script. A
Content-Security-Policy forbids every request (no connections, images only from data: URLs); with `--plotlyjs
cdn` the one script URL is the only exception. It allows `eval` (plotly.js probes its WebGL support with
generated code when it loads; without `unsafe-eval` the browser reports a violation), which cannot reach the
network. Nothing inline runs or applies but by its SHA-256 hash in the policy (no `unsafe-inline` at all): the
scripts are plotly.js and the page's own (`templates/report.js`), the styles the page's `<style>` block and
the few plotly.js writes (`plotly_styles`; `unsafe-hashes` lets those hashes match plotly's `style`
attributes, the page itself writes none: it uses classes); the figures travel as JSON data blocks, which are
never executed. Output is stable: figures are sorted-key JSON with the page's own template and element ids,
and the generation time is the only thing that changes between two renders of the same analysis.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import re
from collections.abc import Callable, Collection
from typing import Any

import plotly.graph_objects as go
from jinja2 import Environment, PackageLoader, select_autoescape
from plotly.offline import get_plotlyjs, get_plotlyjs_version
from traceview.reports.html import drilldown, figures
from traceview.reports.html._evidence import evidence_links, fact_figure
from traceview.reports.html._page_filters import rank_ranges
from traceview.reports.html._plotly_styles import plotly_style_texts
from traceview.reports.html._sections import SECTIONS

from traceview.core.durations import duration_cell, duration_text
from traceview.core.version import __version__
from traceview.reduce.analysis import RunAnalysis


def _ms(value: float | None) -> str:
    return duration_cell(value, decimals=3)


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


CDN_URL = "https://cdn.plot.ly/plotly-{version}.min.js"
"""plotly.js on its CDN, at the version of the plotly.js bundled with the Python package (not the package's
own version: plotly 7.1.0 bundles plotly.js 4.1.1)."""
CSP = (
    "default-src 'none'; script-src {hashes} 'unsafe-eval'{cdn}; style-src 'unsafe-hashes' {style_hashes}; "
    "img-src data: blob:; font-src data:; connect-src 'none'; base-uri 'none'; form-action 'none'"
)
_ENVIRONMENT = Environment(
    loader=PackageLoader("traceview.reports.html", "templates"),
    autoescape=select_autoescape(["html", "j2"], default=True),
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)


def fact_text(name: str, value: float) -> str:
    """A cited fact with its unit: `_us` figures as durations (`traceview.core.durations`), `_share` figures
    in percent, counts as integers."""
    if name.endswith("_us"):
        return duration_text(value)
    if name.endswith("_share"):
        return f"{value:.1%}"
    if float(value).is_integer():
        return f"{value:.0f}"
    return f"{value:.3g}"


def drill_json(analysis: RunAnalysis) -> str:
    """The drill-down's data (`traceview.reports.html.drilldown.drill_data`) as script-safe JSON."""
    return script_safe_json(drilldown.drill_data(analysis))


_ENVIRONMENT.globals["drill_json"] = drill_json
_ENVIRONMENT.globals["evidence_links"] = evidence_links
_ENVIRONMENT.globals["fold_rows"] = figures.MAX_RANK_BARS
_ENVIRONMENT.filters["rank_ranges"] = rank_ranges
_ENVIRONMENT.globals["collectives_by_cost"] = drilldown.collectives_by_cost
_ENVIRONMENT.filters["ms"] = _ms
_ENVIRONMENT.filters["ratio"] = _ratio
_ENVIRONMENT.globals["fact_text"] = fact_text

Format = Callable[[float], str]
VERDICT_FIGURES: tuple[tuple[str, str, Format, str], ...] = (
    ("measured gamma", "gamma", "{:.2f}".format, "T_comm / T_comp, median over steps and ranks"),
    ("predicted gamma", "gamma_pred", "{:.2f}".format, "alpha-beta model (gamma model section)"),
    ("measured / predicted", "gamma_ratio", "{:.2f}x".format, "pooled over the run (gamma model section)"),
    ("exposed communication", "exposed_comm_share", "{:.0%}".format, "share of the median step"),
    ("exposed gamma", "exposed_gamma", "{:.2f}".format, "exposed comm / T_comp"),
    ("GPU idle", "idle_share", "{:.0%}".format, "share of the median step"),
    (
        "top straggler",
        "straggler_rank",
        lambda v: "none" if v < 0 else f"rank {v:.0f}",
        "last to arrive most often",
    ),
)
"""The verdict panel's figures: (label, fact name in `RunAnalysis.recommendations.facts`, format, note).
A fact no analysis produced is shown as not measured."""
SOURCE_NOTES: dict[str, dict[str, str]] = {
    "replay": {
        "gamma_pred": "alpha-beta model replayed on the run's own graph (replay section, comm_model)",
        "gamma_ratio": "as_recorded / comm_model gamma, medians over steps and ranks (replay section)",
    },
    "closed form": {
        "gamma_pred": "alpha-beta model, closed form (gamma model section)",
        "gamma_ratio": "pooled over the run, closed form (gamma model section)",
    },
}
"""The notes of the predicted figures by the verdict's `gamma_pred_source`."""


def script_safe_json(data: Any) -> str:
    """JSON text safe inside a <script> element: `<`, `>`, `&` and line separators become unicode escapes."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False, default=str)
    escapes = (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    )
    for char, escaped in escapes:
        text = text.replace(char, escaped)
    return text


def figure_json(figure: go.Figure) -> str:
    """A figure as script-safe JSON, the page's template in place of plotly's (smaller, version-stable)."""
    data = json.loads(figure.to_json())
    data.setdefault("layout", {})["template"] = figures.THEME
    return script_safe_json(data)


def plotly_script(mode: str) -> tuple[str, str]:
    """(inline JS, CDN URL): exactly one is non-empty; `mode` is `inline` or `cdn`."""
    if mode == "cdn":
        return "", CDN_URL.format(version=get_plotlyjs_version())
    return get_plotlyjs().replace("</script", "<\\/script"), ""


def verdict_figures(
    analysis: RunAnalysis, drawn: Collection[str]
) -> list[tuple[str, str | None, str, str | None]]:
    """(label, formatted value or None when not measured, note, the figure showing it or None) for each row of
    `VERDICT_FIGURES`."""
    withheld = analysis.withheld()  # the verdict's one decision: "withheld", with why, on the tile
    facts = analysis.recommendations.facts if analysis.recommendations else {}
    notes = SOURCE_NOTES.get(analysis.verdict.gamma_pred_source or "", {})
    return [
        (
            label,
            "withheld" if name in withheld else fmt(facts[name]) if name in facts else None,
            withheld.get(name, notes.get(name, note)),
            fact_figure(name, drawn) if name in facts and name not in withheld else None,
        )
        for label, name, fmt, note in VERDICT_FIGURES
    ]


def page_figures(analysis: RunAnalysis) -> dict[str, go.Figure]:
    """Every figure of the page by element id: the timeline, then each shown section's."""
    found: dict[str, go.Figure] = {}
    if analysis.timeline is not None and analysis.timeline.drawn_segments:
        found["fig-timeline"] = figures.timeline_figure(analysis.timeline)
    for section in SECTIONS:
        if section.shown(analysis):
            found |= section.figures(analysis)
    return found


def script_hash(source: str) -> str:
    """The CSP source that lets exactly this inline script (or style block) run: `'sha256-<base64
    digest>'`."""
    digest = hashlib.sha256(source.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode()}'"


HASHES_PLACEHOLDER = "__TRACEVIEW_SCRIPT_HASHES__"
STYLE_HASHES_PLACEHOLDER = "__TRACEVIEW_STYLE_HASHES__"
_INLINE_SCRIPT = re.compile(r"<script(?P<attributes>[^>]*)>(?P<body>.*?)</script>", re.DOTALL)
_INLINE_STYLE = re.compile(r"<style[^>]*>(?P<body>.*?)</style>", re.DOTALL)


def with_script_hashes(page: str) -> str:
    """`page` with the placeholders in its policy replaced by the hash of every inline script it runs (a
    script with `src` or a JSON data block is not one) and of every `<style>` block (and plotly's, empty)."""
    bodies = [
        found["body"]
        for found in _INLINE_SCRIPT.finditer(page)
        if "src=" not in found["attributes"] and "application/json" not in found["attributes"]
    ]
    styles = [*(found["body"] for found in _INLINE_STYLE.finditer(page)), *plotly_style_texts()]
    hashes, style_hashes = (
        " ".join(dict.fromkeys(map(script_hash, texts))).replace("'", "&#39;") for texts in (bodies, styles)
    )
    return page.replace(HASHES_PLACEHOLDER, hashes, 1).replace(STYLE_HASHES_PLACEHOLDER, style_hashes, 1)


def content_policy(cdn: bool) -> str:
    """The page's Content-Security-Policy, its hashes still to fill (`with_script_hashes`)."""
    return CSP.format(
        hashes=HASHES_PLACEHOLDER,
        style_hashes=STYLE_HASHES_PLACEHOLDER,
        cdn=" https://cdn.plot.ly" if cdn else "",
    )


def page_script() -> str:
    """The page's own script (figures drawn from their data blocks, sortable tables, the drill-down)."""
    return _ENVIRONMENT.loader.get_source(_ENVIRONMENT, "report.js")[0]  # type: ignore[union-attr]


def render_html(analysis: RunAnalysis, plotlyjs: str = "inline", generated: dt.datetime | None = None) -> str:
    """The whole report page as one string."""
    inline_js, cdn_url = plotly_script(plotlyjs)
    template = _ENVIRONMENT.get_template("report.html.j2")
    drawn = {figure_id: figure_json(f) for figure_id, f in page_figures(analysis).items()}
    page = template.render(
        analysis=analysis,
        figures=drawn,
        sections=[(section, section.shown(analysis)) for section in SECTIONS],
        verdict_figures=verdict_figures(analysis, drawn),
        plotly_inline=inline_js,
        plotly_cdn=cdn_url,
        page_js=page_script(),
        csp=content_policy(bool(cdn_url)),
        version=__version__,
        generated=(generated or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%d %H:%M:%S UTC"),
    )
    return with_script_hashes(page)
