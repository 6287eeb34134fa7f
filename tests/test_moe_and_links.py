"""MoE balance and the links measured, on simulated runs of known truth (tests/simulate/parallel.py).

MoE: every rank routes 224 of its 512 tokens to local rank 2 (a hot expert) and 96 to each other rank, and
that rank computes longer; the control splits evenly. Links: all-reduces of 12 sizes over LL (below 1 MiB) and
Simple, each with its own planted alpha and B, transfers jittered by 5%, rank 5 launching late (its peers
wait): alpha and B recovered within 10% from traceview's own transfer times; equal buckets and too few calls
are not fitted."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tests.shared_data import REAL_KINETO, requires_shared
from tests.simulate.parallel import (
    BALANCED_SPLITS,
    HOT_SPLITS,
    LL_LINK,
    SIMPLE_LINK,
    alpha_beta,
    moe,
    write_planted,
)
from traceview.api import analyze
from traceview.links_measured.fit import t975
from traceview.reduce.results import RunAnalysis

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


@pytest.fixture(scope="module")
def hot(tmp_path_factory: pytest.TempPathFactory) -> RunAnalysis:
    path, _ = write_planted(moe(hot=True), tmp_path_factory.mktemp("hot"))
    return analyze(path, workers=1).raw


@pytest.fixture(scope="module")
def balanced(tmp_path_factory: pytest.TempPathFactory) -> RunAnalysis:
    path, _ = write_planted(moe(hot=False), tmp_path_factory.mktemp("balanced"))
    return analyze(path, workers=1).raw


@pytest.fixture(scope="module")
def links(tmp_path_factory: pytest.TempPathFactory) -> RunAnalysis:
    path, _ = write_planted(alpha_beta(), tmp_path_factory.mktemp("links"))
    return analyze(path, workers=1).raw


def test_the_hot_expert_is_found_with_its_imbalance_and_its_cost(hot: RunAnalysis) -> None:
    assert hot.moe is not None
    groups = {row["group"]: row for row in hot.moe.per_group.iter_rows(named=True)}
    # the dispatch: rank 2 receives 4 x 224 rows against a mean of 512 (every rank sends 512)
    imbalance = 4 * HOT_SPLITS[2] / (sum(HOT_SPLITS))
    for group, hottest in (("1", 2), ("2", 6)):  # the EP groups of the two hosts: ranks 0-3 and 4-7
        assert groups[group]["imbalance"] == pytest.approx(imbalance)
        assert groups[group]["hottest_ranks"] == [hottest]
        assert groups[group]["hot_last_share"] == 1.0  # the hot rank computes longer: it arrives last
        assert groups[group]["wait_us"] > 0
    assert hot.dimensions is not None
    assert dict(hot.dimensions.groups.select("group", "dimension").iter_rows())["1"] == "ep"
    assert hot.moe.sentence.startswith("Expert load is imbalanced in group ")
    assert "hottest ranks: " in hot.moe.sentence
    assert "its peers wait a median" in hot.moe.sentence
    assert "moe-imbalance" in [item.rule for item in hot.recommendations.items]  # type: ignore[union-attr]


def test_the_send_matrix_by_hand(hot: RunAnalysis) -> None:
    assert hot.moe is not None
    cells = {
        (r["src"], r["dst"]): r["bytes"]
        for r in hot.moe.matrix.filter(pl.col("group") == "1").iter_rows(named=True)
    }
    row_bytes = 1024 * 2
    # per step: 4 dispatches (2 layers, forward and backward) of 224 rows from rank 0 to rank 2, and 4
    # combines, which send back what came: rank 0's combine row is the dispatch's column 0 (96 rows each)
    assert cells[(0, 2)] == 4 * (HOT_SPLITS[2] + HOT_SPLITS[0]) * row_bytes
    assert cells[(2, 0)] == 4 * (HOT_SPLITS[0] + HOT_SPLITS[2]) * row_bytes
    assert cells[(0, 1)] == 4 * (HOT_SPLITS[1] + HOT_SPLITS[0]) * row_bytes


def test_the_balanced_control_is_one(balanced: RunAnalysis) -> None:
    assert balanced.moe is not None
    assert set(balanced.moe.per_group.get_column("imbalance").to_list()) == {1.0}
    assert all(ranks == [] for ranks in balanced.moe.per_group.get_column("hottest_ranks").to_list())
    assert BALANCED_SPLITS == (128,) * 4
    assert balanced.moe.sentence.startswith("The all-to-alls of group ")
    assert "are balanced" in balanced.moe.sentence


def test_expert_volume_against_the_formula(balanced: RunAnalysis, hot: RunAnalysis) -> None:
    for analysis in (balanced, hot):
        assert analysis.dimensions is not None
        row = analysis.dimensions.volumes.filter(pl.col("dimension") == "ep").row(0, named=True)
        # 4 (E-1)/E x L_moe x m x A x k x e = 4 x 3/4 x 2 x 1 x (512 tokens x 1024) x 1 x 2 B
        assert row["expected_bus_bytes"] == 4 * 3 / 4 * 2 * 1 * 512 * 1024 * 1 * 2
        assert row["ratio"] == pytest.approx(
            1.0
        )  # an uneven split moves the same total: the mean is compared


@requires_shared
def test_all_to_alls_without_splits_are_not_measurable() -> None:
    run = REAL_KINETO / "hta_16rank_job_rank0"
    analysis = analyze(run, workers=1).raw
    assert analysis.moe is not None
    assert not analysis.moe.measurable
    assert analysis.moe.sentence.endswith("the expert balance is not measurable from this trace.")


@pytest.mark.parametrize(("protocol", "planted"), [("LL", LL_LINK), ("SIMPLE", SIMPLE_LINK)])
def test_alpha_and_beta_recovered_within_ten_percent(
    links: RunAnalysis, protocol: str, planted: tuple[float, float]
) -> None:
    assert links.links_measured is not None
    row = links.links_measured.classes.filter(pl.col("protocol") == protocol).row(0, named=True)
    alpha_s, bandwidth = planted
    assert row["fitted"]
    assert row["calls"] == 4 * 6
    assert row["alpha_us"] == pytest.approx(alpha_s * 1e6, rel=0.10)
    assert row["bandwidth_Bps"] == pytest.approx(bandwidth, rel=0.10)
    assert row["alpha_lo_us"] < row["alpha_us"] < row["alpha_hi_us"]
    assert row["bandwidth_lo_Bps"] < row["bandwidth_Bps"] < row["bandwidth_hi_Bps"]
    assert row["table_alpha_us"] == pytest.approx(5.0)  # the run.json's stated link, shown beside


def test_the_fit_reads_transfer_times_not_durations(links: RunAnalysis) -> None:
    assert links.crossrank is not None
    waited = links.crossrank.per_rank.filter(pl.col("rank") != 5).get_column("wait_us")
    assert waited.min() > 1000  # the peers of the late rank wait, yet the fit above recovers the links


def test_equal_buckets_are_not_fitted() -> None:
    for sample in ("dp8_ideal", "pp4_mismatch"):
        analysis = analyze(SAMPLES / sample, workers=1).raw
        assert analysis.links_measured is not None
        for row in analysis.links_measured.classes.iter_rows(named=True):
            assert not row["fitted"]
            assert row["alpha_us"] is None
            assert row["bandwidth_Bps"] is None
            assert row["reason"] == "not fitted: every call has one size (alpha and B cannot be told apart)"


def test_links_measured_feed_the_prediction_and_say_so(tmp_path: Path) -> None:
    path, _ = write_planted(alpha_beta(), tmp_path)
    table = analyze(path, workers=1).raw
    measured = analyze(path, workers=1, links="measured").raw
    assert table.prediction is not None
    assert measured.prediction is not None
    assert measured.links_measured is not None
    assert measured.links_measured.used
    assert not table.links_measured.used  # type: ignore[union-attr]
    inter = measured.prediction.inputs.inter
    assert inter is not None
    assert inter.source == "measured"
    scope = measured.links_measured.scopes.row(0, named=True)
    assert inter.bandwidth_Bps == pytest.approx(scope["bandwidth_Bps"])
    assert measured.prediction.sentence.startswith("The prediction uses links measured in this run")
    assert "not an independent check" in " ".join(measured.verdict.notes)
    assert table.prediction.inputs.inter.source == "manifest"  # type: ignore[union-attr]
    priced = measured.prediction.calls  # every call priced on the measured link (the what-ifs read the same)
    assert priced.get_column("link_source").unique().to_list() == ["measured"]
    assert priced.get_column("bandwidth_Bps").unique().to_list() == [pytest.approx(scope["bandwidth_Bps"])]


def test_student_t_quantiles() -> None:
    frame = pl.DataFrame({"df": [1, 10, 30, 60, 1000]})
    values = frame.select(t975(pl.col("df"))).to_series().to_list()
    # tables: 12.706, 2.228, 2.042; 60: 2.000; 1000: 1.962
    assert values == pytest.approx([12.706, 2.228, 2.042, 2.000, 1.962], abs=2e-3)
