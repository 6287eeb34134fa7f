"""Advice ranked by the critical path (docs/metrics.md section 5): a rule whose cause the path's categories
hold takes its score (share of the step) and saved_us (time per step) from them and cites their top holder;
a stake under 3% of the step keeps it out. Factory facts and a factory trace; expected values as arithmetic.
"""

from __future__ import annotations

from pathlib import Path

import traceview
from tests.kineto_factory import document, kernel, launch, step, write
from traceview.verdict.facts import Facts
from traceview.verdict.recommend import recommendations

EXPOSED = {
    "exposed_comm_share": 300 / 1000,
    "exposed_comm_us": 300.0,
    "step_us": 1000.0,
    "exposed_gamma": 0.5,
    "hideable_us": 600.0 - 0.0,  # T_comp 600 us, none of it under communication: overlap is not the limit
}


def _exposed(path: dict[str, float], words: dict[str, str] | None = None) -> list[tuple[str, float, float]]:
    facts = Facts({**EXPOSED, **path}, words or {})
    return [(r.rule, r.score, r.saved_us or 0.0) for r in recommendations(facts)]


def test_without_the_path_the_rule_keeps_its_own_figures() -> None:
    assert _exposed({}) == [("exposed-communication", 300 / 1000, 300 / 1000 * 1000)]


def test_the_path_sets_score_and_saved_and_names_the_holder() -> None:
    path = {"path_step_us": 1000.0, "path_comm_transfer_us": 250.0}
    top = {"path_top_comm_transfer_us": 200.0, "path_top_comm_transfer_calls": 4.0}
    facts = Facts({**EXPOSED, **path, **top}, {"path_top_comm_transfer_name": "ncclDevKernel_AllReduce"})
    found = recommendations(facts)
    assert [(r.rule, r.score, r.saved_us) for r in found] == [("exposed-communication", 250 / 1000, 250.0)]
    assert "4 `ncclDevKernel_AllReduce` event(s) hold 200.0 us of the 1.00 ms step" in found[0].sentence


def test_a_stake_under_three_percent_stays_out() -> None:
    assert _exposed({"path_step_us": 1000.0, "path_comm_transfer_us": 29.0}) == []  # 2.9% of the step
    kept = _exposed({"path_step_us": 1000.0, "path_comm_transfer_us": 30.0})
    assert kept == [("exposed-communication", 30 / 1000, 30.0)]


def test_a_traced_exposed_all_reduce(tmp_path: Path) -> None:
    """One rank: a GEMM from 0 to 300 us, an all-reduce kernel from 300 to 900 us nothing hides, the device
    idle from 900 to 1,000 us; the all-reduce holds 600 us of the path, but overlap can hide it only under
    the GEMM's 300 us (none of it under communication): the stake is min(600, 300 - 0)."""
    all_reduce = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
    events = [
        step(1, 0, 1000, on_gpu=True),
        step(1, 0, 1000),
        launch(0, 1, dur=1),
        kernel("ampere_sgemm_128x64_nn", 0, 300, correlation=1),
        launch(1, 2, dur=1),
        kernel(all_reduce, 300, 600, correlation=2, stream=20),
    ]
    analysis = traceview.analyze(write(document(events), tmp_path / "rank0.json")).raw
    advice = {r.rule: r for r in analysis.recommendations.items}
    exposed = advice["exposed-communication"]
    assert exposed.saved_us == min(900 - 300, 300 - 0)
    assert exposed.score == min(900 - 300, 300 - 0) / 1000
    assert "(300.0 us per step), so it would save up to 30% of the step" in exposed.sentence
    assert f"1 `{all_reduce[:80]}` event(s) hold 600.0 us of the 1.00 ms step" in exposed.sentence


def _straggler_and_idle(path_idle_us: float) -> Facts:
    """A 100 ms step: rank 7 late by 20 ms at each collective (its peers' cost, 20% of the step), the
    device idle 52 ms on the path (budget and path agree)."""
    return Facts(
        {
            "step_us": 100_000.0,
            "idle_us": path_idle_us,
            "idle_share": path_idle_us / 100_000,
            "comp_us": 30_000.0,
            "exposed_comm_us": 18_000.0,
            "exposed_comm_share": 0.18,
            "exposed_gamma": 0.6,
            "gamma": 0.7,
            "path_step_us": 100_000.0,
            "path_idle_us": path_idle_us,
            "straggler_rank": 7.0,
            "straggler_cost_us": 20_000.0,
            "straggler_cost_share": 0.2,
            "straggler_times_last": 6.0,
            "straggler_instances": 6.0,
            "straggler_group_size": 8.0,
            "straggler_median_lateness_us": 20_000.0,
        },
        {"worker": "GPU"},
    )


def test_the_verdict_and_the_first_advice_rank_by_the_same_stake() -> None:
    """52 ms of idle on the path outweighs the straggler's 20 ms: idle first in both; with 10 ms of idle
    (under the straggler's 20 ms and under the 15% idle advice threshold), the straggler leads both."""
    from traceview.verdict.headline import verdict

    idle = _straggler_and_idle(52_000.0)
    assert verdict(idle).label == "idle-bound"
    assert recommendations(idle)[0].rule == "idle-gpu"
    assert recommendations(idle)[0].score == 52_000 / 100_000
    straggler = _straggler_and_idle(10_000.0)
    assert verdict(straggler).label == "straggler-bound"
    assert recommendations(straggler)[0].rule == "straggler"
