"""One meaning per input (docs/metrics.md, "Predicted gamma" inputs and "Parallelism dimensions" volumes): P
is the whole model, a rank's formulas divide it by the stated shards or take a stated P per rank (a
disagreement said); b is the local batch in tokens for a transformer and A = h b / m never multiplies it by s
again. The pipeline sample's volumes recomputed by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from traceview import api
from traceview.prediction.trace_facts import Assumption, Stated, rank_params

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
MIB = 2**20


def test_p_per_rank_is_p_over_the_stated_shards() -> None:
    whole = Assumption("P (parameters)", 16e6, "", "manifest")
    found, note = rank_params(whole, Stated(params=16e6, model_shards=4))
    assert found.value == 16e6 / 4
    assert note == ""


def test_a_stated_p_per_rank_wins_and_a_disagreement_is_said() -> None:
    whole = Assumption("P (parameters)", 16e6, "", "manifest")
    agreeing, quiet = rank_params(whole, Stated(params=16e6, params_per_rank=8e6, model_shards=2))
    assert agreeing.value == 8e6
    assert quiet == ""
    apart, said = rank_params(whole, Stated(params=16e6, params_per_rank=6e6, model_shards=2))
    assert apart.value == 6e6
    assert "P / shards = 1.6e+07 / 2 = 8e+06 disagrees with the stated P per rank 6e+06" in said


def test_without_shards_every_rank_holds_p() -> None:
    found, _ = rank_params(Assumption("P (parameters)", 3e9, "", "command line"), Stated(params=3e9))
    assert found.value == 3e9


@pytest.fixture(scope="module")
def pipeline() -> api.Analysis:
    """sample_traces/pp4_mismatch: 2 stages (ranks 0,1 and 2,3) x DP 2; its run.json states what a recorder
    on a stage counts: 8,388,608 parameters per rank (one stage's), a local batch of 8,192 tokens."""
    return api.analyze(SAMPLES / "pp4_mismatch", workers=1)


def test_the_pipeline_samples_dp_volume_by_hand(pipeline: api.Analysis) -> None:
    dimensions = pipeline.raw.dimensions
    assert dimensions is not None
    assert dimensions.inputs is not None
    p_per_rank, stages, dp_ranks, e = 8_388_608, 2, 2, 2  # bf16 gradients
    assert dimensions.inputs.params.value == p_per_rank * stages  # P, the whole model
    row = dimensions.volumes.filter(dimensions.volumes["dimension"] == "dp").row(0, named=True)
    expected = 2 * (dp_ranks - 1) / dp_ranks * (p_per_rank * stages / stages) * e
    assert row["expected_bus_bytes"] == pytest.approx(expected)
    assert row["measured_bus_bytes"] == pytest.approx(2 * (dp_ranks - 1) / dp_ranks * 16 * MIB)
    assert row["ratio"] == pytest.approx(1.0)
    advice = pipeline.raw.recommendations
    assert advice is not None
    assert all("no_sync" not in item.sentence for item in advice.items)


def test_the_sequence_length_never_multiplies_a_local_batch_in_tokens() -> None:
    """A = h x b / m with b = 8,192 tokens: `seq=2048` does not make it 2,048 times larger."""
    shaped = api.analyze(SAMPLES / "pp4_mismatch", workers=1, shape="hidden=1024,seq=2048,micro_batches=4")
    inputs = shaped.raw.dimensions.inputs if shaped.raw.dimensions else None
    assert inputs is not None
    assert inputs.activation.value == pytest.approx(1024 * 8192 / 4)
