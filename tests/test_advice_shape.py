"""Advice that agrees with the run's own shape (docs/metrics.md section 5, "Overlap needs compute to hide
under" and "Bytes or calls"; "Communication roofline"): overlap advice is bounded by the compute not already
under communication, byte-reduction advice needs the bandwidth term to dominate, and the roofline's
efficiency is said as a bound beside the measured one. Factory facts with expected values as arithmetic, then
the samples and the real traces where the contradictions were seen."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from traceview.reports.json.summary import render_json

import traceview
from tests.shared_data import REAL_KINETO, requires_shared
from traceview.roofline.analysis import measured_efficiency
from traceview.verdict._comm_terms import floor_bandwidth
from traceview.verdict.facts import Facts
from traceview.verdict.recommend import recommendations

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
OVERLAP_RULES = {"exposed-communication", "low-overlap", "dimension-cost"}


def _comm_heavy(comp_us: float, overlap_us: float) -> dict[str, float]:
    """A 15 ms step of which 13 ms is communication nothing hides (no waiting), with `comp_us` of compute
    of which `overlap_us` already runs under communication."""
    step, comm, exposed = 15_000.0, 13_000.0, 13_000.0 - overlap_us
    return {
        "step_us": step,
        "comp_us": comp_us,
        "comm_us": comm,
        "comm_share": comm / step,
        "exposed_comm_us": exposed,
        "exposed_comm_share": exposed / step,
        "exposed_gamma": exposed / max(comp_us, 1.0),
        "gamma": comm / max(comp_us, 1.0),
        "overlap_us": overlap_us,
        "overlap_ratio": overlap_us / comm,
        "hideable_us": max(0.0, comp_us - overlap_us),
        "dimension_exposed_share": exposed / step,
        "dimension_exposed_us": exposed,
        "dimension_wait_us": 0.0,
    }


DP_WORDS = {
    "dimension": "dp",
    "dimension_name": "Data parallelism",
    "dimension_advice": "its gradient all-reduces should run under the backward pass",
    "dimension_link": "loopback",
}


def _rules(numbers: dict[str, float], words: dict[str, str] | None = None) -> dict[str, tuple[float, float]]:
    fired = recommendations(Facts(numbers, words or DP_WORDS))
    return {r.rule: (r.score, r.saved_us or 0.0) for r in fired}


def test_no_compute_no_overlap_advice() -> None:
    assert not OVERLAP_RULES & set(_rules(_comm_heavy(0.0, 0.0)))


def test_compute_under_three_percent_of_the_step_keeps_overlap_advice_out() -> None:
    assert not OVERLAP_RULES & set(_rules(_comm_heavy(440.0, 0.0)))  # 440 / 15,000 = 2.9%
    assert "communication-bound" in _rules(_comm_heavy(440.0, 0.0))


def test_overlap_advice_is_staked_by_the_compute_not_already_overlapped() -> None:
    fired = _rules(_comm_heavy(3_000.0, 1_000.0))
    hideable = 3_000.0 - 1_000.0
    exposed = 13_000.0 - 1_000.0
    assert fired["exposed-communication"] == pytest.approx((min(exposed, hideable) / 15_000, hideable))
    assert fired["low-overlap"][0] == pytest.approx(hideable / 15_000)
    assert fired["dimension-cost"][0] == pytest.approx(hideable / 15_000)


def test_the_saving_said_is_the_bounded_one() -> None:
    fired = recommendations(Facts(_comm_heavy(3_000.0, 1_000.0), DP_WORDS))
    exposed = next(r for r in fired if r.rule == "exposed-communication")
    assert "(2.00 ms per step), so it would save up to 13% of the step" in exposed.sentence  # 2,000 / 15,000


def test_a_dimension_whose_advice_is_not_overlap_is_not_bounded() -> None:
    words = DP_WORDS | {"dimension": "tp", "dimension_name": "Tensor parallelism"}
    assert _rules(_comm_heavy(0.0, 0.0), words)["dimension-cost"][0] == pytest.approx(13_000 / 15_000 * 0.95)


def test_inference_overlap_advice_is_bounded_too() -> None:
    """A forward-only run (autograd off, no training phase): its exposed-communication advice is overlap."""
    inference = {"grad_off_ranks": 1.0, "training_phases": 0.0}
    assert "exposed-communication-inference" not in _rules(_comm_heavy(0.0, 0.0) | inference)
    fired = _rules(_comm_heavy(3_000.0, 1_000.0) | inference)
    assert fired["exposed-communication-inference"][0] == pytest.approx((3_000 - 1_000) / 15_000)


def _gamma_sentence(extra: dict[str, float]) -> str:
    fired = recommendations(Facts(_comm_heavy(440.0, 0.0) | {"comm_call_bytes": 5_264.0} | extra, DP_WORDS))
    return next(r.sentence for r in fired if r.rule == "communication-bound")


def test_bytes_advice_only_where_the_bandwidth_term_dominates() -> None:
    assert "move fewer bytes" in _gamma_sentence({"comm_bw_term_share": 0.75})
    latency = _gamma_sentence({"comm_bw_term_share": 0.2})
    assert "move fewer bytes" not in latency
    assert "latency-bound (median call 5.1 KiB; the latency term k alpha holds 80%" in latency  # 5,264 / 1024
    assert "fewer, larger collectives" in latency


def test_the_floor_proves_latency_bound_and_nothing_else() -> None:
    floor = _gamma_sentence({"comm_bw_term_floor": 0.1})
    assert "even on the slowest link the tool knows, the latency term k alpha holds 90%" in floor
    unknown = _gamma_sentence({"comm_bw_term_floor": 0.7})
    assert "move fewer bytes" not in unknown
    assert "needs the link's bandwidth" in unknown


def test_measured_efficiency_is_one_less_the_exposed_share() -> None:
    assert measured_efficiency(74_000.0, 12_000.0) == pytest.approx(1 - 12_000 / 74_000)
    assert measured_efficiency(None, 12_000.0) is None
    assert measured_efficiency(100.0, 150.0) == 0.0


def _summary(path: Path) -> dict[str, object]:
    found: dict[str, object] = json.loads(render_json(traceview.analyze(path).raw))
    return found


def _items(summary: dict[str, object]) -> list[dict[str, object]]:
    return summary["recommendations"]["items"]  # type: ignore[index,no-any-return]


def test_gloo_dp2_is_latency_bound_and_not_told_to_overlap() -> None:
    """The sample's 2 ranks all-reduce 8,448 and 2,080 bytes per step (its job facts) under 0.5 ms of
    compute: even on the slowest link (f = 1, k = 2 at n = 2; host alpha 20 us) latency holds the time."""
    summary = _summary(SAMPLES / "gloo_dp2")
    items = _items(summary)
    assert not OVERLAP_RULES & {str(r["rule"]) for r in items}
    first = str(items[0]["sentence"])
    assert items[0]["rule"] == "communication-bound"
    assert "fewer, larger collectives" in first
    assert all("move fewer bytes" not in str(r["sentence"]) for r in items)
    bandwidth = (8_448 + 2_080) / floor_bandwidth()
    facts = summary["recommendations"]["facts"]  # type: ignore[index]
    assert facts["comm_bw_term_floor"] == pytest.approx(bandwidth / (bandwidth + 2 * 2 * 20e-6))


def test_dp8_straggler_roofline_says_the_bound_and_the_measured_efficiency() -> None:
    result = traceview.analyze(SAMPLES / "dp8_straggler")
    roofline = json.loads(render_json(result.raw))["roofline"]
    medians = result.time_budget.select(pl.col("step_us").median(), pl.col("exposed_comm_us").median())
    step, exposed = medians.row(0)
    assert roofline["measured_efficiency"] == pytest.approx(1 - exposed / step)
    assert roofline["measured_efficiency"] < 0.9  # 16% of the step is exposed communication
    assert "the roofline bounds the run's scaling efficiency at 100%" in roofline["sentence"]
    assert f"measured, {1 - exposed / step:.0%}" in roofline["sentence"]


@requires_shared
def test_a_trace_without_compute_gets_no_overlap_advice() -> None:
    items = _items(_summary(REAL_KINETO / "hta_large_integer"))
    assert not OVERLAP_RULES & {str(r["rule"]) for r in items}


@requires_shared
def test_a_bandwidth_bound_gloo_run_keeps_the_bytes_advice() -> None:
    """45 MiB all-reduces per call on a link measured at about 1.5 GB/s: the bandwidth term dominates."""
    summary = _summary(REAL_KINETO / "h200_pt211_gloo_dp2")
    facts = summary["recommendations"]["facts"]  # type: ignore[index]
    assert facts["comm_bw_term_share"] >= 0.5
    first = _items(summary)[0]
    assert first["rule"] == "communication-bound"
    assert "move fewer bytes" in str(first["sentence"])
    exposed = next(r for r in _items(summary) if r["rule"] == "exposed-communication")
    hideable = facts["comp_us"] - facts["overlap_us"]  # the compute overlap could hide under
    assert float(exposed["saved_us"]) == pytest.approx(hideable)  # type: ignore[arg-type]
