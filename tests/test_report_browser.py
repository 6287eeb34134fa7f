"""The report in a real browser: one headless Chromium per module, driven through the DevTools protocol
(tests/browser.py). Pages are opened offline exactly as written; a probe that runs before any page script
records dialogs and content-security violations, and the browser's own log gives console and script errors.
Clicks are trusted mouse events at a heatmap cell's pixel; load times are the page's own mark (every figure
drawn and painted, `traceview-drawn`) since navigation started, in real time.

Skipped when /usr/bin/chromium is absent, except under CI (`CI` set), where a missing browser is a failure.
Screenshots (the verdict, the heatmap, a drill-down, the first screen, a 64-rank page) and the measured sizes
and load times (`report-scale-N.txt`) go to test-artifacts/.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from traceview.reports.html.page import render_html

from tests import report_factory as rf
from tests.browser import Browser, assert_clean, chromium_or_skip, page_state
from tests.shared_data import REAL_KINETO
from tests.test_report_xss import PAYLOAD, planted_run
from traceview.load.inputs import load_run
from traceview.reduce.analysis import RunAnalysis, analyze

CHROMIUM = Path(os.environ.get("TRACEVIEW_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
MAX_REPORT_MB = 10.0
MAX_LOAD_S = 20.0
"""A sanity bound only (the issue asks for a few seconds on a desktop; CI shares 2 cores among test workers):
the measured figure goes to test-artifacts/report-scale-N.txt and the benchmark benchmarks/report_scale.py."""


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    running = Browser(chromium_or_skip(CHROMIUM), tmp_path_factory.mktemp("profile"))
    yield running
    running.close()


def open_report(browser: Browser, page: Path, fragment: str = "") -> float:
    """Open `page` afresh and wait until every figure is drawn; the load time in seconds (navigation start to
    the page's `traceview-drawn` mark)."""
    browser.open("about:blank")
    browser.problems()
    browser.open(page.as_uri() + fragment)
    browser.wait_for("document.documentElement.dataset.drawn === 'true'", timeout=60)
    started: float = browser.evaluate("performance.getEntriesByName('traceview-drawn')[0].startTime")
    return started / 1000


def written(tmp_path: Path, analysis: RunAnalysis, name: str = "report.html") -> Path:
    page = tmp_path / name
    page.write_text(render_html(analysis), encoding="utf-8")
    return page


def artifact(name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    target = ARTIFACTS / name
    target.unlink(missing_ok=True)
    return target


def shot(browser: Browser, name: str, selector: str | None = None) -> Path:
    target = browser.screenshot(artifact(name), selector)
    assert target.stat().st_size > 10_000, target
    return target


@pytest.fixture(scope="module")
def sample_analysis() -> RunAnalysis:
    """sample_traces/dp8_straggler: 8 ranks on 2 hosts, rank 5 a compute straggler."""
    return analyze(load_run(SAMPLES / "dp8_straggler", workers=1))


def test_report_renders_offline_without_errors(browser: Browser, tmp_path: Path) -> None:
    analysis = analyze(load_run(rf.write_run(tmp_path / "run"), workers=1))
    open_report(browser, written(tmp_path, analysis))
    state = page_state(browser)
    assert_clean(state)
    assert {f["id"] for f in state["figures"]} >= {"fig-timeline", "fig-budget", "fig-gamma", "fig-heatmap"}
    timeline = next(f for f in state["figures"] if f["id"] == "fig-timeline")
    assert timeline["bars"] >= 15  # step 1: 4 + 3 idle, 2 memory, 4 compute, 2 AllReduce (hand count)
    verdict = state["verdict"]
    assert verdict["text"] == analysis.verdict.sentence
    assert verdict["visibility"] == "visible"
    assert verdict["display"] != "none"
    assert verdict["box"]["height"] > 0
    assert verdict["box"]["bottom"] <= state["innerHeight"]
    shot(browser, "report-first-screen.png")


def _click_menu_item(browser: Browser, figure: str, item: int) -> None:
    """Open `figure`'s drop-down menu and pick its `item`-th entry, by two clicks."""
    header = f"#{figure} .updatemenu-header-group"
    browser.click(*_centre(browser, header))
    browser.wait_for(f"document.querySelectorAll('#{figure} .updatemenu-dropdown-button').length > {item}")
    browser.click(*_centre(browser, f"#{figure} .updatemenu-dropdown-button", item))
    browser.wait_for(f"document.querySelectorAll('#{figure} .updatemenu-dropdown-button').length === 0")


def _centre(browser: Browser, selector: str, index: int = 0) -> tuple[float, float]:
    found = browser.evaluate(
        f"(function () {{ var el = document.querySelectorAll({json.dumps(selector)})[{index}];"
        # a wrapped link: its first line
        " el.scrollIntoView({block: 'center'}); var r = el.getClientRects()[0];"
        " return [r.left + r.width / 2, r.top + r.height / 2]; })()"
    )
    return float(found[0]), float(found[1])


def test_step_menu_switches_the_timeline(browser: Browser, tmp_path: Path) -> None:
    analysis = analyze(load_run(rf.write_run(tmp_path / "run"), workers=1))
    open_report(browser, written(tmp_path, analysis))
    _click_menu_item(browser, "fig-timeline", 1)  # entry 1 = step 2 (steps in order 1, 2, 3)
    title = browser.wait_for(
        "(function () { var t = document.getElementById('fig-timeline').layout.title.text;"
        " return t.startsWith('Step 2') ? t : null; })()"
    )
    assert title.startswith("Step 2 on every rank")
    assert_clean(page_state(browser))


def test_planted_markup_stays_text_in_the_browser(browser: Browser, tmp_path: Path) -> None:
    analysis = analyze(load_run(planted_run(tmp_path), workers=1))
    open_report(browser, written(tmp_path, analysis, "planted.html"))
    assert_clean(page_state(browser))  # no alert fired, no <img> exists
    dom = browser.evaluate("document.documentElement.outerHTML")
    assert "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in dom
    assert PAYLOAD not in dom


def _cell_centre(browser: Browser, rank: int, step: int) -> tuple[float, float]:
    """The viewport pixel of heatmap cell (rank, step), from the drawn figure's own axes."""
    found = browser.evaluate(
        "(function (rank, step) { var gd = document.getElementById('fig-heatmap');"
        " gd.scrollIntoView({block: 'center'}); var fl = gd._fullLayout, box = gd.getBoundingClientRect();"
        " function at(axis, value) { return axis._offset + "
        "axis.l2p(axis._categories.map(String).indexOf(String(value))); }"
        " return [box.left + at(fl.xaxis, step), box.top + at(fl.yaxis, rank)];"
        f" }})({rank}, {step})"
    )
    return float(found[0]), float(found[1])


def _detail(browser: Browser) -> dict[str, Any]:
    detail: dict[str, Any] = browser.evaluate(
        "(function () { var table = document.getElementById('drill-table');"
        " var plot = document.getElementById('drill-timeline');"
        " return {cell: document.getElementById('drill-detail').dataset.cell || null,"
        " caption: document.getElementById('drill-caption').textContent,"
        " rows: Array.prototype.map.call(table.rows, function (r) {"
        "   return Array.prototype.map.call(r.cells, function (c) { return c.textContent; }); }),"
        " lanes: plot.data ? Array.from(new Set(plot.data.map(function (t) { return t.y[0]; }))) : []}; })()"
    )
    return detail


def _median_rank(analysis: RunAnalysis, step: int) -> int:
    """The lower median rank of `step` by step time (ties by rank), by a plain pass over the budget's rows."""
    rows = sorted(
        (row["step_us"], row["rank"])
        for row in analysis.budget.per_step.iter_rows(named=True)
        if row["step"] == step
    )
    return int(rows[(len(rows) - 1) // 2][1])


def click_cell_and_check(browser: Browser, analysis: RunAnalysis, rank: int, step: int) -> dict[str, Any]:
    """Click heatmap cell (rank, step): the detail shows that rank's step beside the median rank's, with the
    budget's figures of both."""
    browser.click(*_cell_centre(browser, rank, step))
    browser.wait_for(f"document.getElementById('drill-detail').dataset.cell === '{rank}-{step}'")
    detail = _detail(browser)
    median = _median_rank(analysis, step)
    assert detail["caption"].startswith(f"Rank {rank}, step {step} against the median rank")
    assert f"(rank {median})" in detail["caption"]
    header, clicked, median_row = detail["rows"]
    budget = analysis.budget.per_step.filter((pl.col("rank") == rank) & (pl.col("step") == step)).row(
        0, named=True
    )
    assert clicked[0] == f"rank {rank}"
    assert median_row[0] == f"rank {median} (median)"
    assert float(clicked[header.index("step")]) == pytest.approx(budget["step_us"] / 1000, abs=1e-3)
    assert float(clicked[header.index("exposed comm")]) == pytest.approx(
        budget["exposed_comm_us"] / 1000, abs=1e-3
    )
    return detail


def test_clicking_a_heatmap_cell_opens_that_ranks_step(
    browser: Browser, sample_analysis: RunAnalysis, tmp_path: Path
) -> None:
    open_report(browser, written(tmp_path, sample_analysis))
    assert _detail(browser)["caption"].startswith("No cell chosen yet")
    first = click_cell_and_check(browser, sample_analysis, 5, 3)
    assert first["lanes"] == ["rank 5", f"rank {_median_rank(sample_analysis, 3)} (median)"]
    shot(browser, "report-drilldown.png", "#drilldown")
    second = click_cell_and_check(browser, sample_analysis, 2, 4)  # another click changes the detail
    assert second["rows"] != first["rows"]
    _click_menu_item(browser, "fig-heatmap", 1)  # the menu's "exposed communication"
    browser.wait_for("document.getElementById('fig-heatmap').data[1].visible === true")
    shot(browser, "report-heatmap.png", "#fig-heatmap")
    shot(browser, "report-verdict.png", "#verdict")
    assert_clean(page_state(browser))


def test_each_recommendation_links_to_the_figure_that_proves_it(
    browser: Browser, sample_analysis: RunAnalysis, tmp_path: Path
) -> None:
    page = written(tmp_path, sample_analysis)
    open_report(browser, page)
    links: list[dict[str, str]] = browser.evaluate(
        "Array.prototype.map.call(document.querySelectorAll('#recommendations li'), function (li) {"
        " var a = li.querySelectorAll('a.evidence');"
        " return {rule: li.id, figure: a[0] ? a[0].getAttribute('href') : null,"
        " cell: a[1] ? a[1].getAttribute('href') : null}; })"
    )
    assert sample_analysis.recommendations is not None
    assert [f"rec-{item.rule}" for item in sample_analysis.recommendations.items] == [
        x["rule"] for x in links
    ]
    for link in links:
        figure = link["figure"]
        assert figure is not None
        assert figure.startswith("#fig-"), link
        drawn = browser.evaluate(f"document.querySelector('{figure}').classList.contains('js-plotly-plot')")
        assert drawn, link
    facts = browser.evaluate(
        "Array.prototype.map.call(document.querySelectorAll('#verdict-figures a.fact'), function (a) {"
        " var target = document.querySelector(a.getAttribute('href'));"
        " return [a.querySelector('.label').textContent, target !== null && "
        "target.classList.contains('js-plotly-plot')]; })"
    )
    assert dict(facts) == {
        "measured gamma": True,
        "exposed communication": True,
        "exposed gamma": True,
        "GPU idle": True,
        "top straggler": True,
    }
    by_rule = {x["rule"]: x for x in links}
    assert by_rule["rec-straggler"]["figure"] == "#fig-lateness"  # rank 5's row is late in every instance
    assert by_rule["rec-straggler"]["cell"] == "#cell=5-6"  # rank 5 in the median step (6)
    browser.click(*_centre(browser, "#rec-straggler a.evidence", 1))  # follow the link: the cell opens
    browser.wait_for("document.getElementById('drill-detail').dataset.cell === '5-6'")
    open_report(browser, page, "#heatmap=wait_us")  # a link can pick the heatmap's figure
    visible = browser.evaluate(
        "document.getElementById('fig-heatmap').data.map(function (t) { return t.visible; })"
    )
    assert visible == [False, False, False, True]
    assert_clean(page_state(browser))


def _overlaps(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["left"] < b["right"]
        and b["left"] < a["right"]
        and a["top"] < b["bottom"]
        and b["top"] < a["bottom"]
    )


def test_the_mode_bar_stays_off_titles_legends_and_menus(
    browser: Browser, sample_analysis: RunAnalysis, tmp_path: Path
) -> None:
    open_report(browser, written(tmp_path, sample_analysis))
    boxes = browser.evaluate(
        "Array.prototype.map.call(document.querySelectorAll('div.figure.js-plotly-plot'), function (gd) {"
        " function boxes(selector) { return Array.prototype.map.call(gd.querySelectorAll(selector), function "
        "(el) {"
        "   var r = el.getBoundingClientRect(); return {left: r.left, right: r.right, top: r.top, bottom: "
        "r.bottom}; })"
        "   .filter(function (r) { return r.right > r.left && r.bottom > r.top; }); }"
        " return {id: gd.id, modebar: boxes('.modebar'), others: boxes('.gtitle, .legend, "
        ".updatemenu-header-group,"
        " .colorbar, .annotation')}; })"
    )
    assert boxes
    for figure in boxes:
        assert len(figure["modebar"]) == 1, figure["id"]
        clashes = [other for other in figure["others"] if _overlaps(figure["modebar"][0], other)]
        assert clashes == [], figure["id"]


def _scaled_analysis(ranks: int) -> RunAnalysis:
    """`ranks` varied copies of sample_traces/dp8_straggler's rank summaries, reduced
    (benchmarks/reduce_scale.py)."""
    import importlib.util
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
    analysis: RunAnalysis = reduce_summaries(summaries)
    return analysis


def _record(ranks: int, size_mb: float, load_s: float) -> None:
    line = (
        f"{ranks} ranks: report {size_mb:.2f} MB, in-browser load (navigation to every figure drawn) "
        f"{load_s:.2f} s\n"
    )
    artifact(f"report-scale-{ranks}.txt").write_text(line, encoding="utf-8")


def test_64_ranks_load_clean_and_drill_down(browser: Browser, tmp_path: Path) -> None:
    analysis = _scaled_analysis(64)
    page = written(tmp_path, analysis)
    size_mb = page.stat().st_size / 1e6
    load_s = open_report(browser, page)
    _record(64, size_mb, load_s)
    state = page_state(browser)
    assert_clean(state)
    assert size_mb < MAX_REPORT_MB
    assert load_s < MAX_LOAD_S
    budget = next(f for f in state["figures"] if f["id"] == "fig-budget")
    assert budget["title"].startswith("Median step per rank: 64 ranks")  # a distribution, not 64 bars
    assert browser.evaluate("document.querySelector('#time-budget details.folded') !== null")
    shot(browser, "report-64-ranks.png")
    click_cell_and_check(browser, analysis, 37, 2)
    shot(browser, "report-64-ranks-drilldown.png", "#drilldown")
    assert_clean(page_state(browser))


def test_1024_ranks_stay_small_and_load_fast(browser: Browser, tmp_path: Path) -> None:
    page = written(tmp_path, _scaled_analysis(1024))
    size_mb = page.stat().st_size / 1e6
    load_s = open_report(browser, page)
    _record(1024, size_mb, load_s)
    assert_clean(page_state(browser))
    assert size_mb < MAX_REPORT_MB
    assert load_s < MAX_LOAD_S
    rows = browser.evaluate("document.getElementById('fig-heatmap').data[0].y.length")
    assert rows == 1024  # every rank in the heatmap


def _kernel_ms_by_group(run: Path) -> dict[str, float]:
    """Kernel time per process group over every rank, by a plain pass over the trace files (ms)."""
    import gzip

    totals: dict[str, float] = {}
    for path in run.glob("*.json.gz"):
        for event in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]:
            group = event.get("args", {}).get("Process Group Name") if event.get("cat") == "kernel" else None
            if group is not None:
                totals[str(group)] = totals.get(str(group), 0.0) + event["dur"] / 1000
    return totals


def _cell_ms(text: str) -> float:
    """A cell of a column in ms: a bare number is ms, one under 1 ms carries its unit (`406.8 us`)."""
    number, _, unit = text.partition(" ")
    return float(number) / 1000 if unit == "us" else float(number)


def test_collectives_by_cost_open_their_instances(browser: Browser, tmp_path: Path) -> None:
    """sample_traces/pp4_mismatch: all-reduces and point-to-point transfers in four process groups."""
    run = SAMPLES / "pp4_mismatch"
    open_report(browser, written(tmp_path, analyze(load_run(run, workers=1))))
    rows = browser.evaluate(
        "Array.prototype.map.call(document.querySelectorAll('#table-collectives-cost > tbody > tr'), "
        "function (tr) {"
        " return [tr.cells[0].textContent, tr.cells[5].textContent.trim(),"
        " tr.querySelectorAll('details tbody tr').length]; })"
    )
    rows = [(group, _cell_ms(text), instances) for group, text, instances in rows]
    costs = [cost for _, cost, _ in rows]
    assert costs == sorted(costs, reverse=True)  # costliest first
    by_group: dict[str, float] = {}
    for group, cost, _ in rows:
        by_group[group] = by_group.get(group, 0.0) + cost
    expected = _kernel_ms_by_group(run)
    assert by_group.keys() == expected.keys()
    assert all(by_group[g] == pytest.approx(expected[g], abs=0.002 * len(rows)) for g in expected)
    assert all(instances > 0 for _, _, instances in rows)
    browser.click(*_centre(browser, "#table-collectives-cost details summary"))  # open the costliest row
    link = browser.wait_for(
        "(function () { var a = document.querySelector('#table-collectives-cost details[open] tbody a');"
        " return a && a.getBoundingClientRect().height > 0 ? a.getAttribute('href') : null; })()"
    )
    browser.click(*_centre(browser, "#table-collectives-cost details[open] tbody a"))
    cell = link.removeprefix("#cell=")
    browser.wait_for(f"document.getElementById('drill-detail').dataset.cell === '{cell}'")
    assert_clean(page_state(browser))


COMM_ROOFLINE_POINTS = (
    "(function () { var plot = document.getElementById('fig-comm-roofline');"
    " return plot && plot.data ? plot.data.filter(function (t) {"
    " return (t.mode || '').indexOf('markers') >= 0; })"
    ".map(function (t) { return t.text[0]; }) : null; })()"
)


@pytest.mark.parametrize(
    ("folder", "options"),
    [
        (SAMPLES / "dp8_straggler", {}),
        (REAL_KINETO / "h200_pt211_gloo_dp2", {"host_bandwidth": "2e9"}),
    ],
    ids=["readme-sample", "gloo-dp2"],
)
def test_the_communication_roofline_draws_a_point_per_dimension_line(
    browser: Browser, tmp_path: Path, folder: Path, options: dict[str, Any]
) -> None:
    """The communication roofline's panel (its own element id, not the kernel roofline's) draws at least one
    point per dimension line of the run."""
    if not folder.exists():
        pytest.skip(f"{folder} is absent")
    from traceview import api

    analysis = api.analyze(folder, workers=1, **options).raw
    assert analysis.dimensions is not None
    lines = set(analysis.dimensions.lines.get_column("dimension").to_list())
    open_report(browser, written(tmp_path, analysis))
    drawn = browser.evaluate(COMM_ROOFLINE_POINTS)
    assert drawn is not None, "the communication roofline's panel is empty"
    assert lines <= set(drawn)
    assert_clean(page_state(browser))
