"""The headline and the advice: each rule of `traceview.verdict` on facts written by hand (docs/metrics.md,
"Verdict"), and the facts read from a real analysis of the samples."""

from __future__ import annotations

from pathlib import Path

import pytest

from traceview import analyze
from traceview.verdict.facts import Facts
from traceview.verdict.headline import STRAGGLER_COST_MIN, prediction_line, verdict
from traceview.verdict.recommend import recommendations

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"

# a step of 100 ms: 60 ms of compute, 30 ms of communication of which 10 ms runs under compute
BUDGET = {
    "step_us": 100_000.0,
    "comp_us": 60_000.0,
    "comm_us": 30_000.0,
    "exposed_comm_us": 20_000.0,
    "exposed_comm_share": 20_000 / 100_000,
    "comm_share": 30_000 / 100_000,
    "idle_us": 10_000.0,
    "idle_share": 10_000 / 100_000,
    "overlap_ratio": 10_000 / 30_000,
    "gamma": 30_000 / 60_000,
    "exposed_gamma": 20_000 / 60_000,
    "overlap_us": 10_000.0,
    "hideable_us": 60_000.0 - 10_000.0,  # T_comp - overlap: the compute overlap could hide under
}
STRAGGLER = {
    "stragglers": 1.0,
    "straggler_rank": 5.0,
    "straggler_last_share": 36 / 40,
    "straggler_times_last": 36.0,
    "straggler_instances": 40.0,
    "straggler_group_size": 8.0,
    "straggler_median_lateness_us": 3_000.0,
    "straggler_cost_us": 12_000.0,
    "straggler_cost_share": 12_000 / 100_000,
}


def _verdict(numbers: dict[str, float], words: dict[str, str] | None = None) -> str:
    return verdict(Facts(numbers, words or {})).label


def test_compute_bound_is_the_plain_budget() -> None:
    found = verdict(Facts(BUDGET))
    assert found.label == "compute-bound"
    assert found.sentence.startswith("Compute-bound: communication takes 0.50x the compute time")
    assert "20% of the step is communication nothing hides (exposed gamma 0.33)" in found.sentence


def test_communication_bound_needs_gamma_above_one() -> None:
    numbers = BUDGET | {"comp_us": 20_000.0, "gamma": 30_000 / 20_000, "transfer_gamma": 25_000 / 20_000}
    assert _verdict(numbers) == "communication-bound"


def test_waiting_bound_when_the_transfer_alone_fits_under_compute() -> None:
    # 30 ms of communication against 20 ms of compute, but the fastest member of each collective took 8 ms
    numbers = BUDGET | {"comp_us": 20_000.0, "gamma": 30_000 / 20_000, "transfer_gamma": 8_000 / 20_000}
    found = verdict(Facts(numbers))
    assert found.label == "waiting-bound"
    assert "only 0.40x is transfer" in found.sentence


def test_no_compute_and_no_communication_each_have_their_rule() -> None:
    assert _verdict(BUDGET | {"comp_us": 0.0, "gamma": 0.0}) == "no-compute"
    assert _verdict(BUDGET | {"comm_us": 0.0, "gamma": 0.0}) == "no-communication"
    assert _verdict({"step_us": 0.0}) == "no-device-activity"
    assert _verdict({}) == "no-device-activity"


def test_idle_bound_when_the_gpu_waits_more_than_it_works() -> None:
    numbers = BUDGET | {"idle_us": 90_000.0, "idle_share": 0.9}
    assert _verdict(numbers) == "idle-bound"


def test_a_mismatch_is_the_finding_whatever_the_budget_says() -> None:
    numbers = BUDGET | STRAGGLER | {"mismatches": 2.0, "mismatch_step": 3.0, "mismatch_rank": 1.0}
    found = verdict(Facts(numbers, {"mismatch_group": "2", "mismatch_detail": "extra AllReduce"}))
    assert found.label == "call-mismatch"
    assert "2 mismatch(es), the first in process group 2, step 3, rank 1 (extra AllReduce)" in found.sentence
    assert "Apart from that, the run is compute-bound" in found.sentence


