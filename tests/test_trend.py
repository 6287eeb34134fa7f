"""Trend over seven simulated nightly runs (2% compute jitter, a seed per night) with a planted step change at
the fifth: compute 30% slower from then on."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tests.simulate.engine import write_run
from tests.simulate.scenario import data_parallel_scenario
from tests.test_compare_planted import summary
from traceview.compare.settings import load_settings
from traceview.compare.trend import trend

NIGHTS, CHANGE_AT = 7, 4  # 0-based: nights 4, 5, 6 are slower


@pytest.fixture(scope="module")
def series(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("nights")
    paths = []
    for night in range(NIGHTS):
        scenario = data_parallel_scenario(4, 100_000_000, 2_000, 150e12, 25e9, steps=6, ranks_per_host=4)
        slower = 1.3 if night >= CHANGE_AT else 1.0
        scenario = replace(scenario, jitter=0.02, seed=night, compute_us=scenario.compute_us * slower)
        write_run(scenario, root / f"run-{night}")
        path = root / f"night-{night}.json"
        path.write_text(json.dumps(summary(root / f"run-{night}")), encoding="utf-8")
        paths.append(path)
    return paths


def test_change_point_at_the_planted_night(series: list[Path]) -> None:
    _, settings = load_settings()
    found = trend([(p.name, json.loads(p.read_text())) for p in series], settings)
    assert {c.run for c in found.changes} == {
        f"night-{CHANGE_AT}.json"
    }  # every metric moves there, only there
    comp = [c for c in found.changes if c.metric == "comp_us"]
    assert len(comp) == 1
    assert comp[0].before is not None
    assert comp[0].after == pytest.approx(comp[0].before * 1.3, rel=0.02)  # 2% jitter
    assert comp[0].change_pct is not None
    assert comp[0].change_pct > settings.threshold_pct
    # the latest night is judged against the history since that change: no regression
    assert found.latest_regressions == []


def test_latest_regression_is_exit_1(series: list[Path]) -> None:
    from tests.test_cli import traceview

    upto_change = series[: CHANGE_AT + 1]  # the last one is the first slow night
    result = traceview("trend", *map(str, upto_change), "--json")
    assert result.returncode == 1, result.stderr
    document = json.loads(result.stdout)
    assert {c["run"] for c in document["changes"]} == {f"night-{CHANGE_AT}.json"}
    assert any(j["metric"] == "comp_us" and j["outcome"] == "regression" for j in document["latest"])
    calm = traceview("trend", *map(str, series[:CHANGE_AT]))
    assert calm.returncode == 0, calm.stdout


def test_ordered_by_recorded_run_time(series: list[Path], tmp_path: Path) -> None:
    """Nights recorded a day apart (each summary's time base), given shuffled: ordered by run time, and the
    change is still found at the planted night."""
    from tests.test_cli import traceview

    day_ns = 86_400 * 10**9
    dated = []
    for night, path in enumerate(series):
        document = json.loads(path.read_text())
        document["run"]["base_times_ns"] = [1_700_000_000 * 10**9 + night * day_ns] * len(
            document["run"]["ranks"]
        )
        for key in ("recorded_at", "recorded_at_source"):  # as a summary before 1.6: its time base alone
            document["run"].pop(key, None)
        copy = tmp_path / path.name
        copy.write_text(json.dumps(document), encoding="utf-8")
        dated.append(copy)
    shuffled = [dated[i] for i in (3, 6, 0, 5, 1, 4, 2)]
    result = traceview("trend", *map(str, shuffled), "--json")
    document = json.loads(result.stdout)
    assert document["ordered_by"] == "run time"
    assert document["runs"] == [f"night-{night}.json" for night in range(NIGHTS)]
    assert {c["run"] for c in document["changes"]} == {f"night-{CHANGE_AT}.json"}
    for change in document["changes"]:
        assert {"metric", "run", "before", "after", "change_pct"} <= set(change)
    assert result.returncode == 0  # the latest night is judged against the slow nights since the change
    as_given = traceview("trend", *map(str, [series[i] for i in (3, 6, 0, 5, 1, 4, 2)]), "--json")
    assert json.loads(as_given.stdout)["ordered_by"] == "as given"  # one time base for every night
