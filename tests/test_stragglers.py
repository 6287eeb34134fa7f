"""Skew, wait, transfer and straggler verdicts: factory frames (hand arithmetic) and simulated runs (ground
truth)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tests.crossrank_factory import comm, kernels, windows
from tests.kineto_factory import cpu_op, kernel, launch, write
from tests.simulate.engine import write_run
from tests.simulate.scenario import (
    CollectiveSpec,
    GroundTruth,
    MismatchSpec,
    ProcessGroupSpec,
    Scenario,
    StragglerSpec,
)
from traceview.across_ranks.analysis import CrossRank, cross_rank
from traceview.across_ranks.clocks import rank_hosts
from traceview.budget.time_budget import with_transfer
from traceview.load.inputs import load_run
from traceview.reduce.analysis import RunOptions, analyze

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
    """Three ranks, five AllReduces 1000 us apart (last in 5 of 5 among 3: chance would give that with
    probability (1/3)^5 = 0.4%, below the 1% of the evidence rule; 4 of 4 would be 1.2%). Rank 2 starts
    each 300 us after the others (who start at t and t + 10); all end at t + 500. Rank 2's compute is 2000
    us longer per step, or (late_launch) its launch comes 300 us after its last compute kernel ended, the
    others launching 50 us before theirs ended."""
    rows, compute = [], []
    for i in range(5):
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
    assert usable.height == 5
    assert usable.get_column("skew_us").to_list() == [300.0] * 5
    assert usable.get_column("last_rank").to_list() == [2] * 5
    assert usable.get_column("transfer_us").to_list() == [500.0 - 300.0] * 5  # rank 2's duration
    first = result.calls.filter(pl.col("instance") == 0).sort("rank")
    assert first.get_column("wait_us").to_list() == [500.0 - 200.0, 490.0 - 200.0, 0.0]
    assert first.get_column("lateness_us").to_list() == [-10.0, 0.0, 290.0]  # against the median start t + 10


def test_per_rank_figures_and_slow_compute_verdict() -> None:
    result = _factory_run(late_launch=False)
    rank2 = result.per_rank.filter(pl.col("rank") == 2).row(0, named=True)
    assert (rank2["instances"], rank2["times_last"], rank2["median_lateness_us"]) == (5, 5, 290.0)
    assert rank2["last_p_value"] == pytest.approx((1 / 3) ** 5)
    assert rank2["comp_excess_us"] == 7000.0 - 5000.0
    assert (rank2["straggler"], rank2["cause"]) == (True, "slow compute")
    rank0 = result.per_rank.filter(pl.col("rank") == 0).row(0, named=True)
    assert rank0["wait_us"] == 5 * 300.0
    assert rank0["wait_share"] == 5 * 300.0 / 10_000.0
    assert not rank0["straggler"]
    assert result.stragglers == (2,)
    assert result.sentence.startswith("Rank 2 is a straggler")
    assert "slow compute" in result.sentence


def test_late_launch_verdict() -> None:
    result = _factory_run(late_launch=True)
    rank2 = result.per_rank.filter(pl.col("rank") == 2).row(0, named=True)
    assert rank2["launch_gap_us"] == 5 * 300.0  # per step: five collectives, each launched 300 us late
    assert (rank2["straggler"], rank2["cause"]) == (True, "late collective launch")


def test_transfer_gamma_joins_the_budget() -> None:
    result = _factory_run(late_launch=False)
    per_step = _per_step({0: 5000.0, 1: 5000.0, 2: 7000.0})
    joined = with_transfer(per_step, result.transfer)
    rows = joined.sort("rank").select("transfer_us", "transfer_gamma").rows()
    assert rows == [(1000.0, 1000.0 / 5000.0), (1000.0, 1000.0 / 5000.0), (1000.0, 1000.0 / 7000.0)]


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
        ranks=8,
        steps=5,
        collectives=COLLECTIVES,
        compute_us=20_000.0,
        ranks_per_host=2,
        jitter=0.01,
        host_offsets_us=OFFSETS,
        seed=3,
        **changes,  # type: ignore[arg-type]
    )
    truth = write_run(scenario, tmp_path)
    analysis = analyze(load_run(str(tmp_path)), RunOptions(ranks_per_host=2))
    assert analysis.crossrank is not None
    return truth, analysis.crossrank


def _by_key(result: CrossRank) -> dict[tuple[str, int], dict[str, object]]:
    names = dict(result.groups.select("group", "pg_name").rows())
    usable = result.instances.filter(pl.col("skew_us").is_not_null())
    return {(names[row["group"]], row["seq"]): row for row in usable.iter_rows(named=True)}


@pytest.mark.parametrize(
    ("kind", "cause"), [("compute", "slow compute"), ("launch", "late collective launch")]
)
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


# Clock uncertainty, causes and the cost of a straggler (factory frames, hand arithmetic).

RANKS4 = "[0, 1, 2, 3]"


def _four_ranks(
    late_rank: int,
    late_us: float,
    hostnames: dict[int, str],
    end_jitter: tuple[float, ...] = (0.0,) * 5,
    host_steps: pl.DataFrame | None = None,
) -> CrossRank:
    """Four ranks, five AllReduces 10 ms apart, each 5 ms long; `late_rank` starts `late_us` after the others,
    its compute kernel before it (400 us, ending 1 us before) and its launch (5 us before) as late. Ranks 2
    and 3 record their ends `end_jitter[i]` later in instance i (their host's clock reading wanders)."""
    rows, compute = [], []
    for i, jitter in enumerate(end_jitter):
        t = 10_000.0 * i
        for rank in range(4):
            start = t + (late_us if rank == late_rank else 0.0)
            end = t + 5000.0 + (jitter if rank >= 2 else 0.0)
            rows.append(comm(rank, start, end, ranks=RANKS4, size=100 + i, launch=start - 5.0))
            compute.append((rank, start - 400.0, start - 1.0))
    hosts = rank_hosts([0, 1, 2, 3], hostnames)
    per_step = _per_step(dict.fromkeys(range(4), 5000.0))
    return cross_rank(
        kernels(rows),
        _events(compute),
        windows([0, 1, 2, 3], [(1, -1000.0, 60_000.0)]),
        per_step,
        hosts,
        host_steps,
    )


def _rank(result: CrossRank, rank: int) -> dict[str, object]:
    return result.per_rank.filter(pl.col("rank") == rank).row(0, named=True)


def test_lateness_within_the_clock_spread_is_not_resolvable() -> None:
    """Host b (ranks 2, 3) ends differ from host a's by 0, 1000, -1000, 2000, -2000 us: offset 0, spread = the
    IQR 1000 - (-1000) = 2000 us. Rank 3 is last everywhere, 300 us late: within 2000 us, so it is reported
    `not resolvable`, not a straggler."""
    result = _four_ranks(3, 300.0, {0: "a", 1: "a", 2: "b", 3: "b"}, (0.0, 1000.0, -1000.0, 2000.0, -2000.0))
    assert result.clocks.offsets.select("host", "offset_us", "spread_us").rows() == [
        ("a", 0.0, 0.0),
        ("b", 0.0, 2000.0),
    ]
    rank3 = _rank(result, 3)
    assert (rank3["times_last"], rank3["median_lateness_us"]) == (5, 300.0)
    assert (
        rank3["clock_uncertainty_us"] == 2000.0
    )  # its own host's spread (peers' median: median(0, 0, 2000, 2000))
    assert (rank3["resolvable"], rank3["straggler"], rank3["cause"]) == (False, False, "not resolvable")
    assert result.stragglers == ()
    assert "not resolvable" in result.sentence
    assert "2.000 ms" in result.sentence


def test_ranks_on_the_reference_host_share_its_clock() -> None:
    """Every rank on host a: uncertainty 0, and the 300 us late rank 3 is a straggler."""
    result = _four_ranks(3, 300.0, dict.fromkeys(range(4), "a"))
    rank3 = _rank(result, 3)
    assert (rank3["clock_uncertainty_us"], rank3["resolvable"], rank3["straggler"]) == (0.0, True, True)
    assert result.stragglers == (3,)


def test_lateness_cost_per_step() -> None:
    """Rank 2 of the three-rank run starts 300 us after rank 0 and 290 us after rank 1 (the second latest) in
    each of the 5 instances of its one step: 5 x 290 us per step, over a 10 ms step."""
    rank2 = _factory_run(late_launch=False).per_rank.filter(pl.col("rank") == 2).row(0, named=True)
    assert rank2["lateness_cost_us"] == 5 * (300.0 - 10.0)
    assert rank2["lateness_cost_share"] == pytest.approx(5 * (300.0 - 10.0) / 10_000.0)
    assert (
        _factory_run(late_launch=False).per_rank.filter(pl.col("rank") == 0).item(0, "lateness_cost_us")
        == 0.0
    )


def test_lateness_cost_is_capped_by_the_exposed_communication() -> None:
    """The same run where the ranks' median exposed communication in the step is 500 us: at most 500 us of
    waiting can come off the step."""
    per_step = _per_step({0: 5000.0, 1: 5000.0, 2: 7000.0}).with_columns(
        pl.Series("exposed_comm_us", [500.0, 700.0, 100.0])
    )
    rows = [
        comm(rank, 1000.0 * i + late, 1000.0 * i + 500, ranks=RANKS3, size=100 + i)
        for i in range(4)
        for rank, late in ((0, 0.0), (1, 10.0), (2, 300.0))
    ]
    result = cross_rank(
        kernels(rows),
        _events([]),
        windows([0, 1, 2], [(1, -1000.0, 9000.0)]),
        per_step,
        rank_hosts([0, 1, 2], {}),
    )
    assert result.per_rank.filter(pl.col("rank") == 2).item(0, "lateness_cost_us") == 500.0


def _host_steps(late: dict[int, float]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "rank": [0, 1, 2, 3],
            "step": [1] * 4,
            "host_start_us": [-900.0 + late.get(r, 0.0) for r in range(4)],
        },
        schema={"rank": pl.Int64, "step": pl.Int64, "host_start_us": pl.Float64},
    )


