"""The communication roofline inherits the verdict's facts (docs/metrics.md, "Communication roofline"): host
collectives sit on the host level (no ridge when its link is unknown, the reason said), the `all` point's
efficiency is the run's, `roofline.points` has only its documented columns, and its report figure has an
element id of its own (the kernel roofline's is another) drawing one point per dimension line. The README's
sample and the real gloo DDP recording; figures checked in the page's data islands (a real browser:
tests/test_report_browser.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from traceview.reports.html.page import page_figures, render_html
from traceview.reports.json.summary import summary_document

from tests.shared_data import REAL_KINETO, requires_shared
from traceview import api
from traceview.load.inputs import load_run
from traceview.reduce.analysis import RunAnalysis, analyze

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
POINT_COLUMNS = [
    "dimension",
    "bytes_per_step",
    "level",
    "bandwidth_Bps",
    "ridge",
    "ccr",
    "ccr_over_ridge",
    "regime",
    "efficiency",
    "gamma_at_peak",
    "critical_batch",
]


def _islands(html: str) -> dict[str, object]:
    found = re.findall(r'<script type="application/json" id="([^"]+)-data">(.*?)</script>', html, re.S)
    return {name: json.loads(text) for name, text in found}


def _line_dimensions(analysis: RunAnalysis) -> set[str]:
    assert analysis.dimensions is not None
    return set(analysis.dimensions.lines.get_column("dimension").to_list())


def _markers(figure: object) -> list[str]:
    data = figure["data"]  # type: ignore[index]
    return [t["text"][0] for t in data if "markers" in t.get("mode", "")]


@pytest.fixture(scope="module")
def sample() -> RunAnalysis:
    return api.analyze(SAMPLES / "dp8_straggler", workers=1).raw  # with its run.json, as the README runs it


def test_the_sample_draws_its_communication_roofline_under_its_own_id(sample: RunAnalysis) -> None:
    html = render_html(sample)
    ids = re.findall(r'id="(fig-[^"]+)"', html)
    assert len(ids) == len(set(ids))  # every figure's element once
    assert "fig-comm-roofline" in ids
    figures = _islands(html)
    drawn = set(_markers(figures["fig-comm-roofline"]))
    assert _line_dimensions(sample) <= drawn  # a point per dimension line, `all` besides
    assert "all" in drawn
    assert set(page_figures(sample)) == set(figures)


def test_the_points_have_their_columns_and_the_all_point_the_runs_efficiency(sample: RunAnalysis) -> None:
    document = summary_document(sample)["roofline"]
    assert [list(p) for p in document["points"]] == [POINT_COLUMNS] * len(document["points"])
    (everything,) = [p for p in document["points"] if p["dimension"] == "all"]
    assert everything["efficiency"] == document["efficiency"]


@requires_shared
def test_gloo_collectives_sit_on_the_host_level_of_the_link_measured_from_the_run() -> None:
    """The gloo recording states no host link; its 56 all-reduces fit one (docs/metrics.md, "Links measured":
    B's interval within +-25%), which the prediction prices host collectives on, so the roofline places them
    against that link's ridge: R / B_host, with R = the intra-node ridge x the intra-node bandwidth."""
    analysis = analyze(load_run(REAL_KINETO / "h200_pt211_gloo_dp2"))
    roofline = analysis.roofline
    assert roofline is not None
    assert roofline.missing is None
    named = roofline.points.filter(roofline.points["dimension"] != "all")
    assert named.get_column("level").to_list() == ["host"] * named.height
    levels = {row["level"]: row for row in roofline.levels.iter_rows(named=True)}
    host, intra = levels["host"], levels["intra"]
    assert 1.3e9 < host["bandwidth_Bps"] < 1.9e9  # the fitted B, 1.56 GB/s [1.37, 1.81]
    assert host["ridge"] == pytest.approx(intra["ridge"] * intra["bandwidth_Bps"] / host["bandwidth_Bps"])
    assert named.get_column("ridge").to_list() == [host["ridge"]] * named.height
    assert "compute-bound" not in roofline.sentence  # 91% of the step is communication nothing hides
    assert "communication-bound" in roofline.sentence


@requires_shared
def test_gloo_collectives_on_a_stated_host_link_get_its_ridge() -> None:
    analysis = api.analyze(REAL_KINETO / "h200_pt211_gloo_dp2", host_bandwidth="2e9", workers=1).raw
    roofline = analysis.roofline
    assert roofline is not None
    levels = {row["level"]: row for row in roofline.levels.iter_rows(named=True)}
    assert levels["host"]["bandwidth_Bps"] == 2e9
    assert levels["host"]["ridge"] == pytest.approx(float(roofline.peak_flops or 0) / 2e9)
    dp = roofline.points.filter(roofline.points["dimension"] == "dp").row(0, named=True)
    assert dp["level"] == "host"
    assert dp["efficiency"] == pytest.approx(min(1.0, dp["ccr"] / dp["ridge"]))
    html = render_html(analysis)
    assert _line_dimensions(analysis) <= set(_markers(_islands(html)["fig-comm-roofline"]))


def test_the_critical_batch_of_the_sample_by_hand(sample: RunAnalysis) -> None:
    """dp8_straggler (run.json): P = 104,857,600, b = 16,384 tokens, bf16 gradients over K = 8 ranks on 2
    hosts of 4, B = 25 GB/s, A100 bf16 peak 312 TFLOP/s. CCR = 6 P b / (2 (K-1)/K x P x 2) = 6 b / 3.5; the
    inter-node ridge = 312e12 / 25e9 = 12,480; b* = b x ridge / CCR = 12,480 x 3.5 / 6 = 7,280 tokens."""
    roofline = sample.roofline
    assert roofline is not None
    dp = roofline.points.filter(roofline.points["dimension"] == "dp").row(0, named=True)
    assert dp["ccr"] == pytest.approx(6 * 16_384 / (2 * 7 / 8 * 2))
    assert dp["ridge"] == pytest.approx(312e12 / 25e9)
    assert dp["critical_batch"] == pytest.approx(12_480 * 3.5 / 6)


@requires_shared
def test_flops_the_prediction_doubts_are_doubted_on_the_roofline() -> None:
    """hta_16rank_job_rank0 (TorchRec): the FLOPs the trace suggests give well under 1% of the A100's peak,
    which the prediction doubts; the roofline's CCRs rest on the same FLOPs and say so first."""
    analysis = analyze(load_run(REAL_KINETO / "hta_16rank_job_rank0"))
    prediction, roofline = analysis.prediction, analysis.roofline
    assert prediction is not None
    assert prediction.trust is not None
    assert roofline is not None
    assert roofline.missing is None
    assert prediction.trust.achieved_over_peak is not None
    assert prediction.trust.achieved_over_peak < 0.01
    assert roofline.flops_doubt == prediction.trust.doubt
    assert roofline.sentence.startswith("FLOPs per step in doubt (achieved FLOP/s would be")
