"""The replay (docs/metrics.md, "Replay"): the engine by hand on a two-rank chain, the levers' grammar, the
simulated 8-rank straggler (no_straggler against the peers' recorded waiting, re-derived in plain Python), and
as_recorded's error on the real multi-rank traces of ../shared."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.shared_data import REAL_KINETO, requires_shared
from traceview.api import analyze
from traceview.core.errors import UsageError
from traceview.replay.engine import Chain, run
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
    return Chain(body, tails, late, overlap)


def _ends(chain: Chain) -> dict[int, tuple[float, float]]:
    return {r: (e, c) for r, _, e, c in run(chain).iter_rows()}


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
    # entered after the latest of the others (the chain then runs that much earlier), median over steps
    calls = raw.crossrank.calls.select("step", "instance", "rank", "aligned_start_us").rows()
    entries: dict[tuple[int, int], dict[int, float]] = {}
    for step, instance, rank, start in calls:
        entries.setdefault((step, instance), {})[rank] = start
    per_step: dict[int, float] = {}
    for (step, _), members in entries.items():
        others = max(t for r, t in members.items() if r != 5)
        per_step[step] = per_step.get(step, 0.0) + max(0.0, members[5] - others)
    gaps = sorted(per_step.values())
    expected = (
        gaps[len(gaps) // 2] if len(gaps) % 2 else (gaps[len(gaps) // 2 - 1] + gaps[len(gaps) // 2]) / 2
    )
    # never more than the peers waited for it; at least 85% of it (a collective's move also moves what the
    # others wait for next, so the sum is an upper bound)
    assert 0.85 * expected <= row["saved_us"] <= 1.02 * expected
    assert "rank(s) 5" in str(row["notes"])


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