@pytest.mark.parametrize(
    ("hostnames", "host_late", "cause"),
    [
        (dict.fromkeys(range(4), "a"), {3: 300.0}, "late host step entry"),  # its CPU step starts 300 us late
        ({0: "a", 1: "a", 2: "b", 3: "b"}, {}, "network"),  # nothing on its timeline; its group spans hosts
        (dict.fromkeys(range(4), "a"), {}, "unexplained"),  # nothing on its timeline; one host
        ({}, {}, "unexplained"),  # hosts not known: the network cannot be named
    ],
)
def test_cause_rules(hostnames: dict[int, str], host_late: dict[int, float], cause: str) -> None:
    """Rank 3 arrives 300 us late with the same compute and launch gaps as the others: the cause is what its
    own host timeline shows, else the network only where its group spans hosts known to differ."""
    result = _four_ranks(3, 300.0, hostnames, host_steps=_host_steps(host_late))
    rank3 = _rank(result, 3)
    assert (rank3["straggler"], rank3["cause"]) == (True, cause)
    assert rank3["host_entry_excess_us"] == host_late.get(3, 0.0)
    assert rank3["comp_excess_us"] == 0.0
    assert rank3["launch_gap_excess_us"] == 0.0


def test_disjoint_pairs_are_mismatches_and_leave_the_clock_alone() -> None:
    """Two ranks (hosts assumed: one each), five AllReduces of one size: four overlap on both ranks (rank 1
    ends 0 us after rank 0), the fifth on rank 1 runs 200 us after rank 0's ended (each trace lost the other's
    partner). That pair is a `disjoint` mismatch, and rank 1's offset is the median of the four others, 0."""
    rows = [comm(r, 1000.0 * i, 1000.0 * i + 100) for i in range(4) for r in (0, 1)]
    rows += [comm(0, 5000, 5100), comm(1, 5300, 5400)]
    result = cross_rank(
        kernels(rows),
        _events([]),
        windows([0, 1], [(1, -1.0, 9999.0)]),
        _per_step({0: 1.0, 1: 1.0}),
        rank_hosts([0, 1], {}),
    )
    assert result.mismatches.select("rank", "kind").rows() == [(1, "disjoint")]
    assert "starts 0.2 ms after rank 0's call ended" in result.mismatches.item(0, "detail")
    assert result.usable_instances == 4
    assert result.clocks.offsets.get_column("offset_us").to_list() == [0.0, 0.0]


