"""The report fits a 1,280 px wide window (docs/metrics.md, "The report"): no element reaches past the right
edge, no section scrolls sideways, with every folded table and every `details` opened; one Chromium
(tests/browser.py) at 1,280 x 900 over each sample run's page.

Skipped when /usr/bin/chromium is absent, except under CI (`CI` set), where a missing browser is a failure."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from traceview.reports.html.page import render_html

from tests.browser import Browser, chromium_or_skip
from traceview.load.inputs import load_run
from traceview.reduce.analysis import analyze

CHROMIUM = Path(os.environ.get("TRACEVIEW_CHROMIUM", "/usr/bin/chromium"))
SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
WIDTH = 1280
OVERFLOW = """(() => {
  for (const d of document.querySelectorAll('details')) d.open = true;
  const width = document.documentElement.clientWidth, found = [];
  for (const e of document.querySelectorAll('body *')) {
    const r = e.getBoundingClientRect();
    if (r.width > 0 && r.right > width + 1) {
      const owner = e.closest('[id]');
      found.push(e.tagName + ' in #' + (owner ? owner.id : '-') + ' reaches ' + Math.round(r.right) + ' px');
    }
  }
  for (const s of document.querySelectorAll('section')) {
    if (s.scrollWidth > s.clientWidth + 1)
      found.push('#' + s.id + ' scrolls sideways: ' + s.scrollWidth + ' px');
  }
  return {width: width, page: document.documentElement.scrollWidth, found: found.slice(0, 20)};
})()"""


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    running = Browser(chromium_or_skip(CHROMIUM), tmp_path_factory.mktemp("profile"), width=WIDTH, height=900)
    yield running
    running.close()


@pytest.mark.parametrize("run", ["dp8_straggler", "pp4_mismatch", "gloo_dp2", "dp8_ideal"])
def test_the_page_fits_1280_px(browser: Browser, tmp_path: Path, run: str) -> None:
    page = tmp_path / f"{run}.html"
    page.write_text(render_html(analyze(load_run(SAMPLES / run, workers=1))), encoding="utf-8")
    browser.open(page.as_uri())
    browser.wait_for("document.documentElement.dataset.drawn === 'true'", timeout=60)
    measured = browser.evaluate(OVERFLOW)
    assert measured["width"] == WIDTH
    assert measured["page"] <= WIDTH, measured
    assert measured["found"] == [], measured
