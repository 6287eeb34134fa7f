"""The pipeline bubble measured as pipeline idle (docs/metrics.md, "Bubbles"; the seeds' bubble): the step's
time less its compute and less the exposed communication of the rank's other groups (a DP all-reduce's wait is
not the pipeline's bubble). Factory arithmetic and the pipeline sample."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from traceview import api
from traceview.bubbles.pipeline_bubble import pipeline_bubble

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def _p2p() -> pl.DataFrame:
    return pl.DataFrame(
        {"rank": [0, 1], "start_us": [10.0, 10.0], "pg_key": ["3", "3"], "members": [[0, 1], [0, 1]]},
        schema={"rank": pl.Int64, "start_us": pl.Float64, "pg_key": pl.Utf8, "members": pl.List(pl.Int64)},
    )


def test_the_bubble_leaves_out_the_other_groups_exposed_communication() -> None:
    """A 1,000 us step of 600 us compute, of which the DP all-reduce exposes 100 us: 300 us of pipeline
    idle, not 400."""
    windows = pl.DataFrame(
        {"rank": [0, 1], "step": [1, 1], "window_start_us": [0.0, 0.0], "window_end_us": [1000.0, 1000.0]}
    )
    compute = pl.DataFrame({"rank": [0, 1], "step": [1, 1], "compute_us": [600.0, 600.0]})
    other = pl.DataFrame({"rank": [0, 1], "step": [1, 1], "other_exposed_us": [100.0, 0.0]})
    found = pipeline_bubble(compute, windows, _p2p(), 1, other).sort("rank")
    assert found["bubble_us"].to_list() == [1000 - 600 - 100, 1000 - 600 - 0]
    assert found["bubble_fraction"].to_list() == [(1000 - 600 - 100) / 1000, (1000 - 600) / 1000]
    without = pipeline_bubble(compute, windows, _p2p(), 1)
    assert without["bubble_us"].to_list() == [1000 - 600, 1000 - 600]


def test_the_pipeline_samples_idle_is_not_its_dp_all_reduce() -> None:
    """sample_traces/pp4_mismatch: compute back to back, the stages' sends under it; what is not compute is
    the DP all-reduce's exposed time, which the bubble no longer counts."""
    bubbles = api.analyze(SAMPLES / "pp4_mismatch", workers=1).raw.bubbles
    pipeline = bubbles.pipeline
    assert pipeline.height == 4 * 4
    not_compute = pipeline["step_us"] - pipeline["compute_us"]
    assert (not_compute > 50).all()  # the old measure: the DP all-reduce's exposed time and more
    assert pipeline["other_exposed_us"].to_list() == pytest.approx(not_compute.to_list(), abs=1e-3)
    assert pipeline["bubble_us"].max() == pytest.approx(0.0, abs=1e-3)
