"""One gate, one answer: over planted series of nightly summaries, every finding `compare` fails on between
the last stable night and the candidate, `trend` fails on too (docs/compare.md, "trend and compare"); a job
change splits the series; a new problem over a zero baseline is `new`, never a percentage of zero."""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from traceview.reports.json.summary import summary_document

from traceview.compare.settings import load_settings
from traceview.compare.stats import relative_change
from traceview.compare.trend import run_series, trend_of_runs
from traceview.compare.two_runs import compare
from traceview.load.inputs import load_run
from traceview.reduce.analysis import analyze

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "dp8_straggler"
TIMES = ("step_us", "comp_us", "comm_us", "exposed_comm_us", "idle_us")


@functools.cache
def _base() -> bytes:
    return msgspec.json.encode(summary_document(analyze(load_run(str(SAMPLE)))))


def _night(day: int, jitter: float, rank: int | None = None, factor: float = 1.0) -> dict[str, Any]:
    """The sample's summary as night `day`: every time of the budget times `jitter`, and rank `rank`'s
    compute (and so its step) times `factor` more."""
    document: dict[str, Any] = msgspec.json.decode(_base())
    document["run"]["recorded_at"] = f"2026-11-{day:02d}T02:00:00+00:00"
    document["run"]["label"] = f"night {day}"
    for row in document["time_budget"]["per_step"]:
        for column in TIMES:
            if row.get(column) is not None:
                row[column] *= jitter
        if row["rank"] == rank and row.get("comp_us") is not None:
            row["comp_us"] *= factor
            row["step_us"] += row["comp_us"] * (1 - 1 / factor)
    return document


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nights=st.integers(min_value=5, max_value=7),
    jitters=st.lists(st.floats(min_value=0.995, max_value=1.005), min_size=8, max_size=8),
    rank=st.integers(min_value=0, max_value=7),
    factor=st.sampled_from([1.0, 1.02, 1.3, 1.6, 2.5]),
)
def test_trend_fails_on_every_finding_compare_fails_on(
    nights: int, jitters: list[float], rank: int, factor: float
) -> None:
    compare_settings, trend_settings = load_settings()
    stable = [_night(day + 1, jitters[day]) for day in range(nights)]
    candidate = _night(nights + 1, jitters[nights], rank, factor)
    failing = compare(stable[-1], candidate, compare_settings).failing
    series = [run_series(f"night{i}.json", doc) for i, doc in enumerate([*stable, candidate])]
    found = trend_of_runs(series, trend_settings, compare_settings)
    judged = {j.metric for j in found.latest_regressions}
    for finding in failing:
        assert f"{finding.metric} of {finding.subject}" in judged or finding.metric in judged
    if factor == 1.0:
        assert failing == []
    if failing:
        assert "regression" in found.verdict


def test_a_job_change_splits_the_series() -> None:
    """Three nights of job `nightly`, then one of job `other` (as run.json names them): a change point `job`
    before it, and the latest run, alone in its job, is not judged against another job's nights."""
    compare_settings, trend_settings = load_settings()
    nights = [_night(day, 1.0) for day in range(1, 5)]
    series = [
        replace(run_series(f"n{i}.json", doc), job="other" if i == 3 else "nightly", document=None)
        for i, doc in enumerate(nights)
    ]
    found = trend_of_runs(series, trend_settings, compare_settings)
    jobs = [c for c in found.changes if c.metric == "job"]
    assert [c.index for c in jobs] == [3]
    assert jobs[0].label == "job changed: job nightly -> other"
    assert "starts another job" in found.verdict
    assert found.latest_regressions == []


@pytest.mark.parametrize(
    ("baseline", "candidate", "expected"),
    [(10.0, 16.0, (16 - 10) / 10), (0.0, 5.0, None), (1e-9, 5.0, None), (None, 5.0, None)],
)
def test_no_percentage_of_a_zero_baseline(
    baseline: float | None, candidate: float, expected: float | None
) -> None:
    assert relative_change(baseline, candidate) == expected
