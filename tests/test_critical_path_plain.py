"""The tool's critical path of one step of two real traces against `tests/critical_path_plain.py`, a plain
pass over the same JSON that imports nothing of traceview (the device's categories compared as one sum,
communication as one, every host category on its own)."""

from __future__ import annotations

import pytest

import traceview
from tests.critical_path_plain import path_of
from tests.shared_data import REAL_KINETO, requires_shared
from traceview.critical_path.categories import DEVICE_CATEGORIES, HOST_CATEGORIES

pytestmark = requires_shared

TRACES = [
    ("hta_nccl_data/nccl_data.json.gz", 1),  # NCCL kernels under compute and exposed
    ("h200_pt211_nccl_ddp1/ddp_rank0.json.gz", 1),  # cuda_driver calls, an optimizer
    ("kineto_pt19_resnet50_profiler_api/worker0.pt.trace.json.gz", 2),  # a DataLoader, an optimizer
]


@pytest.mark.parametrize(("name", "place"), TRACES)
def test_one_step_as_a_plain_pass_finds_it(name: str, place: int) -> None:
    path = REAL_KINETO / name
    analysis = traceview.analyze(path).raw
    assert analysis.critical_path is not None
    shift = analysis.header.base_shifts_us[0]
    window = analysis.budget.per_step.row(place, named=True)
    tool = analysis.critical_path.per_step.row(place, named=True)
    assert (tool["rank"], tool["step"]) == (window["rank"], window["step"])
    plain = path_of(path, window["window_start_us"] - shift, window["window_end_us"] - shift)
    assert sum(tool[f"{c}_us"] for c in DEVICE_CATEGORIES) == pytest.approx(plain["device"], abs=1.0)
    assert tool["comm_transfer_us"] + tool["peer_wait_us"] == pytest.approx(plain["comm"], abs=1.0)
    for category in (*HOST_CATEGORIES, "other"):
        assert tool[f"{category}_us"] == pytest.approx(plain[category], abs=1.0), category
    held = sum(value for key, value in plain.items())
    assert held == pytest.approx(tool["step_us"], abs=1.0)
    assert plain["device"] > 0
