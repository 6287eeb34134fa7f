"""Scale-up post-mortem on two simulated data-parallel runs of 8 and 64 GPUs whose communication time is
known from the simulator's alpha-beta costs, so both efficiencies follow by hand."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tests.simulate.engine import write_run
from tests.simulate.scenario import data_parallel_scenario
from tests.test_compare_planted import summary
from traceview.compare.settings import load_settings
from traceview.compare.two_runs import compare

PARAMS, LOCAL_BATCH, FLOPS, BUCKETS = 100_000_000, 50_000, 150e12, 4
BUCKET_BYTES = PARAMS // BUCKETS * 2  # bf16 gradients
COMPUTE_US = 6 * PARAMS * LOCAL_BATCH / FLOPS * 1e6


def allreduce_us(workers: int, alpha_s: float, bandwidth: float) -> float:
    """Ring all-reduce of one bucket: 2(K-1) alpha + 2(K-1)/K S / B."""
    return (2 * (workers - 1) * alpha_s + 2 * (workers - 1) / workers * BUCKET_BYTES / bandwidth) * 1e6


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, object]]:
    """8 GPUs on one host (NVLink 300 GB/s, 1 us) and 64 on eight (25 GB/s, 5 us across hosts): the links the
    hardware table assumes for an A100, so the model's per-size prediction uses the same figures."""
    root = tmp_path_factory.mktemp("scaling")
    found = {}
    for workers in (8, 64):
        scenario = data_parallel_scenario(workers, PARAMS, LOCAL_BATCH, FLOPS, 25e9, alpha_s=5e-6, steps=6)
        write_run(
            replace(scenario, intra_host_bandwidth_Bps=300e9, intra_host_alpha_s=1e-6), root / str(workers)
        )
        found[workers] = summary(root / str(workers))
    return found


def test_measured_and_predicted_efficiency(runs: dict[int, dict[str, object]]) -> None:
    settings, _ = load_settings()
    comparison = compare(runs[8], runs[64], settings)  # type: ignore[arg-type]
    scaling = comparison.scaling
    assert scaling is not None
    step_8 = COMPUTE_US + BUCKETS * allreduce_us(8, 1e-6, 300e9)
    step_64 = COMPUTE_US + BUCKETS * allreduce_us(64, 5e-6, 25e9)
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
    """The 64-GPU run on a 12.5 GB/s network while the model assumes the table's 25 GB/s: the measured
    efficiency falls short of the predicted one by more than the threshold, the loss is the exposed transfer,
    and the comparison fails (exit 1)."""
    from tests.test_cli import traceview
    from tests.test_compare_planted import summary as summary_of

    root = tmp_path_factory.mktemp("slow-network")
    scenario = data_parallel_scenario(64, PARAMS, LOCAL_BATCH, FLOPS, 12.5e9, alpha_s=5e-6, steps=6)
    write_run(replace(scenario, intra_host_bandwidth_Bps=300e9, intra_host_alpha_s=1e-6), root / "64")
    slow = summary_of(root / "64")
    settings, _ = load_settings()
    comparison = compare(runs[8], slow, settings)  # type: ignore[arg-type]
    scaling = comparison.scaling
    assert scaling is not None
    step_8 = COMPUTE_US + BUCKETS * allreduce_us(8, 1e-6, 300e9)
    assert scaling.measured_efficiency == pytest.approx(
        step_8 / (COMPUTE_US + BUCKETS * allreduce_us(64, 5e-6, 12.5e9)), rel=1e-4
    )
    assert scaling.predicted_efficiency == pytest.approx(
        step_8 / (COMPUTE_US + BUCKETS * allreduce_us(64, 5e-6, 25e9)), rel=1e-3
    )
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
