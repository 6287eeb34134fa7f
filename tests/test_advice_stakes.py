"""Every recommendation staked on the one account of causes (docs/metrics.md section 5, "One measure: the
stake on the path"): a straggler's and a slow rank's `saved_us` from the replay's `no_straggler` lever where
it replayed the rank alone, else the time its peers' critical paths wait for it; a dimension's, an expert
group's and suspected kernels' from the path's time in their collectives or by name; every recommendation
ranked by `saved_us`, a measured stake under 3% left out, and the verdict's label the one whose advice ranks
first. Factory traces and facts, expected values as arithmetic; the samples and the real traces of
../shared for the property that the verdict and the first advice agree."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from traceview.reports.html.card import CARD_RECOMMENDATIONS, verdict_card
from traceview.reports.html.page import render_html
from traceview.reports.json.summary import summary_document
from traceview.reports.text.summary import render_summary

import traceview
from tests.kineto_factory import document, kernel, launch, step, write
from tests.shared_data import REAL_KINETO, real_dirs
from traceview.reduce.analysis import RunAnalysis
from traceview.verdict.facts import Facts
from traceview.verdict.headline import verdict
from traceview.verdict.recommend import recommendations

GEMM = "ampere_sgemm_128x64_nn"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
LATE = [200.0, 200.0, 220.0, 280.0, 300.0, 360.0]
"""Rank 1's host sleeps this long before each step's first launch (rank 0 at once): median 250 us, mean
1,560 / 6 = 260 us; median absolute deviation 50 us, so the size test's floor max(2 x 50, 20, 2% of 1 ms) =
100 us names it."""
STEP = 1000.0


def rank_events(rank: int) -> list[dict[str, Any]]:
    """Six 1 ms steps: a GEMM of 290 us launched at 5 us (rank 1: after its sleep), the all-reduce from the
    GEMM's end to 700 us (both ranks leave it together), a GEMM 700..900, idle to the step's end."""
    events: list[dict[str, Any]] = []
    for index, late in enumerate(LATE):
        start, sleep = index * STEP, late if rank == 1 else 0.0
        correlation = 10 * index
        events += [
            step(index + 1, start, STEP, on_gpu=True),
            step(index + 1, start, STEP),
            launch(start + 5 + sleep, correlation + 1),
            kernel(GEMM, start + 10 + sleep, 290, correlation=correlation + 1),
            launch(start + 20 + sleep, correlation + 2),
            kernel(NCCL, start + 300 + sleep, 400 - sleep, correlation=correlation + 2, stream=20),
            launch(start + 690, correlation + 3),
            kernel(GEMM, start + 700, 200, correlation=correlation + 3),
        ]
    return events


@pytest.fixture(scope="module")
def host_late(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("host_late")
    for rank in (0, 1):
        write(document(rank_events(rank), rank=rank, world_size=2, base_ns=0), folder / f"rank{rank}.json")
    return folder


@pytest.fixture(scope="module")
def replayed(host_late: Path) -> RunAnalysis:
    return traceview.analyze(host_late).raw


@pytest.fixture(scope="module")
def unreplayed(host_late: Path) -> RunAnalysis:
    """The same run replayed without the no_straggler lever: the stake comes from the path."""
    return traceview.analyze(host_late, levers=["as_recorded"]).raw


def _item(analysis: RunAnalysis, rule: str) -> Any:
    assert analysis.recommendations is not None
    return next(item for item in analysis.recommendations.items if item.rule == rule)


def test_the_straggler_is_named_and_its_stake_replayed(replayed: RunAnalysis) -> None:
    """Rank 1 alone is named, so the default `no_straggler` lever replays removing its lateness alone: the
    straggler's stake is that lever's saving (the replay's own arithmetic: tests/test_replay.py), its share
    of the path's 1 ms step the score, and the sentence says where it came from."""
    assert replayed.crossrank is not None
    assert replayed.crossrank.stragglers == (1,)
    assert replayed.replay is not None
    lever = replayed.replay.lever("no_straggler")
    assert lever is not None
    saved = lever["saved_us"]
    assert isinstance(saved, float)
    assert saved > 0
    straggler = _item(replayed, "straggler")
    assert straggler.saved_us == saved
    assert straggler.score == saved / STEP
    assert dict(straggler.facts)["straggler_saved_us"] == saved
    said = f"Removing its lateness saves {saved:.1f} us per median step (the replay's no_straggler lever)."
    assert said in straggler.sentence


def test_without_the_lever_the_peers_path_gives_the_stake(unreplayed: RunAnalysis) -> None:
    """Rank 0 waits for rank 1 from 300 to 300 + late inside the all-reduce, which holds its path then: its
    path's peer wait is `late` per step, the mean over its six steps 1,560 / 6 (rank 1 waits for nobody)."""
    path = unreplayed.critical_path
    assert path is not None
    assert path.waits_for(1) == pytest.approx(sum(LATE) / 6)
    assert path.waits_for(0) == 0
    straggler = _item(unreplayed, "straggler")
    assert straggler.saved_us == pytest.approx(sum(LATE) / 6)
    assert "Its peers' critical paths wait for it 260.0 us per step (mean over their steps)." in (
        straggler.sentence
    )


def test_the_verdict_and_the_first_advice_agree(unreplayed: RunAnalysis) -> None:
    """The straggler's 260 us against the idle's: the budget's run-median idle is (110 + (110 + 200)) / 2 of
    the twelve (rank 0 idles 10 + 100 us a step, rank 1 its sleep more: 21%, the idle advice fires), but the
    idle's stake is that of the ranks not named stragglers (rank 1's idle is its lateness): 110 us."""
    assert unreplayed.recommendations is not None
    items = unreplayed.recommendations.items
    assert (items[0].rule, items[0].saved_us) == ("straggler", pytest.approx(1560 / 6))
    idle = next(item for item in items if item.rule == "idle-gpu")
    assert idle.saved_us == pytest.approx(10 + 100)
    assert unreplayed.verdict.label == "straggler-bound"
    assert "Its peers' critical paths wait for it 260.0 us per step" in unreplayed.verdict.sentence
    saved = [item.saved_us for item in items]
    assert saved == sorted(saved, reverse=True)  # type: ignore[type-var]


def test_the_attributed_calls_sum_to_the_path(unreplayed: RunAnalysis) -> None:
    """Per (rank, step), the calls' attributed waits and transfers are the path's peer_wait and
    comm_transfer: rank 0's all-reduce 300..700 waits `late`, transfers 400 - late."""
    path = unreplayed.critical_path
    assert path is not None
    calls = path.calls.sort("rank", "step")
    rows = {(r["rank"], r["step"]): r for r in path.per_step.iter_rows(named=True)}
    for call in calls.iter_rows(named=True):
        row = rows[(call["rank"], call["step"])]
        assert call["wait_us"] == pytest.approx(row["peer_wait_us"])
        assert call["transfer_us"] == pytest.approx(row["comm_transfer_us"])
        late = LATE[call["step"] - 1]
        expected = (late, 400 - late) if call["rank"] == 0 else (0.0, 400 - late)
        assert (call["wait_us"], call["transfer_us"]) == pytest.approx(expected)
    assert path.held_by_groups([str(calls.item(0, "group"))], "wait_us") == pytest.approx(sum(LATE) / 12)
    transfer = sum(400 - late for late in LATE) * 2 / 12
    assert path.held_by_groups([str(calls.item(0, "group"))]) == pytest.approx(transfer)


SLOW = {
    "step_us": 100_000.0,
    "path_step_us": 100_000.0,
    "slow_rank": 3.0,
    "slow_rank_comp_us": 60_000.0,
    "median_rank_comp_us": 50_000.0,
    "slow_rank_times_last": 1.0,
    "slow_rank_instances": 12.0,
    "slow_rank_group_size": 4.0,
}


def test_a_slow_rank_nobody_waits_for_says_so_and_ranks_last() -> None:
    """20% more compute, but its peers' paths wait for it 1 ms a step (1% of the step): kept, its sentence
    says so, and it ranks under a 4 ms stake."""
    numbers = SLOW | {"slow_rank_saved_us": 1_000.0, "suspected_kernels": 1.0, "suspected_saved_us": 4_000.0}
    words = {"slow_rank_saved_by": "critical path", "suspected_names": "my_allreduce_kernel"}
    fired = recommendations(Facts(numbers, words))
    assert [(r.rule, r.saved_us) for r in fired] == [
        ("suspected-communication", 4_000.0),
        ("slow-rank-compute", 1_000.0),
    ]
    assert fired[1].score == 1_000 / 100_000
    assert "Its peers' critical paths wait for it 1.00 ms per step" in fired[1].sentence


def test_measured_stakes_under_three_percent_stay_out() -> None:
    """The suspected kernels hold 2.9 ms of the 100 ms step, the expert group's waits 2.9 ms: both out; at
    3 ms both in, ranked by what they hold (the MoE advice's 3.5 ms first)."""
    moe = {"moe_imbalance": 2.0, "moe_hottest_rank": 1.0, "moe_hottest_share": 2.0}
    base = SLOW | moe | {"suspected_kernels": 1.0}
    words = {"suspected_names": "my_allreduce_kernel"}
    small = recommendations(Facts(base | {"suspected_saved_us": 2_900.0, "moe_saved_us": 2_900.0}, words))
    assert {r.rule for r in small} == {"slow-rank-compute"}
    kept = recommendations(Facts(base | {"suspected_saved_us": 3_000.0, "moe_saved_us": 3_500.0}, words))
    assert [(r.rule, r.saved_us) for r in kept][:2] == [
        ("moe-imbalance", 3_500.0),
        ("suspected-communication", 3_000.0),
    ]


def test_a_dimension_ranks_by_its_collectives_path_time() -> None:
    """Two named dimensions, TP exposing 20 ms: its collectives hold 8 ms of transfer on the path (TP's
    advice is no overlap advice: no hideable bound), a straggler 12 ms: the straggler's advice and verdict
    lead; at 15 ms of TP transfer, the dimension's."""
    numbers = {
        "gamma": 1.2,
        "exposed_comm_share": 0.3,
        "exposed_gamma": 0.4,
        "step_us": 100_000.0,
        "path_step_us": 100_000.0,
        "dimensions_named": 2.0,
        "dimension_exposed_share": 0.2,
        "dimension_exposed_us": 20_000.0,
        "dimension_wait_us": 1_000.0,
        "straggler_rank": 3.0,
        "straggler_cost_share": 0.25,
        "straggler_cost_us": 25_000.0,
        "straggler_saved_us": 12_000.0,
        "straggler_times_last": 11.0,
        "straggler_instances": 12.0,
        "straggler_group_size": 4.0,
        "straggler_median_lateness_us": 2_000.0,
    }
    words = {
        "dimension": "tp",
        "dimension_name": "tensor parallelism",
        "dimension_advice": "advice",
        "dimension_link": "NVLink",
        "straggler_saved_by": "replay",
    }
    for tp_us, rule, label in (
        (8_000.0, "straggler", "straggler-bound"),
        (15_000.0, "dimension-cost", "dimension-bound"),
    ):
        facts = Facts(numbers | {"dimension_saved_us": tp_us}, words)
        assert recommendations(facts)[0].rule == rule
        assert verdict(facts).label == label


LABEL_ADVICE = {"straggler-bound": "straggler", "idle-bound": "idle-gpu", "dimension-bound": "dimension-cost"}
"""The verdict labels that state a stake, and the advice that states it."""
SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
RUNS = [p for p in sorted(SAMPLES.iterdir()) if p.is_dir()] + real_dirs(REAL_KINETO)


@pytest.mark.parametrize("run", RUNS, ids=[p.name for p in RUNS])
def test_every_run_ranks_its_advice_by_saved_and_agrees_with_its_verdict(run: Path) -> None:
    """Saved_us never rises down the list; of the advice that states a label's stake, the first ranked is
    the verdict's when the verdict is such a label."""
    analysis = traceview.analyze(run).raw
    assert analysis.recommendations is not None
    items = analysis.recommendations.items
    saved = [item.saved_us for item in items if item.saved_us is not None]
    assert saved == sorted(saved, reverse=True)
    label = analysis.verdict.label
    stated = [item.rule for item in items if item.rule in LABEL_ADVICE.values()]
    if label in LABEL_ADVICE and stated:
        assert stated[0] == LABEL_ADVICE[label], (label, stated)


def test_the_page_card_and_terminal_list_the_advice_in_the_json_order(unreplayed: RunAnalysis) -> None:
    """The renderers never order: the page's first advice and its list, the notebook card and the terminal
    list the recommendations in the JSON's order; the top straggler tile is the JSON's first straggler."""
    document = summary_document(unreplayed)
    rules = [item["rule"] for item in document["recommendations"]["items"]]
    assert len(rules) >= 3
    page = render_html(unreplayed, plotlyjs="cdn")
    assert re.findall(r'<li id="rec-([\w-]+)">', page) == rules
    top = re.search(r'id="top-recommendation"><strong>What to change first:</strong> ([^<]*)', page)
    assert top is not None
    assert html.unescape(top.group(1)).startswith(document["recommendations"]["items"][0]["sentence"][:60])
    card = html.unescape(verdict_card(unreplayed))
    sentences = [item["sentence"] for item in document["recommendations"]["items"]]
    shown = [card.find(sentence[:40]) for sentence in sentences[:CARD_RECOMMENDATIONS]]
    assert -1 not in shown
    assert shown == sorted(shown)
    console = Console(record=True, width=400)
    render_summary(unreplayed, console)
    printed = console.export_text()
    places = [printed.find(sentence[:40]) for sentence in sentences]
    assert -1 not in places
    assert places == sorted(places)
    tile = re.search(r'<div class="value">rank (\d+)</div><div class="label">top straggler', page)
    assert tile is not None
    assert int(tile.group(1)) == document["across_ranks"]["stragglers"][0]
