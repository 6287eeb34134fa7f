"""What a prediction lacks or doubts (docs/metrics.md, "Predicted gamma"): always a `Prediction`, with one
line naming the missing input when gamma_pred cannot be computed; stated P and b used for the FLOPs;
figures no device reaches named; and on a real single-rank trace, call durations that do not grow with
their bytes."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

import pytest

from tests import kineto_factory as kf
from tests.shared_data import REAL_KINETO, requires_shared
from tests.simulate.engine import write_run
from tests.simulate.scenario import data_parallel_scenario
from traceview.load.inputs import load_run
from traceview.prediction.gamma import Prediction
from traceview.prediction.inputs import ModelOptions
from traceview.reduce.analysis import RunOptions, analyze

P, B, R, BW = 4_000_000, 16, 40e12, 20e9


def predicted(folder: Path, **options: object) -> Prediction:
    found = analyze(load_run(str(folder), workers=1), RunOptions(model=ModelOptions(**options))).prediction  # type: ignore[arg-type]
    assert found is not None
    return found


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 workers, P = 4M, b = 16, R = 40 TFLOP/s, B = 20 GB/s, alpha 0, FLOPs recorded (6 P b per step)."""
    folder = tmp_path_factory.mktemp("recorded")
    write_run(data_parallel_scenario(4, P, B, R, BW, steps=2), folder)
    return folder


@pytest.fixture(scope="module")
def unrecorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("unrecorded")
    write_run(data_parallel_scenario(4, P, B, R, BW, steps=2, with_flops=False), folder)
    return folder


def test_without_b_the_missing_input_is_named(unrecorded: Path) -> None:
    found = predicted(unrecorded)
    assert found.run["gamma_pred"] is None
    assert found.missing_input == (
        "local batch (or model FLOPs per sample): pass --local-batch or write model.local_batch in run.json"
    )
    assert found.sentence.startswith("No predicted gamma: it needs the local batch")
    assert found.run["comm_ratio"] is not None  # the communication side is still compared


def test_an_unknown_device_lacks_the_link_then_the_peak(tmp_path: Path) -> None:
    scenario = data_parallel_scenario(2, 1_000_000, 8, 10e12, 10e9, steps=1)
    write_run(replace(scenario, device_name="Mystery Accelerator 9000"), tmp_path)
    first = predicted(tmp_path)
    assert first.missing_input == (
        "link bandwidth (device 'Mystery Accelerator 9000' is not in the hardware table): pass --bandwidth "
        "or "
        "write hardware.intra_bandwidth_Bps in run.json"
    )
    then = predicted(tmp_path, bandwidth_Bps=10e9)
    assert then.missing_input is not None
    assert then.missing_input.startswith(
        "peak FLOP/s (device 'Mystery Accelerator 9000' is not in the hardware"
    )
    done = predicted(tmp_path, bandwidth_Bps=10e9, peak_flops=10e12)
    assert done.missing_input is None
    assert done.run["gamma_pred"] is not None
    assert done.dominant is not None


def test_a_run_without_communication_is_a_prediction_that_says_so(tmp_path: Path) -> None:
    events = [kf.step(1, 0, 100), kf.launch(5, 1), kf.kernel("ampere_sgemm_128x64_nn", 10, 50, correlation=1)]
    kf.write(kf.document(events), tmp_path / "rank0.json")
    found = predicted(tmp_path)
    assert found.run["gamma_pred"] is None
    assert found.missing_input == "collective calls: no communication kernel falls inside a step window"
    assert found.link_known is False


def test_stated_params_and_batch_make_the_flops(recorded: Path) -> None:
    """P and b on the command line: FLOPs = 6 P b from them, before the trace's flops args."""
    found = predicted(recorded, params=2e6, local_batch=8.0, peak_flops=R, efficiency=1.0, bandwidth_Bps=BW)
    flops = {(a.name): (a.value, a.source) for a in found.inputs.assumptions}["FLOPs per step"]
    assert flops == ("6 P b", "command line")
    assert found.per_step["comp_pred_us"].to_list() == pytest.approx(
        [6 * 2e6 * 8 / R * 1e6] * found.per_step.height
    )


