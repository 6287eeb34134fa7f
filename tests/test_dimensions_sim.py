"""Parallelism dimensions on simulated runs of known truth (tests/simulate/parallel.py): every group named its
planted dimension, from its names or, unnamed, from its structure and collectives at a lower confidence; the
cost per dimension and the expected volumes computed by hand from the planted layout; the planted deviations
(resharding that doubles the all-gathers, 1 MiB DDP buckets) reported with their ratio and cause, and their
controls as expected; a dimension that exposes the most names the verdict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.simulate.parallel import Planted, ddp, fsdp, mesh_3d, write_planted
from traceview.api import analyze
from traceview.reduce.results import RunAnalysis

MiB = 2**20


def analysed(planted: Planted, folder: Path, **options: object) -> RunAnalysis:
    path, _ = write_planted(planted, folder)
    return analyze(path, workers=1, **options).raw  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def named_3d(tmp_path_factory: pytest.TempPathFactory) -> tuple[Planted, RunAnalysis]:
    planted = mesh_3d(named=True)
    return planted, analysed(planted, tmp_path_factory.mktemp("named"))


@pytest.fixture(scope="module")
def unnamed_3d(tmp_path_factory: pytest.TempPathFactory) -> tuple[Planted, RunAnalysis]:
    planted = mesh_3d(named=False)
    return planted, analysed(planted, tmp_path_factory.mktemp("unnamed"))


def gather_row(analysis: RunAnalysis) -> dict[str, Any]:
    """The FSDP all-gathers' volume row."""
    assert analysis.dimensions is not None
    return analysis.dimensions.volumes.filter(pl.col("collectives") == "AllGather").row(0, named=True)


def labels(analysis: RunAnalysis) -> dict[str, str]:
    assert analysis.dimensions is not None
    return dict(analysis.dimensions.groups.select("group", "dimension").iter_rows())


def confidences(analysis: RunAnalysis) -> dict[str, float]:
    assert analysis.dimensions is not None
    return dict(analysis.dimensions.groups.select("group", "confidence").iter_rows())


@pytest.mark.parametrize("fixture", ["named_3d", "unnamed_3d"])
def test_every_group_gets_its_planted_dimension(fixture: str, request: pytest.FixtureRequest) -> None:
    planted, analysis = request.getfixturevalue(fixture)
    assert labels(analysis) == planted.truth
    assert sorted(set(planted.truth.values())) == ["dp", "pp", "tp"]


def test_names_give_more_confidence_than_structure_and_mix_alone(
    named_3d: tuple[Planted, RunAnalysis], unnamed_3d: tuple[Planted, RunAnalysis]
) -> None:
    named, unnamed = confidences(named_3d[1]), confidences(unnamed_3d[1])
    for group, dimension in named_3d[0].truth.items():
        assert unnamed[group] >= 0.3, (group, dimension)
        if dimension == "dp":  # `mesh_dp` says data parallelism, replicated or sharded alike: no margin
            assert named[group] == unnamed[group]
        else:
            assert named[group] >= unnamed[group] + 0.3, (group, dimension)


def test_unnamed_evidence_says_what_was_seen(unnamed_3d: tuple[Planted, RunAnalysis]) -> None:
    analysis = unnamed_3d[1]
    assert analysis.dimensions is not None
    evidence = dict(analysis.dimensions.groups.select("group", "evidence").iter_rows())
    assert any("contiguous ranks inside one node" in e for e in evidence["1"])  # TP group [0, 1]
    assert any("forward pass" in e for e in evidence["1"])
    assert any("send/receive" in e for e in evidence["5"])  # PP group [0, 2]
    assert any("strided by 4" in e for e in evidence["9"])  # DP group [0, 4]
    assert any("after the forward pass" in e for e in evidence["9"])


def test_a_stated_layout_names_unnamed_groups_with_certainty(tmp_path: Path) -> None:
    analysis = analysed(mesh_3d(named=False), tmp_path, dims="tp=2,pp=2,dp=*")
    assert analysis.dimensions is not None
    assert set(confidences(analysis).values()) == {1.0}
    assert labels(analysis) == mesh_3d(named=False).truth


