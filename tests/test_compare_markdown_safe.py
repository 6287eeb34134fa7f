"""`compare --markdown` renders what it says (a CI comment): every name from a trace is escaped for Markdown
and HTML, and GitHub finds no link in it (it printed `<img ... onerror=...>` and `<a href="https://evil...">`
raw). Rendered by an independent CommonMark renderer (markdown-it-py, a dependency of rich), with tables."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt
from traceview.reports.text.compare_markdown import render_markdown

from tests.compare_factory import NCCL, kernels, planted_copy, scale_compute
from traceview.compare.settings import load_settings
from traceview.compare.two_runs import compare
from traceview.core.sanitize import markdown_text

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "dp8_straggler"
PAYLOADS = (
    '<img src=x onerror="alert(1)">',
    '<a href="https://evil.example/steal">click</a>',
    "[click](https://evil.example/x)",
    "![x](https://evil.example/p.png)",
    "<https://evil.example>",
    "https://evil.example/bare www.evil.example me@evil.example",
    "**bold** _em_ `code` ~~gone~~ | cell | # heading",
    "<script>alert(1)</script>\x1b[31m",
    "1. list",
    "- item ",
    "# heading",
    "> quote",
    "    indented code",
    "__dunder__ snake_case *x* a\\",
    "fixes #123 for @someone $x^2$",
)
RENDER = MarkdownIt("commonmark").enable("table")
ZERO_WIDTH = "\u200b"
BARE_LINK = re.compile(r"(https?://|www\.)[\w.-]|[\w.+-]+@[\w-]+\.\w")


def _visible_text(html: str) -> str:
    """The text a page shows of `html` (tags dropped, entities decoded)."""
    import html as html_module

    return html_module.unescape(re.sub(r"<[^>]+>", "", html))


@pytest.mark.parametrize("payload", PAYLOADS)
def test_text_renders_as_itself(payload: str) -> None:
    """Rendered inside a table cell, the payload is one cell holding exactly its (printable) text: no tag, no
    link, no emphasis; GitHub's autolinker finds no URL nor address (each broken by a zero-width space)."""
    cell = markdown_text(payload)
    html = RENDER.render(f"| a | b |\n|---|---|\n| {cell} | end |\n")
    assert html.count("<td>") == 2
    assert not re.search(r"<(img|a|script|em|strong|code|h\d|del)\b", html)
    shown = _visible_text(html.split("<td>")[1].split("</td>")[0])
    assert shown.replace(ZERO_WIDTH, "") == payload.replace("\x1b", "\\x1b")
    assert not BARE_LINK.search(shown)


@pytest.mark.parametrize("payload", PAYLOADS)
@pytest.mark.parametrize("line", ["- {}\n", "**{}**\n", "x: {} y\n"], ids=["list item", "bold", "in a line"])
def test_text_renders_as_itself_where_a_line_starts_or_bold(payload: str, line: str) -> None:
    """In a list item (where a block could start: heading, list, quote, code), in bold, within a line: the
    payload renders as its text, the surrounding markup intact, no tag of its own."""
    html = RENDER.render(line.format(markdown_text(payload)))
    inner = re.sub(r"^<(ul)>\n<li>|</li>\n</ul>\n$|^<p>(<strong>|x: )?|( y|</strong>)?</p>\n$", "", html)
    assert not re.search(r"<(?!/?strong>)", inner), html
    assert ("<strong>" in html) == line.startswith("**")
    shown = _visible_text(inner)
    assert shown.replace(ZERO_WIDTH, "") == payload.replace("\x1b", "\\x1b")
    assert not BARE_LINK.search(shown)


def test_plain_names_stay_plain() -> None:
    """Punctuation that is no markup where it stands is left as it is: the raw comment reads as text too."""
    for name in ("AllReduce pg=0 4 MiB - 64 MiB", "kernel_us of rank 1: +60%, p 0.01", "PyTorch: 2.3 -> 2.4"):
        assert markdown_text(name) == name


def _named(payload: str) -> Any:
    def edit(document: dict[str, Any], rank: int) -> None:
        for event in kernels(document):
            if not NCCL.search(event["name"]):
                event["name"] = payload + event["name"]

    return edit


def _summary(run: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "traceview", "summary", str(run), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def test_the_ci_comment_carries_no_markup_from_the_traces(tmp_path: Path) -> None:
    """A regression whose subjects, verdict and notes carry every payload: the comment's HTML holds no tag but
    the table's and no link at all."""
    payload = " ".join(PAYLOADS)
    slower = _named(payload)
    baseline = _summary(planted_copy(SAMPLE, tmp_path / "a", slower))

    def slow(document: dict[str, Any], rank: int) -> None:
        slower(document, rank)
        scale_compute(1.5)(document, rank)

    candidate = _summary(planted_copy(SAMPLE, tmp_path / "b", slow))
    comparison = compare(baseline, candidate, load_settings()[0])
    assert comparison.regressions
    hostile = dataclasses.replace(
        comparison,
        verdict=payload,
        findings=[dataclasses.replace(f, subject=f"{payload} {f.subject}") for f in comparison.findings],
        structure=dataclasses.replace(
            comparison.structure,
            appeared=[payload],
            setup_changes=[payload],
            partial_notes=[payload],
        ),
    )
    html = RENDER.render(render_markdown(hostile))
    tags = set(re.findall(r"<(\w+)", html))
    assert tags <= {"h3", "h4", "p", "strong", "table", "thead", "tbody", "tr", "th", "td", "ul", "li"}
    assert not re.search(r"<[^>]*(href|src|on\w+)=", html)  # no attribute on any tag: no link, no image
    assert not BARE_LINK.search(_visible_text(html))
    assert "onerror" in _visible_text(html)  # said, as text
