"""The diff report and the trend page in headless Chromium, offline: no script error, no blocked request,
every figure drawn, the verdict on the first screen (tests/browser.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from traceview.reports.html.compare import render_compare_html, render_trend_html

from tests.browser import Browser, assert_clean, chromium_or_skip, page_state
from tests.test_compare_documents import document
from traceview.compare.settings import load_settings
from traceview.compare.trend import trend
from traceview.compare.two_runs import compare

CHROMIUM = Path(os.environ.get("TRACEVIEW_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
ALL_DRAWN = (
    "document.querySelectorAll('div.figure[id^=\"fig-\"]').length"
    " === document.querySelectorAll('div.figure.js-plotly-plot').length"
)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    running = Browser(chromium_or_skip(CHROMIUM), tmp_path_factory.mktemp("profile"))
    yield running
    running.close()


def opened(browser: Browser, page: Path) -> None:
    browser.open("about:blank")
    browser.problems()
    browser.open(page.as_uri())
    browser.wait_for(ALL_DRAWN)


def test_diff_report_renders_offline(browser: Browser, tmp_path: Path) -> None:
    settings, _ = load_settings()
    comparison = compare(document(), document(allreduce_us=15.0), settings)
    page = tmp_path / "compare.html"
    page.write_text(render_compare_html(comparison), encoding="utf-8")
    opened(browser, page)
    state = page_state(browser)
    assert_clean(state)
    assert {f["id"] for f in state["figures"]} == {"fig-changes", "fig-budget", "fig-busbw"}
    assert state["verdict"]["text"] == comparison.verdict
    assert state["verdict"]["box"]["bottom"] <= state["innerHeight"]
    ARTIFACTS.mkdir(exist_ok=True)
    assert browser.screenshot(ARTIFACTS / "compare-first-screen.png").stat().st_size > 10_000


def test_trend_page_renders_offline(browser: Browser, tmp_path: Path) -> None:
    _, settings = load_settings()
    found = trend([(f"n{i}.json", document(step_us=100.0 + 50.0 * (i >= 3))) for i in range(6)], settings)
    page = tmp_path / "trend.html"
    page.write_text(render_trend_html(found), encoding="utf-8")
    opened(browser, page)
    state = page_state(browser)
    assert_clean(state)
    assert len(state["figures"]) == len(settings.metrics)
    assert state["verdict"]["text"] == found.verdict
