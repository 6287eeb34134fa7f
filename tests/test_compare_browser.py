"""The diff report and the trend page in headless Chromium, offline: no script error, no blocked request,
every figure drawn, the verdict on the first screen (the probe of tests/test_report_browser.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from traceview.reports.compare_html import render_compare_html, render_trend_html

from tests.test_compare_documents import document
from tests.test_report_browser import assert_clean, chromium_or_skip, probe, screenshot, with_probe
from traceview.compare.trend import trend
from traceview.compare.two_runs import compare, load_settings


@pytest.fixture(scope="module")
def browser() -> Path:
    return chromium_or_skip()


def test_diff_report_renders_offline(browser: Path, tmp_path: Path) -> None:
    settings, _ = load_settings()
    comparison = compare(document(), document(allreduce_us=15.0), settings)
    page = tmp_path / "compare.html"
    page.write_text(with_probe(render_compare_html(comparison)), encoding="utf-8")
    result = probe(browser, page, tmp_path / "profile", "1400,1000")
    assert_clean(result)
    assert {f["id"] for f in result["figures"]} == {"fig-changes", "fig-budget", "fig-busbw"}
    assert result["verdict"]["text"] == comparison.verdict
    assert result["verdict"]["box"]["bottom"] <= result["innerHeight"]
    screenshot(browser, page, tmp_path / "profile", "1400,1000", "compare-first-screen.png")


def test_trend_page_renders_offline(browser: Path, tmp_path: Path) -> None:
    _, settings = load_settings()
    found = trend([(f"n{i}.json", document(step_us=100.0 + 50.0 * (i >= 3))) for i in range(6)], settings)
    page = tmp_path / "trend.html"
    page.write_text(with_probe(render_trend_html(found)), encoding="utf-8")
    result = probe(browser, page, tmp_path / "profile", "1400,1000")
    assert_clean(result)
    assert len(result["figures"]) == len(settings.metrics)
    assert result["verdict"]["text"] == found.verdict