def test_a_layout_that_does_not_fit_is_said_and_not_used(tmp_path: Path) -> None:
    analysis = analysed(mesh_3d(named=False), tmp_path, dims="tp=3,dp=*")
    assert analysis.dimensions is not None
    assert analysis.dimensions.layout_note == "--dims tp=3,dp=* does not divide the world size 8: not used"
    assert labels(analysis) == mesh_3d(named=False).truth  # still from the evidence


def test_cost_per_dimension_counts_the_planted_calls(named_3d: tuple[Planted, RunAnalysis]) -> None:
    analysis = named_3d[1]
    assert analysis.dimensions is not None
    rows = {row["dimension"]: row for row in analysis.dimensions.per_dimension.iter_rows(named=True)}
    # per rank and step: TP 2 layers x 2 micro-batches x (2 forward + 2 backward) all-reduces of 1 MiB;
    # PP 2 sends + 2 receives of 1 MiB; DP 2 buckets of (2^24 / 4) x 2 B / 2 = 4 MiB
    assert (rows["tp"]["calls"], rows["tp"]["bytes"]) == (16, 16 * MiB)
    assert (rows["pp"]["calls"], rows["pp"]["bytes"]) == (4, 4 * MiB)
    assert (rows["dp"]["calls"], rows["dp"]["bytes"]) == (2, 8 * MiB)
    # bus bytes: f(2) = 2 (2 - 1) / 2 = 1 for an all-reduce of 2 ranks, 1 for send/receive
    assert rows["tp"]["bus_bytes"] == 16 * MiB
    # achieved busbw of the TP all-reduces, waits removed: the planted intra-host link, 300 GB/s, less the
    # latency of 2 (n - 1) x 2 us per call on 1 MiB (k alpha + f S / B per call)
    expected = MiB / (2 * 2e-6 + MiB / 300e9)
    assert rows["tp"]["busbw_Bps"] == pytest.approx(expected, rel=1e-3)


def test_expected_volumes_by_hand(named_3d: tuple[Planted, RunAnalysis]) -> None:
    analysis = named_3d[1]
    assert analysis.dimensions is not None
    volumes = {row["dimension"]: row for row in analysis.dimensions.volumes.iter_rows(named=True)}
    # DP: 2 (K - 1) / K x P_rep x e = 2 x 1/2 x (2^24 / (tp 2 x pp 2)) x 2 B
    assert volumes["dp"]["expected_bus_bytes"] == 2 * (1 / 2) * (2**24 / 4) * 2
    # TP: 8 (T - 1) / T x L_stage x m x A x e = 8 x 1/2 x (4 layers / pp 2) x 2 x (2 x 512 / 2 x 1024) x 2 B
    assert volumes["tp"]["expected_bus_bytes"] == 8 * (1 / 2) * 2 * 2 * (2 * 512 / 2 * 1024) * 2
    # PP, a first or last stage of 2 (one boundary): 2 x 1 x m x A x e
    assert volumes["pp"]["expected_bus_bytes"] == 2 * 1 * 2 * (512 * 1024) * 2
    assert {name: row["ratio"] for name, row in volumes.items()} == {"dp": 1.0, "tp": 1.0, "pp": 1.0}
    assert volumes["dp"]["cause"] == "as the formula expects"


def test_fsdp_resharding_doubles_the_all_gathers(tmp_path: Path) -> None:
    reshard = analysed(fsdp(reshard=True), tmp_path / "reshard")
    control = analysed(fsdp(reshard=False), tmp_path / "control")
    for analysis in (reshard, control):
        assert labels(analysis) == {"1": "fsdp"}
    gathers = {name: gather_row(a) for name, a in (("reshard", reshard), ("control", control))}
    assert gathers["reshard"]["ratio"] == 2.0
    assert gathers["reshard"]["cause"].startswith(
        "FSDP gathers 2.0x the parameters per step: resharding after forward gathers them again in backward"
    )
    assert gathers["control"]["ratio"] == 1.0
    assert (
        gathers["control"]["cause"]
        == "each parameter is gathered once per step (no resharding after forward)"
    )
    # (F - 1) / F x P x e = 7/8 x P x 2 B, P = the 4 units' parameters the run.json states
    params = fsdp(reshard=True).model.params
    assert params is not None
    assert gathers["control"]["expected_bus_bytes"] == pytest.approx(7 / 8 * params * 2)


