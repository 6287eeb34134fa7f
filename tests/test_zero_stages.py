"""ZeRO-1/2/3 against DDP (docs/metrics.md, "Parallelism dimensions", ZeRO stages; the seeds' 8.2 and 8.4):
memory per rank and bus bytes per rank per step, worked by hand, and the README sample's; context
parallelism's volumes (Ulysses, ring attention) worked by hand."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from traceview import api
from traceview.dimensions.volume import VOLUME_RULES, Input, VolumeInputs, measured_volumes, rule_row
from traceview.dimensions.zero import run_zero, zero_table

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def test_a_billion_parameters_over_eight_ranks_by_hand() -> None:
    n, f, e = 1e9, 8.0, 2.0
    table = zero_table(n, f, e)
    memory = dict(zip(table["stage"], table["memory_bytes_per_rank"], strict=True))
    assert memory["DDP"] == pytest.approx(4e9 + 2e9 + 12e9)  # 18N
    assert memory["ZeRO-1"] == pytest.approx(4e9 + 2e9 + 12e9 / 8)  # 6N + 12N/F
    assert memory["ZeRO-2"] == pytest.approx(4e9 + 14e9 / 8)  # 4N + 14N/F
    assert memory["ZeRO-3 / FSDP"] == pytest.approx(18e9 / 8)  # 18N/F
    bus = dict(zip(table["stage"], table["bus_bytes_per_step"], strict=True))
    assert bus["DDP"] == bus["ZeRO-1"] == bus["ZeRO-2"] == pytest.approx(2 * 7 / 8 * 1e9 * 2)  # 2N
    assert bus["ZeRO-3 / FSDP"] == pytest.approx(3 * 7 / 8 * 1e9 * 2)  # 3N: 1.5x DDP's
    assert table["missing"].null_count() == table.height


def test_unknown_inputs_are_null_with_the_reason() -> None:
    table = run_zero(None, {"tp": 2.0}, 2.0)
    assert table["memory_bytes_per_rank"].null_count() == table.height
    assert table["bus_bytes_per_step"].null_count() == table.height
    reason = table["missing"][0]
    assert "P: --params" in reason
    assert "F: no data-parallel" in reason


def test_n_is_one_replicas_parameters() -> None:
    table = run_zero(16e6, {"pp": 2.0, "dp": 2.0}, 2.0)
    assert table["params_per_replica"][0] == 16e6 / 2
    assert table["bus_bytes_per_step"][0] == pytest.approx(2 * 1 / 2 * 8e6 * 2)


def test_the_readme_samples_ddp_row_is_its_measured_gradient_volume() -> None:
    """dp8_straggler: P = 104,857,600 over K = 8 ranks in bf16: DDP's 2 (K-1)/K N e = 367,001,600 B, the
    measured bus bytes of its gradient all-reduces per rank per step."""
    dimensions = api.analyze(SAMPLES / "dp8_straggler", workers=1).raw.dimensions
    assert dimensions is not None
    ddp = dimensions.zero.row(0, named=True)
    assert ddp["stage"] == "DDP"
    assert ddp["bus_bytes_per_step"] == pytest.approx(2 * 7 / 8 * 104_857_600 * 2)
    volume = dimensions.volumes.filter(dimensions.volumes["dimension"] == "dp").row(0, named=True)
    assert volume["measured_bus_bytes"] == pytest.approx(ddp["bus_bytes_per_step"])


def _cp_calls(collective: str, calls: int, size: int) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "rank": [0] * calls,
            "step": [1] * calls,
            "dimension": ["cp"] * calls,
            "collective": [collective] * calls,
            "size_bytes": [size] * calls,
            "group_size": [4] * calls,
            "elem_size": [2] * calls,
        }
    )


def _cp_inputs() -> VolumeInputs:
    return VolumeInputs(
        params=Input("P", None, "default"),
        activation=Input("A", 1e6, "command line"),
        layers=Input("L", 8.0, "command line"),
        micro_batches=Input("m", 2.0, "command line"),
        top_k=Input("k", None, "default"),
        moe_layers=Input("MoE layers", None, "default"),
        sizes={"cp": 4.0},
    )


@pytest.mark.parametrize(
    ("collective", "calls", "size", "expected"),
    [
        # Ulysses: 8 (C-1)/C L m A e = 8 x 3/4 x 8 x 2 x 1e6 x 2; 64 all-to-alls of 4e6 B move 3/4 of each
        ("AllToAll", 64, 4_000_000, 8 * 3 / 4 * 8 * 2 * 1e6 * 2),
        # ring attention: 6 (C-1) L m A e = 6 x 3 x 8 x 2 x 1e6 x 2; 288 sends of 2e6 B
        ("SendRecv", 288, 2_000_000, 6 * 3 * 8 * 2 * 1e6 * 2),
    ],
)
def test_context_parallel_volumes_by_hand(collective: str, calls: int, size: int, expected: float) -> None:
    rule = next(r for r in VOLUME_RULES if r.dimension == "cp" and collective in r.collectives)
    [measured] = measured_volumes(_cp_calls(collective, calls, size), [rule])
    row = rule_row(measured, rule, _cp_inputs())
    assert row is not None
    assert row["expected_bus_bytes"] == pytest.approx(expected)
    assert row["ratio"] == pytest.approx(1.0)
