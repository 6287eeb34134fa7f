"""Every analysis and every renderer on every real trace folder in ../shared/data/real/kineto: nothing
crashes, the outputs hold together, and the identities of docs/metrics.md hold on real data."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from traceview.reports.html.page import render_html
from traceview.reports.json.summary import render_json

from tests.shared_data import requires_shared
from tests.test_cli import documented_schema_version
from traceview.load.inputs import load_run
from traceview.reduce.analysis import analyze
from traceview.verdict.headline import RULES

pytestmark = requires_shared

REAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "real" / "kineto"
FOLDERS = sorted(p.name for p in REAL.iterdir() if p.is_dir()) if REAL.is_dir() else []
VERDICTS = {rule.label for rule in RULES}


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_analysis_and_renderer_on_real_traces(folder: str) -> None:
    analysis = analyze(load_run(REAL / folder))
    assert analysis.verdict.label in VERDICTS
    per_step = analysis.budget.per_step
    if per_step.height:
        identities = per_step.select(
            (pl.col("exposed_comm_us") - (pl.col("comm_us") - pl.col("overlap_us")))
            .abs()
            .max()
            .alias("exposed"),
            (pl.col("idle_us") - (pl.col("step_us") - pl.col("busy_us") - pl.col("host_comm_wait_us")))
            .abs()
            .max()
            .alias("idle"),  # the device's wait inside host collectives is carved out of idle
            (pl.col("comm_device_us") + pl.col("comm_copy_us") + pl.col("comm_host_us") - pl.col("comm_us"))
            .abs()
            .max()
            .alias("split"),
            (pl.col("overlap_us") - pl.min_horizontal("comp_us", "comm_us")).max().alias("overlap_bound"),
            (pl.col("busy_us") - pl.col("step_us")).max().alias("busy_bound"),
        ).row(0, named=True)
        assert identities["exposed"] < 1e-6
        assert identities["idle"] < 1e-6
        assert identities["split"] < 1e-6
        assert identities["overlap_bound"] <= 1e-6  # |C ∩ M| never exceeds |C| or |M|
        assert identities["busy_bound"] <= 1e-6  # the device is never busier than the window is long
    document = json.loads(render_json(analysis))
    assert document["schema_version"] == documented_schema_version()
    assert document["verdict"]["label"] == analysis.verdict.label
    page = render_html(analysis, plotlyjs="cdn")
    assert page.count('id="verdict"') == 1
    assert analysis.verdict.label in page


SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
DETERMINISM_RUNS = [
    REAL / name for name in ("hta_16rank_job_rank0", "hta_sampled_2rank", "hta_trace_diff_control")
]


@pytest.mark.parametrize(
    "run_path", [*DETERMINISM_RUNS, SAMPLES / "dp8_straggler", SAMPLES / "pp4_mismatch"], ids=lambda p: p.name
)
def test_the_same_input_gives_the_same_json(run_path: Path) -> None:
    """Ties in sorts or group-bys must be broken explicitly: a nightly diff must not see noise."""
    run = load_run(run_path)
    outputs = {render_json(analyze(run)) for _ in range(3)}
    assert len(outputs) == 1
