"""The report page, the timeline behind it and the recommendation rules, on runs with figures known by hand.

The small run is `tests.report_factory` (its docstring gives every interval); expected values below are
written as arithmetic over those intervals.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from pathlib import Path

import plotly
import polars as pl
import pytest
from traceview.reports.html.figures import NOISE_FLOOR_MS, rank_bars
from traceview.reports.html.page import render_html

from tests import report_factory as rf
from traceview.load.inputs import load_run
from traceview.reduce.analysis import RunAnalysis, analyze
from traceview.timeline.step_view import offered_steps, step_lengths, timeline
from traceview.verdict.facts import Facts
from traceview.verdict.recommend import recommendations


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> RunAnalysis:
    folder = rf.write_run(tmp_path_factory.mktemp("small") / "run")
    return analyze(load_run(folder, workers=1))


def _islands(page: str) -> dict[str, dict]:
    found = re.findall(r'<script type="application/json" id="([^"]+)-data">(.*?)</script>', page, re.S)
    return {name: json.loads(text) for name, text in found}


# --- timeline -------------------------------------------------------------------------------------------


def test_median_step_is_the_median_length_not_the_middle_number(small: RunAnalysis) -> None:
    # lengths: step 1 = 1000, step 2 = 1200, step 3 = 900 on both ranks -> sorted 900, 1000, 1200 -> step 1
    assert small.timeline is not None
    assert small.timeline.median_step == 1
    assert small.timeline.offered_steps == [1, 2, 3]
    lengths = dict(
        zip(
            *small.timeline.steps.select("step", "median_step_us").to_dict(as_series=False).values(),
            strict=True,
        )
    )
    assert lengths == {1: 1000.0, 2: 1200.0, 3: 900.0}


def test_timeline_segments_of_the_median_step(small: RunAnalysis) -> None:
    assert small.timeline is not None
    step1 = small.timeline.segments.filter(pl.col("step") == 1)

    def spans(rank: int, lane: str) -> list[tuple[float, float]]:
        rows = step1.filter((pl.col("rank") == rank) & (pl.col("lane") == lane)).sort("start_us")
        return list(
            zip(rows.get_column("start_us").to_list(), rows.get_column("end_us").to_list(), strict=True)
        )

    shift = rf.RANK1_OFFSET_US  # rank 1's clock starts 20 us later: everything moves by that much
    assert spans(0, "compute") == [(100.0, 100.0 + 300.0), (600.0, 700.0)]
    assert spans(1, "compute") == [(100.0 + shift, 100.0 + 400.0 + shift), (600.0 + shift, 700.0 + shift)]
    assert spans(0, "comm") == [(500.0, 800.0)]
    assert spans(0, "memory") == [(900.0, 950.0)]
    # idle = the window [0, 1000) minus [100, 400) u [500, 800) u [600, 700) u [900, 950)
    assert spans(0, "idle") == [(0.0, 100.0), (400.0, 500.0), (800.0, 900.0), (950.0, 1000.0)]
    # rank 1: gemm ends at 500 = where the AllReduce starts, so no idle between them
    assert spans(1, "idle") == [
        (0.0 + shift, 100.0 + shift),
        (800.0 + shift, 900.0 + shift),
        (950.0 + shift, 1000.0 + shift),
    ]
    comm = step1.filter(pl.col("lane") == "comm")
    assert set(comm.get_column("label").to_list()) == {"AllReduce"}
    assert set(comm.get_column("process_group").to_list()) == {rf.PG_DESC}
    assert step1.filter(pl.col("start_us") == 100.0).get_column("longest_kernel").to_list() == ["gemm"]


def test_idle_segments_agree_with_the_budget(small: RunAnalysis) -> None:
    assert small.timeline is not None
    idle = (
        small.timeline.segments.filter(pl.col("lane") == "idle")
        .group_by("rank", "step")
        .agg((pl.col("end_us") - pl.col("start_us")).sum().alias("timeline_idle"))
    )
    joined = idle.join(small.budget.per_step.select("rank", "step", "idle_us"), on=["rank", "step"])
    assert joined.height == 6
    assert (joined.get_column("timeline_idle") - joined.get_column("idle_us")).abs().max() < 1e-9


def test_offered_steps_keep_fastest_median_and_slowest() -> None:
    per_step = pl.DataFrame(
        {"rank": [0] * 20, "step": list(range(20)), "step_us": [float(100 + (7 * s) % 20) for s in range(20)]}
    )
    median, picks = offered_steps(step_lengths(per_step), max_steps=5)
    lengths = {s: 100 + (7 * s) % 20 for s in range(20)}
    by_length = sorted(range(20), key=lambda s: (lengths[s], s))
    assert median == by_length[(20 - 1) // 2]
    assert {by_length[0], by_length[-1], median} <= set(picks)
    assert len(picks) <= 6
    assert picks == sorted(picks)


def _crowded_events() -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    # 900 compute kernels of 5 us every 10 us on [0, 10000), none in [5000, 6000)
    starts = [10.0 * i for i in range(1000) if not 500 <= i < 600]
    events = pl.DataFrame(
        {
            "rank": [0] * len(starts),
            "start_us": starts,
            "end_us": [s + 5.0 for s in starts],
            "name": [f"k{i}" for i in range(len(starts))],
            "event_class": ["compute"] * len(starts),
            "collective_name": [None] * len(starts),
            "kernel_collective": [None] * len(starts),
            "pg_desc": [None] * len(starts),
            "pg_name": [None] * len(starts),
        },
        schema_overrides=dict.fromkeys(
            ("collective_name", "kernel_collective", "pg_desc", "pg_name"), pl.Utf8
        ),
    )
    windows = pl.DataFrame({"rank": [0], "step": [1], "window_start_us": [0.0], "window_end_us": [10000.0]})
    per_step = pl.DataFrame({"rank": [0], "step": [1], "step_us": [10000.0]})
    return events, windows, per_step


def test_timeline_is_bounded_and_says_how() -> None:
    events, windows, per_step = _crowded_events()
    bounded = timeline(events, windows, per_step, max_segments=20)
    # raw: 900 compute segments; idle = 898 gaps of 5 us + [4995, 6000) + the tail [9995, 10000) = 900
    assert bounded.raw_segments == 900 + 900
    # 2 groups (compute, idle) share 20 segments: 10 each
    assert bounded.drawn_segments == 20
    assert bounded.bridged_gap_us == 5.0
    compute = bounded.segments.filter(pl.col("lane") == "compute").sort("start_us")
    assert compute.height == 10
    assert compute.get_column("kernels").sum() == 900
    assert compute.get_column("covered_us").sum() == 900 * 5.0  # bridging draws wider, never claims more busy
    assert (compute.item(0, "start_us"), compute.item(-1, "end_us")) == (0.0, 9995.0)
    assert compute.filter(pl.col("end_us") == 4995.0).height == 1  # the big hole is kept as a boundary
    idle = bounded.segments.filter(pl.col("lane") == "idle")
    assert idle.height == 10
    assert idle.filter((pl.col("start_us") == 4995.0) & (pl.col("end_us") == 6000.0)).height == 1


def test_a_group_keeps_at_most_its_cap_however_many_segments_it_may_draw() -> None:
    events, windows, per_step = _crowded_events()
    capped = timeline(events, windows, per_step, max_segments=10_000)
    # 900 compute and 900 idle segments, each group cut to MAX_SEGMENTS_PER_GROUP (256): the rank's summary
    # grows with its steps, not its kernels
    assert capped.raw_segments == 1800
    assert capped.drawn_segments == 2 * 256
    assert capped.bridged_gap_us == 5.0  # every gap but the big hole is 5 us: said, though the map bridged it
    compute = capped.segments.filter(pl.col("lane") == "compute")
    assert compute.get_column("kernels").sum() == 900
    assert compute.get_column("covered_us").sum() == 900 * 5.0


def test_unbounded_timeline_keeps_every_segment() -> None:
    events, windows, per_step = _crowded_events()
    few = events.filter(pl.col("start_us") < 1000.0)  # 100 kernels: 100 compute and 100 idle segments
    full = timeline(few, windows, per_step, max_segments=10_000)
    assert full.raw_segments == full.drawn_segments == 200
    assert full.bridged_gap_us == 0.0


# --- recommendations ------------------------------------------------------------------------------------


def test_rules_fire_on_facts_and_cite_them() -> None:
    facts = {
        "step_us": 1000.0,
        "exposed_comm_us": 220.0,
        "exposed_comm_share": 220.0 / 1000.0,
        "exposed_gamma": 0.55,
        "idle_us": 50.0,
        "idle_share": 50.0 / 1000.0,
        "comm_us": 300.0,
        "comm_share": 0.3,
        "overlap_ratio": 80.0 / 300.0,
        "gamma": 0.75,
        "comp_us": 400.0,
        "overlap_us": 80.0,
        "hideable_us": 400.0 - 80.0,  # compute not under communication: overlap is not the limit here
    }
    fired = recommendations(Facts(facts))
    assert [r.rule for r in fired] == [
        "exposed-communication",
        "low-overlap",
    ]  # 0.22 > 0.3 * (1 - 0.267) * 0.9
    assert fired[0].sentence.startswith(
        "22% of the median step is exposed communication (220.0 us of 1.00 ms"
    )
    assert dict(fired[0].facts)["exposed_comm_share"] == 0.22
    assert "overlap ratio 0.27" in fired[1].sentence


def test_rules_without_their_facts_stay_silent() -> None:
    assert (
        recommendations(Facts({"gamma": 3.0})) == ()
    )  # communication-bound also needs comm_us, comp_us, comm_share
    assert recommendations(Facts()) == ()


def test_small_run_recommendations(small: RunAnalysis) -> None:
    advice = small.recommendations
    assert advice is not None
    facts = advice.facts
    # medians over the six (rank, step) values: step [900,900,1000,1000,1200,1200] -> 1000;
    # idle rank 0 [350, 550, 300], rank 1 [250, 450, 200] -> (300 + 350) / 2
    assert facts["step_us"] == 1000.0
    assert facts["idle_share"] == (300.0 + 350.0) / 2 / 1000.0
    assert facts["exposed_comm_share"] == 200.0 / 1000.0
    assert facts["exposed_gamma"] == (200.0 / 400.0 + 200.0 / 500.0) / 2
    assert facts["slow_rank"] == 1
    assert facts["median_rank_comp_us"] == (400.0 + 500.0) / 2
    budget_rules = [r.rule for r in advice.items if r.section == "time-budget"]
    # scores: idle 0.325, exposed 0.2, low overlap 0.3 * (1 - 1/3) * 0.9 = 0.18, slow rank (500/450 - 1) / 2
    assert budget_rules == ["idle-gpu", "exposed-communication", "low-overlap", "slow-rank-compute"]
    assert advice.top is not None
    assert advice.top.rule == "idle-gpu"


# --- the page ---------------------------------------------------------------------------------------------


def test_page_structure(small: RunAnalysis) -> None:
    page = render_html(small, plotlyjs="inline")
    for element_id in (
        "run-meta",
        "verdict",
        "verdict-sentence",
        "verdict-figures",
        "top-recommendation",
        "timeline",
        "fig-timeline",
        "recommendations",
        "time-budget",
        "table-budget",
        "inputs",
    ):
        assert f'id="{element_id}"' in page, element_id
    assert "node-a" in page
    assert "2.4.0" in page
    assert "2.20.5" in page
    assert "NVIDIA A100-SXM4-80GB" in page
    verdict = page[page.index('id="verdict"') : page.index('id="timeline"')]
    assert "0.68" in verdict  # measured gamma (0.75 + 0.6) / 2 = 0.675
    assert "20%" in verdict  # exposed communication 200 / 1000
    assert "What to change first:" in verdict
    assert f"The GPU is idle {(300.0 + 350.0) / 2 / 1000.0:.0%} of the median step" in verdict
    assert "<th>step (ms)</th>" in page
    assert 'class="sortable"' in page


def test_page_is_offline_by_default(small: RunAnalysis) -> None:
    page = render_html(small)
    head = html.unescape(page[: page.index('<script id="plotly-js">')])
    assert "default-src 'none'" in head
    assert "connect-src 'none'" in head
    without_plotly = re.sub(r'<script id="plotly-js">.*?</script>', "", page, flags=re.S)
    assert not re.search(r'(src|href)="(https?:)?//', without_plotly)
    assert len(page) > 1_000_000  # plotly.js itself is inline


def test_cdn_mode_links_plotly_and_allows_only_that(small: RunAnalysis) -> None:
    page = render_html(small, plotlyjs="cdn")
    assert 'id="plotly-js"' not in page
    assert re.search(r'<script src="https://cdn\.plot\.ly/plotly-[0-9.]+\.min\.js"></script>', page)
    policy = html.unescape(page)
    assert re.search(r"script-src 'sha256-[A-Za-z0-9+/=]+' 'unsafe-eval' https://cdn\.plot\.ly;", policy)
    assert len(page) < 500_000
    # the CDN URL names the plotly.js release the Python package bundles (its package data's own header,
    # "plotly.js vX.Y.Z"), not the Python package's version
    version = re.search(r"plotly-([0-9.]+)\.min\.js", page).group(1)  # type: ignore[union-attr]
    bundled = (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_text(encoding="utf-8")[
        :200
    ]
    assert f"plotly.js v{version}\n" in bundled


def _policy_hashes(page: str) -> set[str]:
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page).group(1)  # type: ignore[union-attr]
    script_src = next(
        part for part in html.unescape(policy).split(";") if part.strip().startswith("script-src")
    )
    return set(re.findall(r"'sha256-([A-Za-z0-9+/=]+)'", script_src))


@pytest.mark.parametrize("mode", ["inline", "cdn"])
def test_every_inline_script_runs_by_its_hash_and_nothing_else_inline(small: RunAnalysis, mode: str) -> None:
    page = render_html(small, plotlyjs=mode)
    assert "unsafe-inline' 'unsafe-eval" not in page
    script_src = html.unescape(re.search(r"script-src[^;]*;", page).group(0))  # type: ignore[union-attr]
    assert "'unsafe-inline'" not in script_src
    executable = [
        body
        for attributes, body in re.findall(r"<script([^>]*)>(.*?)</script>", page, flags=re.DOTALL)
        if "application/json" not in attributes and "src=" not in attributes
    ]
    digests = {
        base64.b64encode(hashlib.sha256(body.encode("utf-8")).digest()).decode() for body in executable
    }
    assert digests == _policy_hashes(page)
    assert len(executable) == (2 if mode == "inline" else 1)


@pytest.mark.parametrize("mode", ["inline", "cdn"])
def test_no_unsafe_inline_styles_apply_by_hash_and_the_page_writes_no_style_attribute(
    small: RunAnalysis, mode: str
) -> None:
    page = render_html(small, plotlyjs=mode)
    policy = html.unescape(re.search(r'Content-Security-Policy" content="([^"]*)"', page).group(1))  # type: ignore[union-attr]
    assert "unsafe-inline" not in policy
    style_src = next(part for part in policy.split(";") if part.strip().startswith("style-src"))
    allowed = set(re.findall(r"'sha256-([A-Za-z0-9+/=]+)'", style_src))
    blocks = re.findall(r"<style[^>]*>(.*?)</style>", page, flags=re.DOTALL)
    assert len(blocks) == 1
    for text in [*blocks, ""]:  # the page's style block, and the empty element plotly.js fills by the CSSOM
        assert base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() in allowed
    markup = re.sub(r"<script[^>]*>.*?</script>", "", page, flags=re.DOTALL)
    assert not re.search(r"\sstyle\s*=", markup)


def test_timeline_figure_offers_every_step_and_starts_on_the_median(small: RunAnalysis) -> None:
    figure = _islands(render_html(small, plotlyjs="cdn"))["fig-timeline"]
    menu = figure["layout"]["updatemenus"][0]
    assert [b["label"].split()[1] for b in menu["buttons"]] == ["1", "2", "3"]
    assert menu["active"] == 0
    assert "median" in menu["buttons"][0]["label"]
    visible = [trace["name"] for trace in figure["data"] if trace.get("visible") is True]
    assert sorted(visible) == sorted(["idle", "memory", "compute", "AllReduce"])
    assert (
        figure["layout"]["template"]["layout"]["plot_bgcolor"] == "white"
    )  # the page's template, not plotly's
    compute = next(t for t in figure["data"] if t["name"] == "compute" and t["visible"] is True)
    assert sorted(zip(compute["y"], compute["base"], compute["x"], strict=True)) == sorted(
        [("rank 0", 0.1, 0.3), ("rank 0", 0.6, 0.1), ("rank 1", 0.12, 0.4), ("rank 1", 0.62, 0.1)]
    )


def test_page_is_well_formed(small: RunAnalysis) -> None:
    page = render_html(small, plotlyjs="cdn")
    assert page.count("<section") == page.count("</section>")
    assert page.rstrip().endswith("</html>")


def test_sub_microsecond_noise_is_drawn_as_zero() -> None:
    """Idle of 1e-9 us (float rounding of ts + dur) must not fill a bar chart whose axis autoscales to it."""
    per_rank = pl.DataFrame({"rank": [0, 1], "idle_ms": [1e-12, 2.5]})
    figure = rank_bars(
        per_rank, [("idle", "idle_ms", "#999999")], "t", yaxis_title="ms", floor=NOISE_FLOOR_MS
    )
    assert list(figure.data[0].y) == [0.0, 2.5]


def test_the_timeline_draws_ms_from_the_runs_start(small: RunAnalysis) -> None:
    """Step 2 drawn at its own time: the run starts with rank 0's step 1 at 0, so rank 0's gemm of step 2 sits
    at (1000 + 100) us = 1.1 ms, rank 1's 20 us later (its clock); the notebook's plot is the same figure."""
    from traceview.reports.html.plots import Plots

    figure = _islands(render_html(small, plotlyjs="cdn"))["fig-timeline"]
    assert figure["layout"]["xaxis"]["title"]["text"].startswith("ms from the run's start")
    per_step = len(figure["data"]) // 3  # one trace per label, step after step (steps 1, 2, 3)
    compute = next(t for t in figure["data"][per_step : 2 * per_step] if t["name"] == "compute")
    start, offset = rf.STEP_STARTS[1], rf.RANK1_OFFSET_US
    expected = [
        ("rank 0", (start + 100) / 1000, rf.GEMM_US[0] / 1000),
        ("rank 0", (start + 600) / 1000, 100 / 1000),
        ("rank 1", (start + 100 + offset) / 1000, rf.GEMM_US[1] / 1000),
        ("rank 1", (start + 600 + offset) / 1000, 100 / 1000),
    ]
    drawn = sorted(zip(compute["y"], compute["base"], compute["x"], strict=True))
    assert [row[0] for row in drawn] == [row[0] for row in sorted(expected)]
    flat = [value for row in drawn for value in row[1:]]
    assert flat == pytest.approx([value for row in sorted(expected) for value in row[1:]], abs=1e-6)
    notebook = Plots(small).timeline()
    assert notebook.layout.xaxis.title.text == figure["layout"]["xaxis"]["title"]["text"]
    assert (
        list(notebook.data[per_step + [t.name for t in notebook.data[per_step:]].index("compute")].base)
        == (compute["base"])
    )
