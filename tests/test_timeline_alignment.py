"""The report's timeline is drawn on aligned clocks: on the sample with a planted 25 ms host offset, every
rank's last collective of the median step ends at the same instant (the simulator's truth: a collective
completes at one instant on all its members)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from traceview.load.inputs import load_run
from traceview.reduce.analysis import analyze

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def test_collective_ends_line_up_across_hosts_after_alignment() -> None:
    truth = json.loads((SAMPLES / "dp8_straggler.ground_truth.json").read_text())
    assert max(truth["host_offsets_us"]) - min(truth["host_offsets_us"]) == pytest.approx(25_000)
    timeline = analyze(load_run(SAMPLES / "dp8_straggler")).timeline
    ends = (
        timeline.segments.filter((pl.col("step") == timeline.median_step) & (pl.col("lane") == "comm"))
        .group_by("rank")
        .agg(pl.col("end_us").max())
        .get_column("end_us")
    )
    assert ends.len() == 8
    assert ends.max() - ends.min() == pytest.approx(0.0, abs=1.0)  # without alignment: 25,000 us apart