def test_a_costly_straggler_sets_the_pace_with_its_cost_and_cause() -> None:
    found = verdict(Facts(BUDGET | STRAGGLER, {"straggler_cause": "slow compute"}))
    assert found.label == "straggler-bound"
    assert "its lateness costs 12.00 ms per step (12% of the step)" in found.sentence
    assert "likely cause: slow compute" in found.sentence
    assert "it arrives last in 36 of its 40 collectives (1 in 8 would be chance)" in found.sentence


def test_a_costly_straggler_comes_before_idle() -> None:
    # the straggler's host sleeps: its own device idles, and that idle is the straggler's, not the input
    # pipeline's
    idle = BUDGET | {"idle_us": 90_000.0, "idle_share": 0.9}  # above compute + exposed communication
    assert _verdict(idle | STRAGGLER, {"straggler_cause": "late launch"}) == "straggler-bound"
    assert _verdict(idle) == "idle-bound"


def test_a_cheap_straggler_leaves_the_budget_verdict() -> None:
    cheap = STRAGGLER | {"straggler_cost_share": STRAGGLER_COST_MIN / 2}
    assert _verdict(BUDGET | cheap) == "compute-bound"


def test_the_prediction_line_says_measured_against_predicted_or_what_is_missing() -> None:
    numbers = BUDGET | {"gamma_pred": 0.25, "gamma_ratio": 0.5 / 0.25}
    line = prediction_line(Facts(numbers, {"dominant_factor": "waiting on peers"}))
    assert line == (
        "Measured gamma 0.50 against 0.25 predicted by the alpha-beta model (measured / predicted 2.00x; "
        "the gap is mostly waiting on peers)."
    )
    missing = prediction_line(Facts(BUDGET, {"prediction_missing": "the local batch"}))
    assert missing == "Predicted gamma not computed: the local batch."
    found = verdict(Facts(numbers))
    assert (found.gamma, found.gamma_pred, found.gamma_ratio) == (0.5, 0.25, 2.0)


def test_advice_on_a_straggler_run_is_the_straggler_not_overlap() -> None:
    # peers spend 12% of the step waiting: of the 20% exposed, only 8% is transfer overlap could hide
    numbers = BUDGET | STRAGGLER | {"median_wait_share": 0.12}
    fired = recommendations(Facts(numbers, {"straggler_cause": "slow compute"}))
    assert fired[0].rule == "straggler"
    assert fired[0].sentence.startswith("Rank 5's late arrival costs 12.00 ms per step (12% of the step)")
    assert "Check its GPU" in fired[0].sentence
    assert fired[0].score == pytest.approx(0.12)
    exposed = [r for r in fired if r.rule == "exposed-communication"]
    assert not exposed  # 0.20 - 0.12 = 0.08 < 0.10 at stake


def test_advice_cites_what_hiding_the_exposed_transfer_saves() -> None:
    fired = recommendations(Facts(BUDGET | {"median_wait_share": 0.05}))
    exposed = next(r for r in fired if r.rule == "exposed-communication")
    assert exposed.score == pytest.approx(0.20 - 0.05)
    assert "of which 5% of the step is waiting for late peers" in exposed.sentence
    assert "would save up to 15% of the step" in exposed.sentence


def test_mismatch_and_suspected_kernels_have_their_advice() -> None:
    numbers = BUDGET | {"mismatches": 1.0, "mismatch_step": 3.0, "suspected_kernels": 2.0}
    words = {"mismatch_group": "2", "suspected_names": "my_allreduce_kernel, foo_all_gather"}
    fired = {r.rule: r for r in recommendations(Facts(numbers, words))}
    assert fired["call-mismatch"].sentence.startswith("Make every rank call the same collectives")
    assert "in process group 2 at step 3" in fired["call-mismatch"].sentence
    assert "(my_allreduce_kernel, foo_all_gather)" in fired["suspected-communication"].sentence


def test_the_mismatch_sample_says_its_planted_mismatch_first() -> None:
    analysis = analyze(SAMPLES / "pp4_mismatch", workers=1).raw
    assert analysis.verdict.label == "call-mismatch"
    assert analysis.recommendations is not None
    top = analysis.recommendations.top
    assert top is not None
    assert top.rule == "call-mismatch"


def test_a_host_timeline_run_says_the_host_is_idle() -> None:
    numbers = BUDGET | {"idle_us": 90_000.0, "idle_share": 0.9}
    found = verdict(Facts(numbers, {"worker": "host"}))
    assert found.sentence.startswith("The host is idle 90% of the median step")
