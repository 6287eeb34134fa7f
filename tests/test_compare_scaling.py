"""Scale-up post-mortem on two simulated data-parallel runs of 8 and 64 GPUs whose communication time is
known from the simulator's alpha-beta costs, so both efficiencies follow by hand.

The 64 GPUs are 8 nodes of 8 with one NIC per GPU (rail-optimised, as an A100 node of the hardware table is
wired): the simulator runs their all-reduces as NCCL does there and as docs/metrics.md ("Predicted gamma",
Links) prices them, a ring inside each node on NVLink, then 8 rail-aligned rings across the nodes."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tests.simulate.engine import write_run
from tests.simulate.scenario import Scenario, data_parallel_scenario
from tests.test_compare_planted import summary
from traceview.compare.settings import load_settings
from traceview.compare.two_runs import compare

PARAMS, LOCAL_BATCH, FLOPS, BUCKETS = 100_000_000, 50_000, 150e12, 4
BUCKET_BYTES = PARAMS // BUCKETS * 2  # bf16 gradients
COMPUTE_US = 6 * PARAMS * LOCAL_BATCH / FLOPS * 1e6


NODES, GPUS, NVLINK, NVLINK_ALPHA = 8, 8, 300e9, 1e-6


def allreduce_us(workers: int, alpha_s: float, bandwidth: float) -> float:
    """Ring all-reduce of one bucket: 2(K-1) alpha + 2(K-1)/K S / B."""
    return (2 * (workers - 1) * alpha_s + 2 * (workers - 1) / workers * BUCKET_BYTES / bandwidth) * 1e6


def hierarchical_allreduce_us(nic_alpha_s: float, nic_bandwidth: float) -> float:
    """All-reduce of one bucket over 8 nodes of 8 GPUs, one NIC each: 2 [(g-1) alpha_NVLink + (N-1) alpha_NIC]
    + 2 [(g-1)/g S / B_NVLink + (N-1)/N S / (g B_NIC)]."""
    latency = 2 * ((GPUS - 1) * NVLINK_ALPHA + (NODES - 1) * nic_alpha_s)
    inside = 2 * (GPUS - 1) / GPUS * BUCKET_BYTES / NVLINK
    across = 2 * (NODES - 1) / NODES * BUCKET_BYTES / (GPUS * nic_bandwidth)
    return (latency + inside + across) * 1e6


def on_rails(scenario: Scenario) -> Scenario:
    """`scenario` on nodes of 8 GPUs on NVLink (300 GB/s, 1 us), each GPU with its own NIC."""
    return replace(
        scenario, intra_host_bandwidth_Bps=NVLINK, intra_host_alpha_s=NVLINK_ALPHA, nics_per_host=GPUS
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, object]]:
    """8 GPUs on one host (NVLink 300 GB/s, 1 us) and 64 on eight (25 GB/s, 5 us across hosts): the links the
    hardware table assumes for an A100, so the model's per-size prediction uses the same figures."""
    root = tmp_path_factory.mktemp("scaling")
    found = {}
    for workers in (8, 64):
        scenario = data_parallel_scenario(workers, PARAMS, LOCAL_BATCH, FLOPS, 25e9, alpha_s=5e-6, steps=6)
        write_run(on_rails(scenario), root / str(workers))
        found[workers] = summary(root / str(workers))
    return found


def test_measured_and_predicted_efficiency(runs: dict[int, dict[str, object]]) -> None:
    settings, _ = load_settings()
    comparison = compare(runs[8], runs[64], settings)  # type: ignore[arg-type]
    scaling = comparison.scaling
    assert scaling is not None
    step_8 = COMPUTE_US + BUCKETS * allreduce_us(8, 1e-6, 300e9)
    step_64 = COMPUTE_US + BUCKETS * hierarchical_allreduce_us(5e-6, 25e9)
    # 4 x 305.67 us inside one node; 4 x (84 + 291.67 + 437.5) us across 8: 201222.7 / 203252.7 = 0.99001
    assert step_8 / step_64 == pytest.approx(0.99001, rel=1e-5)
    assert scaling.measured_efficiency == pytest.approx(step_8 / step_64, rel=1e-4)
    assert scaling.predicted_efficiency == pytest.approx(step_8 / step_64, rel=1e-3)
    factors = dict(zip(scaling.factors["factor"], scaling.factors["delta_us"], strict=True))
    assert factors["exposed transfer (bandwidth)"] == pytest.approx(step_64 - step_8, rel=1e-4)
    assert abs(factors["compute change"]) < 1.0
    assert comparison.failing == []  # as the model expects: exit 0
    assert comparison.verdict.startswith(
        "Different jobs (world size 8 -> 64; process groups 8 ranks -> 64 ranks): scaling 8 -> 64 GPUs"
    )


def test_slower_network_than_the_model_is_a_shortfall(
    runs: dict[int, dict[str, object]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The 64-GPU run on 2.5 GB/s NICs while the model assumes the table's 25 GB/s: the measured efficiency
    falls short of the predicted one by more than the threshold, the loss is the exposed transfer, and the
    comparison fails (exit 1). (Half the bandwidth would lose only 1% here: the 8 rails carry the node's
    share, so the NICs weigh 1/8 of a flat ring's.)"""
    from tests.test_cli import traceview
    from tests.test_compare_planted import summary as summary_of

    root = tmp_path_factory.mktemp("slow-network")
    scenario = data_parallel_scenario(64, PARAMS, LOCAL_BATCH, FLOPS, 2.5e9, alpha_s=5e-6, steps=6)
    write_run(on_rails(scenario), root / "64")
    slow = summary_of(root / "64")
    settings, _ = load_settings()
    comparison = compare(runs[8], slow, settings)  # type: ignore[arg-type]
    scaling = comparison.scaling
    assert scaling is not None
    step_8 = COMPUTE_US + BUCKETS * allreduce_us(8, 1e-6, 300e9)
    assert scaling.measured_efficiency == pytest.approx(
        step_8 / (COMPUTE_US + BUCKETS * hierarchical_allreduce_us(5e-6, 2.5e9)), rel=1e-4
    )
    assert scaling.predicted_efficiency == pytest.approx(
        step_8 / (COMPUTE_US + BUCKETS * hierarchical_allreduce_us(5e-6, 25e9)), rel=1e-3
    )
    # 201222.7 / (200000 + 4 x (84 + 291.67 + 4375)) = 0.91881 against 0.99001: 7.2% short, over 5%
    shortfall = comparison.scaling_shortfall_pct
    assert shortfall is not None
    assert shortfall == pytest.approx(
        (1 - scaling.measured_efficiency / scaling.predicted_efficiency) * 100  # type: ignore[operator]
    )
    assert shortfall > settings.threshold_pct
    largest = scaling.factors.sort("delta_us", descending=True).row(0, named=True)
    assert largest["factor"] == "exposed transfer (bandwidth)"
    assert comparison.failing
    assert "loss beyond the model" in comparison.verdict
    saved = [tmp_path_factory.mktemp("saved") / name for name in ("8.json", "64.json")]
    for path, document in zip(saved, (runs[8], slow), strict=True):
        path.write_text(json.dumps(document), encoding="utf-8")
    refused = traceview("compare", *map(str, saved), "--json")
    assert refused.returncode == 2  # a scale-up is another job: said, and refused unless allowed
    assert "world size 8 -> 64" in refused.stderr
    result = traceview("compare", *map(str, saved), "--json", "--allow-different-jobs")
    assert result.returncode == 1
    assert json.loads(result.stdout)["scaling"]["predicted_efficiency"] == pytest.approx(
        scaling.predicted_efficiency
    )
