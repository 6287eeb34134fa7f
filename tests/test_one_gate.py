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

from traceview.compare.series import run_series
from traceview.compare.settings import load_settings
from traceview.compare.stats import relative_change
from traceview.compare.trend import trend_of_runs
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


def _without_stragglers(document: dict[str, Any]) -> dict[str, Any]:
    """`document` as if the across-ranks analysis had named no straggler."""
    document["across_ranks"]["stragglers"] = []
    for row in document["across_ranks"]["per_rank"]:
        row["straggler"] = False
    return document


def _judged_from_history(nights: list[dict[str, Any]], tmp_path: Path) -> list[Any]:
    """The latest run's regressions when the series is read back from a `--history` file alone (no summary
    documents: `compare` cannot run on the pair, so what trend finds it read itself)."""
    from traceview.compare.history import read_history, runs_of, update_history

    compare_settings, trend_settings = load_settings()
    tmp_path.mkdir(exist_ok=True)
    history = tmp_path / "history.parquet"
    update_history(history, [run_series(f"night{i}.json", doc) for i, doc in enumerate(nights)])
    runs = runs_of(read_history(history))
    assert all(run.document is None for run in runs)
    return trend_of_runs(runs, trend_settings, compare_settings).latest_regressions


def test_trend_reads_a_new_straggler_and_its_cost_itself(tmp_path: Path) -> None:
    """Five nights naming no straggler, then the sample as it is (rank 5 a straggler): trend names rank 5 with
    the cost per step the summary states, from the summaries and from a history alone, once."""
    stable = [_without_stragglers(_night(day, 1.0)) for day in range(1, 6)]
    candidate = _night(6, 1.0)
    cost = next(r for r in candidate["across_ranks"]["per_rank"] if r["rank"] == 5)["lateness_cost_us"]
    compare_settings, trend_settings = load_settings()
    series = [run_series(f"night{i}.json", doc) for i, doc in enumerate([*stable, candidate])]
    judged = trend_of_runs(series, trend_settings, compare_settings).latest_regressions
    named = [j for j in judged if j.metric == "lateness_cost_us of rank 5"]
    assert len(named) == 1  # read directly, not again through the compare pass
    assert (named[0].history, named[0].latest, named[0].change_pct) == (0.0, cost, None)  # new: no percent
    alone = [
        j for j in _judged_from_history([*stable, candidate], tmp_path) if j.metric.startswith("lateness")
    ]
    assert [(j.metric, j.latest) for j in alone] == [("lateness_cost_us of rank 5", cost)]
    calm = _judged_from_history([*stable, _without_stragglers(_night(6, 1.0))], tmp_path / "calm")
    assert calm == []


def test_trend_follows_the_arrival_skew(tmp_path: Path) -> None:
    """The candidate's arrival skew 1.5x every instance's (beyond compare's 20% for skew_us): trend judges
    `skew_us` a regression from a history alone, at (1.5 - 1) = +50%."""
    stable = [_night(day, 1.0) for day in range(1, 6)]
    candidate = _night(6, 1.0)
    for row in candidate["across_ranks"]["instances"]:
        row["skew_us"] *= 1.5
    judged = {j.metric: j for j in _judged_from_history([*stable, candidate], tmp_path)}
    assert judged["skew_us"].change_pct == pytest.approx((1.5 - 1) * 100)
    assert "skew_us" in {f.metric for f in compare(stable[-1], candidate, load_settings()[0]).failing}