def test_small_ddp_buckets_are_latency_bound(tmp_path: Path) -> None:
    small = analysed(ddp(bucket_bytes=MiB), tmp_path / "small")
    large = analysed(ddp(bucket_bytes=32 * MiB), tmp_path / "large")
    row = small.dimensions.volumes.row(0, named=True)  # type: ignore[union-attr]
    assert row["calls_per_step"] == 64  # 64 MiB of gradients in 1 MiB buckets
    assert row["ratio"] == 1.0
    # the latency share of one call on the planted links (8 ranks on 2 hosts of 4, both links 10 us and
    # 25 GB/s, one NIC per GPU), priced hierarchically (docs/metrics.md, "Links"): a ring inside each host,
    # 2 (4 - 1) x 10 us + 2 x 3/4 x 1 MiB / 25 GB/s, then rail rings across the 2 hosts over 4 NICs,
    # 2 (2 - 1) x 10 us + 2 x 1/2 x 1 MiB / (4 x 25 GB/s)
    latency = 2 * 3 * 10e-6 + 2 * 1 * 10e-6
    share = latency / (latency + 2 * 3 / 4 * MiB / 25e9 + 2 * 1 / 2 * MiB / (4 * 25e9))
    assert (
        f"DP makes 64 calls of 1 MiB per step: latency-bound ({share:.0%} of their model time" in row["cause"]
    )
    assert row["cause"].endswith("raise the bucket size (bucket_cap_mb)")
    assert large.dimensions.volumes.item(0, "cause") == "as the formula expects"  # type: ignore[union-attr]


def test_unnamed_deviations_are_found_the_same(tmp_path: Path) -> None:
    analysis = analysed(fsdp(reshard=True, named=False), tmp_path)
    assert labels(analysis) == {"1": "fsdp"}
    assert gather_row(analysis)["ratio"] == 2.0


def test_the_dimension_that_exposes_most_names_the_verdict(tmp_path: Path) -> None:
    analysis = analysed(mesh_3d(tp_link=(2e-6, 0.25e9)), tmp_path)
    assert analysis.verdict.label == "dimension-bound"
    assert analysis.verdict.sentence.startswith("Tensor parallelism sets the pace: it exposes")
    assert "sit on the critical path by design; consider sequence parallelism" in analysis.verdict.sentence
    rules = [item.rule for item in analysis.recommendations.items]  # type: ignore[union-attr]
    assert "dimension-cost" in rules
    assert analysis.dimensions is not None
    exposed = analysis.dimensions.per_dimension.filter(pl.col("dimension") == "tp").item(0, "exposed_us")
    gate = analysis.gate_figures()
    assert gate["tp_exposed_us"] == exposed
    assert exposed / analysis.budget.run_median["step_us"] >= 0.10  # type: ignore[operator]


def test_a_straggler_that_costs_more_leads(tmp_path: Path) -> None:
    from traceview.verdict.facts import Facts
    from traceview.verdict.headline import verdict

    common = {"gamma": 1.2, "exposed_comm_share": 0.3, "exposed_gamma": 0.4, "step_us": 100e3}
    dimension = {
        "dimensions_named": 2.0,
        "dimension_exposed_share": 0.2,
        "dimension_exposed_us": 20e3,
        "dimension_wait_us": 1e3,
    }
    straggler = {
        "straggler_rank": 3.0,
        "straggler_cost_share": 0.25,
        "straggler_cost_us": 25e3,
        "straggler_last_share": 0.9,
        "straggler_times_last": 11.0,
        "straggler_instances": 12.0,
        "straggler_group_size": 4.0,
    }
    words = {"dimension_name": "tensor parallelism", "dimension_advice": "advice"}
    assert verdict(Facts(common | dimension, words)).label == "dimension-bound"
    assert verdict(Facts(common | dimension | straggler, words)).label == "straggler-bound"
    weaker = straggler | {"straggler_cost_share": 0.1}
    assert verdict(Facts(common | dimension | weaker, words)).label == "dimension-bound"
    single = dimension | {"dimensions_named": 1.0}
    assert verdict(Facts(common | single, words)).label == "communication-bound"
