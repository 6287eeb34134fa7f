"""The replay (docs/metrics.md, "Replay"): the engine by hand on a two-rank chain, the levers' grammar, the
simulated 8-rank straggler (no_straggler against the peers' recorded waiting, re-derived in plain Python), and
as_recorded's error on the real multi-rank traces of ../shared."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import traceview.replay.analysis as replay_analysis
from tests.shared_data import REAL_KINETO, requires_shared
from tests.simulate.engine import write_run
from tests.simulate.scenario import CollectiveSpec, ProcessGroupSpec, Scenario, StragglerSpec
from traceview.api import analyze
from traceview.core.errors import UsageError
from traceview.replay.engine import Chain, run, stacked, variant_columns
from traceview.replay.levers import parse_lever

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def _chain(late: frozenset[int] = frozenset(), overlap: bool = False) -> Chain:
    """Two ranks, two collectives: A (segments 10 and 30 us after the window start, transfer 5), B (4 and 2
    after A's exit, 6); tails 3; windows start at 0."""
    body = pl.DataFrame(
        {
            "step": [1, 1, 1, 1],
            "instance": [0, 0, 1, 1],
            "rank": [0, 1, 0, 1],
            "order": [0, 0, 1, 1],
            "anchor": [None, None, 0, 0],
            "segment_us": [10.0, 30.0, 4.0, 2.0],
            "transfer_us": [5.0, 5.0, 6.0, 6.0],
        }
    )
    tails = pl.DataFrame({"step": [1, 1], "rank": [0, 1], "start_us": [0.0, 0.0], "tail_us": [3.0, 3.0]})
    return Chain(*variant_columns(body, tails, late, overlap, 0))


def _ends(chain: Chain) -> dict[int, tuple[float, float]]:
    return {r: (e, c) for _, r, _, e, c in run(chain).iter_rows()}


def test_the_engine_by_hand() -> None:
    # A: entries 10 and 30, starts at 30, done 35; B: entries 35 + 4 and 35 + 2, starts 39, done 45; +3 tail
    ends = _ends(_chain())
    assert ends[0] == (45.0 + 3, (35 - 10) + (45 - 39))
    assert ends[1] == (45.0 + 3, (35 - 30) + (45 - 37))


def test_a_late_rank_arrives_with_the_others() -> None:
    # rank 1's arrival at A moves to rank 0's (10): done 15; B: entries 19 and 17, done 25; +3
    ends = _ends(_chain(late=frozenset({1})))
    assert ends[0][0] == ends[1][0] == 25.0 + 3


def test_perfect_overlap_does_not_wait_for_transfers() -> None:
    # A done 35 as before; B: entries 10 + 4 and 30 + 2, starts 32, done 38; end max(38, 32 + 3)
    ends = _ends(_chain(overlap=True))
    assert ends[0][0] == ends[1][0] == 38.0


def test_variants_replayed_together_are_each_replayed_alone() -> None:
    chains = [_chain(), _chain(late=frozenset({1})), _chain(overlap=True)]
    together = stacked(
        [
            (
                chain.body.lazy().with_columns(variant=pl.lit(n)),
                chain.tails.lazy().with_columns(variant=pl.lit(n)),
            )
            for n, chain in enumerate(chains)
        ]
    )
    found = {(v, r): (e, c) for v, r, _, e, c in run(together).iter_rows()}
    for number, chain in enumerate(chains):
        assert {r: found[number, r] for r in (0, 1)} == _ends(chain)


def test_the_levers_grammar() -> None:
    assert parse_lever("comm:x2") == ("comm", 2.0)
    assert parse_lever("compute:x1.5") == ("compute", 1.5)
    assert parse_lever("ranks:16") == ("ranks", 16.0)
    assert parse_lever("no_straggler") == ("no_straggler", -1.0)
    assert parse_lever("no_straggler:3") == ("no_straggler", 3.0)
    for bad in ("comm:2", "ranks:x4", "ranks:1", "no_straggler:x2", "ranks:2.5", "faster", "comm:x0"):
        with pytest.raises(UsageError):
            parse_lever(bad)


@pytest.fixture(scope="module")
def straggler() -> object:
    return analyze(SAMPLES / "dp8_straggler", workers=1)


def test_no_straggler_saves_what_the_peers_waited(straggler: object) -> None:
    raw = straggler.raw  # type: ignore[attr-defined]
    assert raw.replay is not None
    assert raw.crossrank.stragglers == (5,)
    assert (
        raw.replay.error_worst < 1e-9
    )  # one lane per rank, every member leaves at the last arrival + transfer
    row = raw.replay.lever("no_straggler")
    assert row is not None
    # plain Python over the matched members: per step, the sum over its collectives of how far rank 5
    # entered after the latest of the others, median over steps: what the peers waited for it, an upper
    # bound of the saving (the peers' compute under those waits is not saved)
    calls = raw.crossrank.calls.select("step", "instance", "rank", "aligned_start_us").rows()
    entries: dict[tuple[int, int], dict[int, float]] = {}
    for step, instance, rank, start in calls:
        entries.setdefault((step, instance), {})[rank] = start
    per_step: dict[int, float] = {}
    for (step, _), members in entries.items():
        others = max(t for r, t in members.items() if r != 5)
        per_step[step] = per_step.get(step, 0.0) + max(0.0, members[5] - others)
    assert 0.0 < row["saved_us"] <= 1.02 * statistics.median(per_step.values())
    assert "rank(s) 5" in str(row["notes"])


def test_no_straggler_against_the_samples_ground_truth(straggler: object) -> None:
    # without rank 5 every other rank computes (forward, backward, optimizer: the truth's t_comp_us) and its
    # last bucket's all-reduce starts when the backward is done: a step is t_comp + one transfer (the
    # buckets before it are hidden under the backward), median over the other ranks' steps
    truth = json.loads((SAMPLES / "dp8_straggler.ground_truth.json").read_text())
    late = truth["straggler_rank"]
    comp = statistics.median(s["t_comp_us"] for s in truth["steps"] if s["rank"] != late)
    transfer = statistics.median(i["transfer_us"] for i in truth["instances"])
    row = straggler.raw.replay.lever("no_straggler")  # type: ignore[attr-defined]
    assert row is not None
    assert row["step_us"] == pytest.approx(comp + transfer, rel=0.01)


def test_levers_replayed_one_at_a_time_give_the_same_figures(
    straggler: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the sample's 8 default levers share one engine run; bounded to one member row a run, each lever
    # runs alone: the same levers, steps and errors
    together = straggler.raw.replay  # type: ignore[attr-defined]
    monkeypatch.setattr(replay_analysis, "VARIANT_ROWS", 1)
    alone = analyze(SAMPLES / "dp8_straggler", workers=1).raw.replay
    assert together is not None
    assert alone is not None
    assert together.levers.height == 8
    assert alone.levers.equals(together.levers)
    assert alone.steps.equals(together.steps)
    assert alone.errors.equals(together.errors)


def test_a_run_whose_levers_all_say_why_not_still_has_its_replay() -> None:
    # dp8_ideal names no straggler: its only lever cannot be replayed, the as_recorded replay still is
    replay = analyze(SAMPLES / "dp8_ideal", workers=1, levers=("no_straggler",)).raw.replay
    assert replay is not None
    assert replay.levers.select("lever", "step_us", "gamma", "saved_us").rows() == [
        ("no_straggler", None, None, None)
    ]
    assert "no straggler is named" in replay.levers.item(0, "notes")
    assert replay.steps.height == 0
    assert replay.error_worst is not None


def _compute_factor(lever: str) -> float:
    return float(lever.removeprefix("compute:x")) if lever.startswith("compute:x") else 1.0


def _assert_compute_kept(raw: object) -> None:
    """Every replayed (lever, rank, step) is at least the rank's compute of that step (the budget's comp_us;
    divided by N under compute:xN): compute under a collective is not lost when its wait shrinks."""
    replay = raw.replay  # type: ignore[attr-defined]
    assert replay is not None
    comp = {(r, s): c for r, s, c in raw.budget.per_step.select("rank", "step", "comp_us").iter_rows()}  # type: ignore[attr-defined]
    rows = replay.steps.select("lever", "rank", "step", "step_us").rows()
    assert {lever for lever, *_ in rows} >= {"as_recorded", "comm:x2", "compute:x2", "perfect_overlap"}
    short = [
        (lever, rank, step, step_us, comp[rank, step])
        for lever, rank, step, step_us in rows
        if step_us < comp[rank, step] / _compute_factor(lever) * (1 - 1e-9)
    ]
    assert not short


@pytest.mark.parametrize("name", ["dp8_straggler", "dp8_ideal", "gloo_dp2", "pp4_mismatch"])
def test_no_lever_ends_a_step_before_its_compute(name: str) -> None:
    _assert_compute_kept(analyze(SAMPLES / name, workers=1).raw)


def test_no_lever_ends_a_step_before_its_compute_on_a_simulated_run(tmp_path: Path) -> None:
    # 4 ranks, 4 buckets each hidden under the backward, rank 2 computing 6-9 ms longer: the peers' waits
    # for it hide their own compute
    world = ProcessGroupSpec("0", "default_pg", (0, 1, 2, 3))
    scenario = Scenario(
        ranks=4,
        ranks_per_host=2,
        steps=4,
        collectives=tuple(CollectiveSpec("AllReduce", 8 << 20, world) for _ in range(4)),
        compute_us=20_000.0,
        optimizer_us=800.0,
        overlap=True,
        straggler=StragglerSpec(rank=2, kind="compute", delay_us_min=6_000.0, delay_us_max=9_000.0),
        seed=5,
    )
    truth = write_run(scenario, tmp_path)
    raw = analyze(tmp_path, workers=1).raw
    _assert_compute_kept(raw)
    # no_straggler: each other rank's step is its compute plus its last bucket's transfer (as above)
    comp = statistics.median(s.t_comp_us for s in truth.steps if s.rank != 2)
    transfer = statistics.median(i.transfer_us for i in truth.instances)
    row = raw.replay.lever("no_straggler")
    assert row is not None
    assert row["step_us"] == pytest.approx(comp + transfer, rel=1e-3)


def test_the_json_and_the_command_say_the_same(straggler: object, tmp_path: Path) -> None:
    document = straggler.summary()  # type: ignore[attr-defined]
    levers = document["replay"]["levers"]
    assert [row["lever"] for row in levers][:3] == ["as_recorded", "no_straggler", "comm:x2"]
    assert set(levers[0]) == {"lever", "step_us", "gamma", "saved_us", "notes"}
    assert levers[0]["gamma"] == pytest.approx(document["time_budget"]["run_median"]["gamma"], rel=0.05)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "traceview",
            "replay",
            str(SAMPLES / "dp8_straggler"),
            "--json",
            "-q",
            "--lever",
            "comm:x4",
            "--lever",
            "no_straggler",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert [row["lever"] for row in printed["levers"]] == ["comm:x4", "no_straggler"]
    assert printed["levers"][1]["saved_us"] == pytest.approx(levers[1]["saved_us"])
    frame = straggler.replay  # type: ignore[attr-defined]
    assert frame.columns == ["lever", "step_us", "gamma", "saved_us", "notes"]


@requires_shared
@pytest.mark.parametrize("name", ["h200_pt211_gloo_dp2", "hta_sampled_2rank"])
def test_as_recorded_on_real_multi_rank_traces(name: str) -> None:
    raw = analyze(REAL_KINETO / name, workers=1).raw
    assert raw.replay is not None
    # every step's replayed median within 1% of the recorded one
    errors = raw.replay.errors.get_column("error").to_list()
    assert errors
    assert max(abs(e) for e in errors) < 0.01
    assert raw.replay.error_worst == pytest.approx(max(abs(e) for e in errors))
