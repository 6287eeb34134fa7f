"""Skew, wait, transfer and straggler verdicts: factory frames (hand arithmetic) and simulated runs (ground truth)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tests.crossrank_factory import comm, kernels, windows
from traceview.across_ranks.analysis import CrossRank, add_transfer, cross_rank
from traceview.across_ranks.clocks import rank_hosts
from traceview.budget.time_budget import TimeBudget
from traceview.load.inputs import load_run
from traceview.reduce.analysis import AnalysisOptions, analyze
from traceview.simulate.engine import write_run
from traceview.simulate.scenario import (
    CollectiveSpec,
    GroundTruth,
    MismatchSpec,
    ProcessGroupSpec,
    Scenario,
    StragglerSpec,
)

RANKS3 = "[0, 1, 2]"


def _per_step(comp: dict[int, float]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "rank": list(comp),
            "step": [1] * len(comp),
            "step_us": [10_000.0] * len(comp),
            "comp_us": list(comp.values()),
        },
        schema={"rank": pl.Int64, "step": pl.Int64, "step_us": pl.Float64, "comp_us": pl.Float64},
    )


def _events(rows: list[tuple[int, float, float]]) -> pl.DataFrame:
    frame = pl.DataFrame(
        rows, schema={"rank": pl.Int64, "start_us": pl.Float64, "end_us": pl.Float64}, orient="row"
    )
    return frame.with_columns(pl.lit("compute").alias("event_class"))


def _factory_run(late_launch: bool) -> CrossRank:
    """Three ranks, four AllReduces 1000 us apart. Rank 2 starts each 300 us after the others (who start at
    t and t + 10); all end at t + 500. Rank 2's compute is 2000 us longer per step, or (late_launch) its launch
    comes 300 us after its last compute kernel ended, the others launching 50 us before theirs ended."""
    rows, compute = [], []
    for i in range(4):
        t = 1000.0 * i
        for rank, start in ((0, t), (1, t + 10), (2, t + 300)):
            launch = start - 50 if rank < 2 or not late_launch else start
            rows.append(comm(rank, start, t + 500, ranks=RANKS3, size=100 + i, launch=launch))
            compute.append((rank, start - 400, start if rank < 2 or not late_launch else start - 300))
    comp = {0: 5000.0, 1: 5000.0, 2: 5000.0 if late_launch else 7000.0}
    hosts = rank_hosts([0, 1, 2], {})
    return cross_rank(
        kernels(rows), _events(compute), windows([0, 1, 2], [(1, -1000.0, 9000.0)]), _per_step(comp), hosts
    )


def test_instance_figures_by_hand() -> None:
    result = _factory_run(late_launch=False)
    usable = result.instances.filter(pl.col("skew_us").is_not_null())
    assert usable.height == 4
    assert usable.get_column("skew_us").to_list() == [300.0] * 4
    assert usable.get_column("last_rank").to_list() == [2] * 4
    assert usable.get_column("transfer_us").to_list() == [500.0 - 300.0] * 4  # rank 2's duration
    first = result.calls.filter(pl.col("instance") == 0).sort("rank")
    assert first.get_column("wait_us").to_list() == [500.0 - 200.0, 490.0 - 200.0, 0.0]
    assert first.get_column("lateness_us").to_list() == [-10.0, 0.0, 290.0]  # against the median start t + 10


def test_per_rank_figures_and_slow_compute_verdict() -> None:
    result = _factory_run(late_launch=False)
    rank2 = result.per_rank.filter(pl.col("rank") == 2).row(0, named=True)
    assert (rank2["instances"], rank2["times_last"], rank2["median_lateness_us"]) == (4, 4, 290.0)
    assert rank2["comp_excess_us"] == 7000.0 - 5000.0
    assert (rank2["straggler"], rank2["cause"]) == (True, "slow compute")
    rank0 = result.per_rank.filter(pl.col("rank") == 0).row(0, named=True)
    assert rank0["wait_us"] == 4 * 300.0
    assert rank0["wait_share"] == 4 * 300.0 / 10_000.0
    assert not rank0["straggler"]
    assert result.stragglers == (2,)
    assert result.sentence.startswith("Rank 2 is a straggler")
    assert "slow compute" in result.sentence


def test_late_launch_verdict() -> None:
    result = _factory_run(late_launch=True)
    rank2 = result.per_rank.filter(pl.col("rank") == 2).row(0, named=True)
    assert rank2["launch_gap_us"] == 4 * 300.0  # per step: four collectives, each launched 300 us late
    assert (rank2["straggler"], rank2["cause"]) == (True, "late launch")


def test_transfer_gamma_joins_the_budget() -> None:
    result = _factory_run(late_launch=False)
    per_step = _per_step({0: 5000.0, 1: 5000.0, 2: 7000.0})
    budget = add_transfer(TimeBudget(per_step, per_step.select("rank"), {"comp_us": 5000.0}), result.transfer)
    rows = budget.per_step.sort("rank").select("transfer_us", "transfer_gamma").rows()
    assert rows == [(800.0, 800.0 / 5000.0), (800.0, 800.0 / 5000.0), (800.0, 800.0 / 7000.0)]
    assert budget.run_median["transfer_gamma"] == pytest.approx(800.0 / 5000.0)


# Simulated runs: every figure against the simulator's ground truth.

WORLD = ProcessGroupSpec("0", "default_pg", tuple(range(8)))
COLLECTIVES = (
    CollectiveSpec("AllReduce", 4_000_000, WORLD),
    CollectiveSpec("AllReduce", 8_000_000, WORLD),
    CollectiveSpec("AllGather", 2_097_152, WORLD),
)
OFFSETS = (0.0, 25_000.0, -40_000.0, 61_000.0)


def _simulate(tmp_path: Path, **changes: object) -> tuple[GroundTruth, CrossRank]:
    scenario = Scenario(
        ranks=8, steps=5, collectives=COLLECTIVES, compute_us=20_000.0, ranks_per_host=2, jitter=0.01,
        host_offsets_us=OFFSETS, seed=3, **changes,  # type: ignore[arg-type]
    )  # fmt: skip
    truth = write_run(scenario, tmp_path)
    analysis = analyze(load_run(str(tmp_path)), AnalysisOptions(ranks_per_host=2))
    assert analysis.crossrank is not None
    return truth, analysis.crossrank


def _by_key(result: CrossRank) -> dict[tuple[str, int], dict[str, object]]:
    names = dict(result.groups.select("group", "pg_name").rows())
    usable = result.instances.filter(pl.col("skew_us").is_not_null())
    return {(names[row["group"]], row["seq"]): row for row in usable.iter_rows(named=True)}


@pytest.mark.parametrize(("kind", "cause"), [("compute", "slow compute"), ("launch", "late launch")])
def test_simulated_straggler_offsets_and_skews(tmp_path: Path, kind: str, cause: str) -> None:
    truth, result = _simulate(tmp_path, straggler=StragglerSpec(5, kind, 400.0, 600.0))  # type: ignore[arg-type]
    assert result.stragglers == (5,)
    assert result.per_rank.filter(pl.col("rank") == 5).item(0, "cause") == cause
    planted = [offset - truth.host_offsets_us[0] for offset in truth.host_offsets_us]
    measured = result.clocks.offsets.get_column("offset_us").to_list()
    assert measured == pytest.approx(planted, abs=0.01 * max(abs(p) for p in planted))
    found = _by_key(result)
    assert len(found) == len(truth.instances)
    for instance in truth.instances:
        row = found[(instance.pg_name, instance.seq)]
        assert row["skew_us"] == pytest.approx(instance.skew_us, abs=0.01)
        assert row["last_rank"] == instance.last_rank
        assert row["transfer_us"] == pytest.approx(instance.transfer_us, abs=0.01)
    waits = (
        result.calls.group_by("rank")
        .agg(pl.col("wait_us").sum())
        .sort("rank")
        .get_column("wait_us")
        .to_list()
    )
    planted_waits = [sum(i.wait_us[i.ranks.index(rank)] for i in truth.instances) for rank in range(8)]
    assert waits == pytest.approx(planted_waits, abs=0.1)


def test_simulated_mismatch_is_located(tmp_path: Path) -> None:
    truth, result = _simulate(tmp_path, mismatch=MismatchSpec(6, "extra", 2, 1), include_seq=True)
    assert truth.mismatch is not None
    names = dict(result.groups.select("group", "pg_name").rows())
    located = [
        (row["rank"], names[row["group"]], row["seq"], row["kind"])
        for row in result.mismatches.iter_rows(named=True)
    ]
    assert located == [(truth.mismatch.rank, truth.mismatch.pg_name, truth.mismatch.seq, "extra")]
    assert result.stragglers == ()
    found = _by_key(result)
    assert (truth.mismatch.pg_name, truth.mismatch.seq + 1) in found  # the instance after it is matched again
