"""The report's charts without a browser: noise drawn as 0 in every chart, the palette, outliers named once
per value, rank lists as ranges, the straggler sentence bounded."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from traceview.reports.html._page_filters import rank_ranges
from traceview.reports.html.drilldown import drill_data
from traceview.reports.html.figures import OKABE_ITO, TINTS, Outliers, rank_distribution
from traceview.reports.html.page import page_figures, render_html

from traceview.across_ranks.analysis import straggler_sentence
from traceview.core.outliers import rank_outliers
from traceview.load.inputs import load_run
from traceview.reduce.analysis import RunAnalysis, analyze

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
NOISE_US = 3e-7
"""A planted time far below a microsecond: what float rounding of `ts + dur` leaves where there is nothing."""


@pytest.fixture(scope="module")
def sample() -> RunAnalysis:
    return analyze(load_run(SAMPLES / "dp8_straggler", workers=1))


def _noisy(frame: pl.DataFrame) -> pl.DataFrame:
    """Every zero of every float `_us` column of `frame` replaced by `NOISE_US`."""
    columns = [n for n, t in frame.schema.items() if n.endswith("_us") and t == pl.Float64]
    return frame.with_columns(
        pl.when(pl.col(c) == 0).then(NOISE_US).otherwise(pl.col(c)).alias(c) for c in columns
    )


def with_noise(analysis: RunAnalysis) -> RunAnalysis:
    """`analysis` with noise planted in every table of its results (one level of dataclasses down)."""
    changed = {}
    for field in dataclasses.fields(analysis):
        part = getattr(analysis, field.name)
        if not dataclasses.is_dataclass(part) or isinstance(part, type):
            continue
        frames = {
            f.name: _noisy(getattr(part, f.name))
            for f in dataclasses.fields(part)
            if isinstance(getattr(part, f.name), pl.DataFrame)
        }
        if frames:
            changed[field.name] = dataclasses.replace(part, **frames)
    return dataclasses.replace(analysis, **changed)


def _numbers(value: Any) -> list[float]:
    if isinstance(value, list | tuple):
        return [n for item in value for n in _numbers(item)]
    return [float(value)] if isinstance(value, int | float) and not isinstance(value, bool) else []


def test_every_chart_draws_sub_microsecond_noise_as_zero(sample: RunAnalysis) -> None:
    noisy = with_noise(sample)
    idle = noisy.budget.per_rank.get_column("idle_us")
    assert 0 < idle.min() <= idle.max() < 1e-3  # dp8 has no idle but float rounding, and the planted noise
    drawn = []
    for figure_id, figure in page_figures(noisy).items():
        for trace in json.loads(figure.to_json())["data"]:
            for key in ("x", "y", "z", "base"):
                drawn += [(figure_id, key, v) for v in _numbers(trace.get(key))]
    data = drill_data(noisy)
    drawn += [("drill cells", key, v) for key, values in data["cells"].items() for v in _numbers(values)]
    drawn += [
        ("drill segments", step, v)
        for step, ranks in data["segments"].items()
        for segments in ranks.values()
        for v in _numbers([s[2:] for s in segments])
    ]
    assert drawn
    assert [d for d in drawn if 0 < abs(d[2]) < 1e-3] == []  # ms: nothing between 0 and 1 us


def _colours(page: str) -> set[str]:
    islands = re.findall(r'<script type="application/json" id="(fig-[^"]+)-data">(.*?)</script>', page, re.S)
    traces = [trace for _, text in islands for trace in json.loads(text)["data"]]
    for trace in traces:  # heatmaps' scales (Viridis, RdBu) are spelled out as colours
        trace.pop("colorscale", None)
    return {c.upper() for c in re.findall(r"#[0-9a-fA-F]{6}", json.dumps(traces))}


def _grey(colour: str) -> bool:
    channels = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
    return max(channels) - min(channels) <= 12


@pytest.mark.parametrize("run", ["dp8_straggler", "pp4_mismatch"])
def test_figure_colours_are_the_colour_blind_safe_palette(run: str) -> None:
    page = render_html(analyze(load_run(SAMPLES / run, workers=1)))
    colours = _colours(page)
    assert colours
    allowed = {c.upper() for c in (*OKABE_ITO, *TINTS)}
    assert {c for c in colours if c not in allowed and not _grey(c)} == set()
    own = re.sub(r'<script id="plotly-js">.*?</script>', "", page, flags=re.S).upper()
    assert "#D62728" not in own  # no red/green pair anywhere in the page's own styles (plotly's defaults)
    assert "#2CA02C" not in own


def test_outliers_at_one_value_share_one_label() -> None:
    values = {r: 10.0 + (r % 5) * 0.01 for r in range(40)}
    values |= {3: 50.0, 11: 50.0, 19: 50.0, 27: 50.0, 35: 50.0, 7: -20.0}
    per_rank = pl.DataFrame({"rank": list(values), "t": list(values.values())})
    found = rank_outliers(per_rank, ["t"])  # the analyses' rule: beyond 1.5 IQR of the quartiles
    assert found.rows() == [("t", 50.0, [3, 11, 19, 27, 35]), ("t", -20.0, [7])]
    figure = rank_distribution(per_rank, [("time", "t", "#0072B2")], "Time per rank", Outliers(found), "ms")
    labels = {a.text: a.y for a in figure.layout.annotations}
    assert labels == {"ranks 3, 11, 19, 27 (+1)": 50.0, "rank 7": -20.0}
    assert figure.layout.title.text == "Time per rank: 40 ranks, outliers named"


def test_rank_lists_are_written_as_ranges() -> None:
    assert rank_ranges("[0, 1, 2, 3, 8, 10, 11]") == "0-3, 8, 10-11"
    assert rank_ranges(list(range(1024))) == "0-1023"
    assert rank_ranges("[5]") == "5"
    assert rank_ranges("[0, 1, 2, ...]") == "[0, 1, 2, ...]"  # not a plain list: as it is
    assert rank_ranges(None) == "-"


def test_the_straggler_sentence_describes_three_and_lists_the_rest() -> None:
    flagged = [2, 9, 13, 20, 31]
    per_rank = pl.DataFrame(
        {
            "rank": list(range(32)),
            "straggler": [r in flagged for r in range(32)],
            "times_last": [10] * 32,
            "instances": [40] * 32,
            "median_lateness_us": [1500.0] * 32,
            "cause": ["slow compute"] * 32,
            "comp_excess_us": [900.0] * 32,
            "launch_gap_excess_us": [0.0] * 32,
            "lateness_cost_us": [1200.0] * 32,
            "lateness_cost_share": [0.06] * 32,
            "clock_uncertainty_us": [0.0] * 32,
        }
    )
    sentence = straggler_sentence(per_rank, pl.DataFrame({"skew_us": [1.0]}))
    assert sentence.count("is a straggler") == 3
    assert sentence.startswith("Rank 2 is a straggler")
    assert "and 2 more stragglers (ranks 20, 31;" in sentence


def test_the_drill_down_names_each_segments_longest_kernel(sample: RunAnalysis) -> None:
    """Every kept segment with kernels points at its longest kernel's name: rank 5's step 3 holds the
    all-reduce kernel the sample's traces name."""
    data = drill_data(sample)
    names = data["kernel_names"]
    segments = data["segments"]["3"]["5"]
    assert all(-1 <= s[5] < len(names) for s in segments)
    assert all((s[5] >= 0) == (s[4] > 0) for s in segments)
    comm = [names[s[5]] for s in segments if s[1] == "AllReduce"]
    assert comm
    assert all(name.startswith("ncclKernel_AllReduce_RING_LL_Sum") for name in comm)
