"""The Ray executor gives exactly what the local executor gives (a local two-CPU Ray; CI installs Ray)."""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from traceview.reports.json.summary import render_json

from traceview import analyze
from traceview.options.run import build_options
from traceview.options.user import UserOptions
from traceview.reduce.pipeline import analyze_files

if importlib.util.find_spec("ray") is None:
    if os.environ.get("CI") == "true":
        raise ImportError("Ray is not installed: .ci/run installs traceview[ray] for this test")
    pytest.skip("Ray is not installed (pip install 'traceview[ray]')", allow_module_level=True)

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.mark.usefixtures("local_ray")
def test_ray_equals_local_on_a_multi_rank_run() -> None:
    run = SAMPLES / "dp8_straggler"
    options = build_options(run, UserOptions(workers=2))
    local = json.loads(render_json(analyze_files(run, options, parallel_min_bytes=0)))
    on_ray = json.loads(render_json(analyze(run, executor="ray").raw))
    assert on_ray == local
    assert len(on_ray["run"]["ranks"]) == 8
