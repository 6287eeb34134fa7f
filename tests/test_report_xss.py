"""Nothing in an input can put markup or script into the report (SPEC section 8): markup planted in kernel,
annotation, process-group, host and file names comes out as text."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
from traceview.reports.html.page import render_html

from tests import report_factory as rf
from traceview.load.inputs import load_run
from traceview.reduce.analysis import analyze

PAYLOAD = "</script><img src=x onerror=alert(1)>"
ENTITY_ESCAPED = "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;"


class PageParser(HTMLParser):
    """Collects every start tag, the text outside scripts and the text of each script."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self._in_script: dict[str, str | None] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._in_script = dict(attrs)
            self.scripts.append((self._in_script, ""))

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = None

    def handle_data(self, data: str) -> None:
        if self._in_script is not None:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)
        else:
            self.text.append(data)


def planted_run(tmp_path: Path) -> Path:
    # a path component cannot hold "/", so the payload's "</" spans a folder boundary: "x<" / "script>..."
    folder = tmp_path / "x<" / "script><img src=x onerror=alert(1)>run"
    names = {"kernel_name": f"gemm{PAYLOAD}", "annotation": PAYLOAD, "pg_name": PAYLOAD, "pg_desc": PAYLOAD}
    return rf.write_run(folder, names=names, file_prefix="<img src=x onerror=alert(1)>rank", hostname=PAYLOAD)


@pytest.fixture(scope="module")
def planted_page(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = planted_run(tmp_path_factory.mktemp("xss"))
    assert PAYLOAD in str(folder)
    return render_html(analyze(load_run(folder, workers=1)), plotlyjs="inline")


def test_payload_never_appears_raw(planted_page: str) -> None:
    assert PAYLOAD not in planted_page
    assert "<img" not in planted_page.replace("\\u003cimg", "")  # the only "<img" would be markup


def test_no_element_comes_from_the_payload(planted_page: str) -> None:
    parser = PageParser()
    parser.feed(planted_page)
    assert not [tag for tag, _ in parser.tags if tag == "img"]
    assert not [attrs for _, attrs in parser.tags if "onerror" in attrs]
    islands = [attrs for attrs, _ in parser.scripts if attrs.get("type") == "application/json"]
    code = [attrs for attrs, _ in parser.scripts if attrs.get("type") != "application/json"]
    assert code == [{"id": "plotly-js"}, {}]  # plotly.js and the page's own script, nothing else
    assert islands
    assert all(str(a.get("id", "")).startswith("fig-") or a.get("id") == "drilldown-cells" for a in islands)


def test_payload_is_shown_as_text(planted_page: str) -> None:
    parser = PageParser()
    parser.feed(planted_page)
    text = "".join(parser.text)
    assert text.count(PAYLOAD) >= 4  # the host, the run in the title and heading, and the files' folder
    assert "<img src=x onerror=alert(1)>rank0.json" in text  # a file name, in the inputs table


def test_payload_in_figures_is_data_and_entity_escaped(planted_page: str) -> None:
    parser = PageParser()
    parser.feed(planted_page)
    islands = {attrs["id"]: body for attrs, body in parser.scripts if attrs.get("type") == "application/json"}
    timeline = islands["fig-timeline-data"]
    assert "<" not in timeline
    assert ">" not in timeline
    figure = json.loads(timeline)
    hovers = [h for trace in figure["data"] for h in trace.get("hovertext") or []]
    assert any(f"longest: gemm{ENTITY_ESCAPED}" in h for h in hovers)  # kernel name
    assert any(f"AllReduce on {ENTITY_ESCAPED}" in h for h in hovers)  # process-group description
    assert not any(PAYLOAD in h for h in hovers)