def test_stated_params_alone_cannot_make_flops_and_says_why(recorded: Path) -> None:
    found = predicted(recorded, params=2e6, peak_flops=R, efficiency=1.0, bandwidth_Bps=BW)
    assert found.inputs.flops_source == "trace"
    assert any(note.startswith("P (command line) is not used for the FLOPs") for note in found.inputs.notes)
    # the trace's flops are the simulated 6 P b of the real P: T_comp_pred = 6 P b / R exactly
    assert found.per_step["comp_pred_us"].to_list() == pytest.approx(
        [6 * P * B / R * 1e6] * found.per_step.height
    )


def test_flops_per_sample_times_b(recorded: Path) -> None:
    found = predicted(
        recorded, flops_per_sample=1e9, local_batch=4.0, peak_flops=R, efficiency=1.0, bandwidth_Bps=BW
    )
    assert found.inputs.flops_source == "FLOPs per sample x b"
    assert found.per_step["comp_pred_us"].to_list() == pytest.approx(
        [1e9 * 4 / R * 1e6] * found.per_step.height
    )


def test_achieved_flops_above_the_peak_is_named(recorded: Path) -> None:
    """A stated peak of 1 TFLOP/s against a run computing at 40: achieved / peak = 40, which no
    device does."""
    found = predicted(recorded, peak_flops=1e12, efficiency=1.0, bandwidth_Bps=BW, alpha_s=0.0)
    assert found.dominant == "compute_eff"
    assert found.run["compute_eff"] == pytest.approx(R / 1e12, rel=1e-3)
    caveat = found.trust.caveat_of("compute_eff") if found.trust else None
    assert caveat is not None
    assert caveat.startswith(f"achieved FLOP/s would be {R / 1e12:.3g}x the device's peak")
    assert caveat in found.sentence


def test_stated_links_are_known_and_defaults_are_listed(recorded: Path) -> None:
    found = predicted(recorded, bandwidth_Bps=BW, alpha_s=0.0)
    assert found.link_known is True
    assert found.trust is not None
    assert found.trust.assumed_links == ()
    assert "efficiency" in found.trust.defaulted
    table = predicted(recorded)
    assert table.link_known is False


def _least_squares_slope(points: list[tuple[float, float]]) -> float:
    xs, ys = [math.log(s) for s, _ in points], [math.log(d) for _, d in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


@requires_shared
def test_durations_that_do_not_follow_bytes_on_a_real_trace() -> None:
    """hta_nccl_data (rank 0 of 2, A100, NCCL 2.17): its 15 all-reduces of 8-32 MB take 1.7-3.3 ms whatever
    their size, so the gap to an NVLink B is not bandwidth: the sentence says so. The slope is recomputed by a
    plain least-squares pass over the collectives table (one kernel per call)."""
    analysis = analyze(load_run(str(REAL_KINETO / "hta_nccl_data"), workers=1))
    assert analysis.collectives is not None
    assert analysis.prediction is not None
    rows = analysis.collectives.kernels.filter(analysis.collectives.kernels["collective"] == "AllReduce")
    points = [(float(r["size_bytes"]), float(r["dur_us"])) for r in rows.iter_rows(named=True)]
    assert len(points) == 15
    expected = _least_squares_slope(points)
    caveat = analysis.prediction.trust.caveat_of("bandwidth_eff") if analysis.prediction.trust else None
    assert caveat is not None
    found = re.search(r"slope (-?[\d.]+)", caveat)
    assert found is not None
    assert float(found.group(1)) == pytest.approx(expected, abs=0.005)
    assert expected < 0.5
    assert "not transfer" in analysis.prediction.sentence
    assert analysis.prediction.link_known is False
