"""The report in a real browser: headless Chromium opens it offline and a probe injected before any other
script records console errors, script errors, blocked requests and alerts, then measures every figure.

Skipped when /usr/bin/chromium is absent, except under CI (`CI` set), where a missing browser is a failure.
Screenshots (first screen, and the page after picking another step) go to test-artifacts/.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from traceview.reports.html import render_html

from tests import report_factory as rf
from tests.test_report_xss import PAYLOAD, planted_run
from traceview.load.inputs import load_run
from traceview.reduce.analysis import analyze

CHROMIUM = Path(os.environ.get("TRACEVIEW_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--metrics-recording-only",
    "--hide-scrollbars",
    "--mute-audio",
    "--disable-features=Translate,MediaRouter,OptimizationHints",
    "--enable-unsafe-swiftshader",  # software WebGL without a deprecation notice (plotly probes WebGL)
    "--enable-logging=stderr",
    "--v=0",
)

ERROR_WORDS = re.compile(r"error|uncaught|refused|failed|violat|denied", re.IGNORECASE)
PROBE = """<script>
window.__tv = {errors: [], alerts: [], blocked: []};
(function () {
  var original = console.error;
  console.error = function () {
    window.__tv.errors.push(Array.prototype.join.call(arguments, " "));
    return original.apply(console, arguments);
  };
  window.addEventListener("error", function (e) {
    window.__tv.errors.push("error: " + (e.message || (e.target && e.target.outerHTML) || "?"));
  }, true);
  window.addEventListener("unhandledrejection", function (e) {
    window.__tv.errors.push("rejection: " + e.reason);
  });
  document.addEventListener("securitypolicyviolation", function (e) {
    window.__tv.blocked.push(e.violatedDirective + " " + e.blockedURI);
  });
  window.alert = function (m) { window.__tv.alerts.push(String(m)); };
  function box(el) {
    var r = el.getBoundingClientRect();
    return {top: r.top, bottom: r.bottom, width: r.width, height: r.height};
  }
  function report() {
    var verdict = document.getElementById("verdict-sentence");
    var style = getComputedStyle(verdict);
    var result = {
      errors: window.__tv.errors, alerts: window.__tv.alerts, blocked: window.__tv.blocked,
      resources: performance.getEntriesByType("resource").map(function (e) { return e.name; }),
      images: document.images.length, innerHeight: window.innerHeight,
      verdict: {text: verdict.innerText, box: box(verdict), visibility: style.visibility,
                display: style.display},
      figures: Array.prototype.map.call(document.querySelectorAll("div.figure[id^='fig-']"), function (el) {
        var svg = el.querySelector(".main-svg");
        return {id: el.id, plotly: el.classList.contains("js-plotly-plot"),
                traces: el.data ? el.data.length : 0,
                bars: el.querySelectorAll(".point").length, box: box(el), svg: svg ? box(svg) : null,
                title: el.layout && el.layout.title ? el.layout.title.text : null};
      })
    };
    var out = document.createElement("pre");
    out.id = "tv-probe"; out.style.display = "none"; out.textContent = JSON.stringify(result);
    document.body.appendChild(out);
  }
  window.addEventListener("load", function () {
    var pick = window.__tv_pick;
    if (!pick) { setTimeout(report, 200); return; }
    var timeline = document.getElementById("fig-timeline");
    var button = timeline.layout.updatemenus[0].buttons[pick];
    Plotly.update(timeline, button.args[0], button.args[1]).then(function () { setTimeout(report, 200); });
  });
})();
</script>
"""


def chromium_or_skip() -> Path:
    if CHROMIUM.exists():
        return CHROMIUM
    if os.environ.get("CI"):
        pytest.fail(f"{CHROMIUM} is missing under CI: .ci/run must install Debian's chromium")
    pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)")


def with_probe(page: str, pick: int | None = None) -> str:
    setup = f"<script>window.__tv_pick = {json.dumps(pick)};</script>\n" if pick is not None else ""
    return page.replace("<head>\n", "<head>\n" + setup + PROBE, 1)


def run_chromium(
    browser: Path, page: Path, profile: Path, *extra: str, fragment: str = ""
) -> subprocess.CompletedProcess[str]:
    command = [
        str(browser),
        *FLAGS,
        f"--user-data-dir={profile}",
        "--virtual-time-budget=15000",
        *extra,
        page.as_uri() + fragment,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def probe(browser: Path, page: Path, profile: Path, size: str) -> dict[str, Any]:
    done = run_chromium(browser, page, profile, f"--window-size={size}", "--dump-dom")
    found = re.search(r'<pre id="tv-probe" style="display: none;">(.*?)</pre>', done.stdout, re.S)
    assert found, f"the probe never reported; chromium said: {done.stderr[-2000:]}"
    result: dict[str, Any] = json.loads(
        found.group(1).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    )
    # the browser's own log of console messages; the GL driver's performance notes are not errors
    result["console"] = [
        line for line in done.stderr.splitlines() if "CONSOLE" in line and ERROR_WORDS.search(line)
    ]
    return result


def screenshot(browser: Path, page: Path, profile: Path, size: str, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    target = ARTIFACTS / name
    target.unlink(missing_ok=True)
    run_chromium(browser, page, profile, f"--window-size={size}", f"--screenshot={target}")
    assert target.exists(), f"no screenshot at {target}"
    assert target.stat().st_size > 10_000
    return target


def assert_clean(result: dict[str, Any]) -> None:
    assert result["errors"] == [], result["errors"]
    assert result["console"] == [], result["console"]
    assert result["blocked"] == [], result["blocked"]
    assert result["resources"] == [], result["resources"]
    assert result["alerts"] == []
    assert result["images"] == 0
    for figure in result["figures"]:
        assert figure["plotly"], figure
        assert figure["traces"] > 0, figure
        assert figure["svg"], figure
        assert min(figure["svg"]["width"], figure["svg"]["height"]) > 100, figure


@pytest.fixture(scope="module")
def browser() -> Path:
    return chromium_or_skip()


def test_report_renders_offline_without_errors(browser: Path, tmp_path: Path) -> None:
    folder = rf.write_run(tmp_path / "run")
    analysis = analyze(load_run(folder, workers=1))
    page = tmp_path / "report.html"
    page.write_text(with_probe(render_html(analysis)), encoding="utf-8")
    result = probe(browser, page, tmp_path / "profile", "1400,1000")
    assert_clean(result)
    assert {f["id"] for f in result["figures"]} >= {"fig-timeline", "fig-budget", "fig-gamma"}
    timeline = next(f for f in result["figures"] if f["id"] == "fig-timeline")
    assert timeline["bars"] >= 15  # step 1: 4 + 3 idle, 2 memory, 4 compute, 2 AllReduce (hand count)
    verdict = result["verdict"]
    assert verdict["text"] == analysis.verdict.sentence
    assert verdict["visibility"] == "visible"
    assert verdict["display"] != "none"
    assert verdict["box"]["height"] > 0
    assert verdict["box"]["bottom"] <= result["innerHeight"]
    screenshot(browser, page, tmp_path / "profile", "1400,1000", "report-first-screen.png")


def test_step_picker_switches_the_timeline(browser: Path, tmp_path: Path) -> None:
    folder = rf.write_run(tmp_path / "run")
    analysis = analyze(load_run(folder, workers=1))
    page = tmp_path / "report.html"
    page.write_text(with_probe(render_html(analysis), pick=1), encoding="utf-8")
    result = probe(browser, page, tmp_path / "profile", "1400,2400")
    assert_clean(result)
    timeline = next(f for f in result["figures"] if f["id"] == "fig-timeline")
    assert timeline["title"].startswith("Step 2 on every rank")  # button 1 = step 2 (steps in order 1, 2, 3)
    screenshot(browser, page, tmp_path / "profile", "1400,2400", "report-drilldown.png")


def test_planted_markup_stays_text_in_the_browser(browser: Path, tmp_path: Path) -> None:
    analysis = analyze(load_run(planted_run(tmp_path), workers=1))
    page = tmp_path / "planted.html"
    page.write_text(with_probe(render_html(analysis)), encoding="utf-8")
    result = probe(browser, page, tmp_path / "profile", "1400,1000")
    assert_clean(result)  # no alert fired, no <img> exists
    dom = run_chromium(browser, page, tmp_path / "profile", "--dump-dom").stdout
    assert "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in dom
    assert PAYLOAD not in dom


def test_a_cell_of_the_heatmap_opens_its_detail(browser: Path, tmp_path: Path) -> None:
    """The page reads `#cell=RANK-STEP` as a click on that heatmap cell: the detail shows the rank's step
    beside the median rank's (report_factory: 2 ranks, 3 steps)."""
    analysis = analyze(load_run(rf.write_run(tmp_path / "run"), workers=1))
    page = tmp_path / "report.html"
    page.write_text(render_html(analysis), encoding="utf-8")
    before = run_chromium(browser, page, tmp_path / "profile", "--dump-dom").stdout
    assert "No cell chosen yet" in before
    after = run_chromium(browser, page, tmp_path / "profile", "--dump-dom", fragment="#cell=1-2").stdout
    caption = re.search(r'<p class="note" id="drill-caption">(.*?)</p>', after, re.S)
    assert caption, after[-2000:]
    assert caption.group(1).startswith("Rank 1, step 2 against the median rank")
    table = re.search(r'<table id="drill-table">(.*?)</table>', after, re.S)
    assert table
    assert table.group(1).count("<tr>") == 3  # the header, the rank, the median rank
    assert 'data-cell="1-2"' in after
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report-drilldown-cell.png"
    shot.unlink(missing_ok=True)
    run_chromium(
        browser,
        page,
        tmp_path / "profile",
        "--window-size=1400,1600",
        f"--screenshot={shot}",
        fragment="#cell=1-2",
    )
    assert shot.exists()