def _pytorch1_rank(rank: int, late_rank: int, late_us: float) -> dict[str, object]:
    """One rank of an 8-rank PyTorch 1.x job on one host: no `distributedInfo`, no hostname, the collective
    only in a `nccl:all_reduce` annotation with `Input Dims`. Four steps of 20 ms: an 8 ms GEMM, then a 4
    MiB all-reduce launched right after it; `late_rank` enters every step `late_us` late on the host (its
    data loading), and the all-reduce ends at the same instant on every rank (the others wait for it)."""
    events: list[dict[str, object]] = []
    for step in range(1, 5):
        t0 = 20_000.0 * step
        host = t0 + (late_us if rank == late_rank else 0.0)
        events += [
            cpu_op(f"ProfilerStep#{step}", host, 19_000.0),
            launch(host + 50, correlation=10 * step),
            kernel("volta_sgemm_128x64_nn", host + 100, 8000.0, correlation=10 * step),
            cpu_op(
                "nccl:all_reduce",
                host + 8100,
                50.0,
                args={"Input Dims": [[1048576]], "Input type": ["float"]},
            ),
            launch(host + 8110, correlation=10 * step + 1),
            kernel(
                "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
                host + 8120,
                t0 + late_us + 9120.0 - (host + 8120),
                correlation=10 * step + 1,
                stream=13,
            ),
        ]
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "Tesla V100-SXM2-32GB"}],
        "traceEvents": events,
    }


