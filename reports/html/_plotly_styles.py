"""The styles plotly.js writes into a page, read from the bundled plotly.js, so that the report's
Content-Security-Policy can allow exactly them by hash instead of `style-src 'unsafe-inline'`.

plotly.js (4.x) writes three kinds of inline style when it loads and draws: an empty `<style>` element whose
rules it then inserts through the CSSOM (not governed by the policy), a `<style>` element holding a stylesheet
of its map library, and `style` attributes: the empty string (colour-bar fills) and a list of
`image-rendering` declarations (heatmap images). Each text is taken from the bundle itself; when a later
plotly.js writes them differently, the text is not found, the browser tests report the violation, and this
module is updated.
"""

from __future__ import annotations

import functools
import json
import re

from plotly.offline import get_plotlyjs

EMPTY_STYLE = ""
_INJECTED_SHEET = re.compile(
    r'getElementById\("(?P<id>[0-9a-f]{64})"\)\)\{var e=document\.createElement\("style"\);'
    r"e\.id=\"(?P=id)\",e\.textContent='(?P<css>[^'\\]*)'"
)
_IMAGE_RENDERING = re.compile(r"CSS_DECLARATIONS=(?P<list>\[\[[^;]*?\]\]);")


@functools.cache
def plotly_style_texts() -> tuple[str, ...]:
    """Every inline style text plotly.js writes (module docstring), each once."""
    bundle = get_plotlyjs()
    texts = [EMPTY_STYLE]
    sheet = _INJECTED_SHEET.search(bundle)
    if sheet:
        texts.append(sheet["css"])
    declarations = _IMAGE_RENDERING.search(bundle)
    if declarations:
        pairs = json.loads(declarations["list"])
        texts.append("".join(f"{name}: {value}; " for name, value in pairs))
    return tuple(texts)