def _scaled_analysis(ranks: int) -> Any:
    """`ranks` varied copies of sample_traces/dp8_straggler's rank summaries, reduced (benchmarks/reduce_scale.py)."""
    import importlib.util
    import random
    import sys

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "reduce_scale.py"
    spec = importlib.util.spec_from_file_location("reduce_scale", script)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    from traceview.map.rank_summary import summarize
    from traceview.reduce.reduce import reduce_summaries

    base = [summarize(trace) for trace in load_run(module.SAMPLE)]
    draw = random.Random(7)
    summaries = [module.renumbered(base[r % 8], r, ranks, draw.uniform(0, 500)) for r in range(ranks)]
    return reduce_summaries(summaries)


@pytest.mark.parametrize("ranks", [64, 1024])
def test_many_ranks_load_clean_small_and_fast(browser: Path, tmp_path: Path, ranks: int) -> None:
    import time

    page = tmp_path / "report.html"
    page.write_text(with_probe(render_html(_scaled_analysis(ranks))), encoding="utf-8")
    size_mb = page.stat().st_size / 1e6
    assert size_mb < 10, size_mb
    start = time.perf_counter()
    result = probe(browser, page, tmp_path / "profile", "1400,1000")
    load_s = time.perf_counter() - start
    assert_clean(result)
    ARTIFACTS.mkdir(exist_ok=True)
    with (ARTIFACTS / "report-scale.txt").open("a", encoding="utf-8") as log:
        log.write(f"{ranks} ranks: report {size_mb:.1f} MB, headless load and render {load_s:.1f} s\n")
    if ranks == 64:
        screenshot(browser, page, tmp_path / "profile", "1400,2600", "report-64-ranks.png")