def test_pytorch1_single_host_late_host_entry_is_not_the_network(tmp_path: Path) -> None:
    """Rank 3 enters each step 3 ms late on the host: last in all 4 all-reduces, 3 ms after the median start,
    its compute and launch gaps like everyone's. The cause is the late host step entry (not the network: the
    ranks share a clock and nothing says their group spans hosts); the cost: 3 ms per step over a 20 ms step
    less what the others' exposed communication allows."""
    for rank in range(8):
        write(_pytorch1_rank(rank, 3, 3000.0), tmp_path / f"rank-{rank}.pt.trace.json")
    result = analyze(load_run(str(tmp_path)))
    assert result.crossrank is not None
    row = result.crossrank.per_rank.filter(pl.col("rank") == 3).row(0, named=True)
    assert (row["instances"], row["times_last"], row["median_lateness_us"]) == (4, 4, 3000.0)
    assert row["host_entry_excess_us"] == pytest.approx(3000.0)
    assert (row["comp_excess_us"], row["launch_gap_excess_us"]) == (0.0, 0.0)
    assert (row["straggler"], row["cause"], row["clock_uncertainty_us"]) == (
        True,
        "late host step entry",
        0.0,
    )
    assert row["lateness_cost_us"] == pytest.approx(3000.0)  # the others wait 3 ms, all of it exposed
    assert "late host-side step entry" in result.crossrank.sentence
