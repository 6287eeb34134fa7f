"""The critical path's attribution on every real trace folder and every sample (docs/metrics.md, "Critical
path"): per (rank, step) the categories add up to the step within a microsecond; the host-side categories add
up to at least the budget's idle (no device node runs while the device idles; the path gives that time to the
host or to nothing recorded); every holder lies inside the rank's windows; `other` holds at most 5% of the
median step, or the reason is named.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import traceview
from tests.shared_data import REAL_KINETO, real_dirs
from traceview.critical_path.categories import CATEGORY_COLUMNS, IDLE_CATEGORIES
from traceview.reduce.analysis import RunAnalysis
from traceview.steps.windows import WHOLE_TRACE

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
FOLDERS = [*real_dirs(REAL_KINETO), *real_dirs(SAMPLES)]
OTHER_SHARE_MAX = 0.05
IDLE_COLUMNS = [f"{category}_us" for category in IDLE_CATEGORIES]


@pytest.fixture(scope="module", params=FOLDERS, ids=[folder.name for folder in FOLDERS])
def analysed(request: pytest.FixtureRequest) -> RunAnalysis:
    return traceview.analyze(request.param).raw


def test_categories_sum_to_the_step(analysed: RunAnalysis) -> None:
    path = analysed.critical_path
    assert path is not None
    rows = path.per_step
    assert rows.height == analysed.budget.per_step.height
    if rows.height == 0:
        return
    error = rows.select((pl.sum_horizontal(CATEGORY_COLUMNS) - pl.col("step_us")).abs().max()).item()
    assert error <= 1.0
    assert rows.select(pl.min_horizontal(CATEGORY_COLUMNS).min()).item() >= 0.0


def test_host_side_holds_at_least_the_idle(analysed: RunAnalysis) -> None:
    path = analysed.critical_path
    assert path is not None
    joined = path.per_step.join(
        analysed.budget.per_step.select("rank", "step", "idle_us"), on=["rank", "step"]
    )
    assert joined.height == path.per_step.height
    if joined.height:
        shortfall = joined.select((pl.col("idle_us") - pl.sum_horizontal(IDLE_COLUMNS)).max()).item()
        assert shortfall <= 1.0


def test_holders_inside_the_windows(analysed: RunAnalysis) -> None:
    path = analysed.critical_path
    assert path is not None
    rows = path.per_step
    totals = rows.group_by("rank").agg(pl.col("step_us").sum().alias("total_us"), pl.col("step").alias("all"))
    held = (
        path.holders.with_columns((pl.col("us_per_step") * pl.col("steps")).alias("at_least_us"))
        .join(totals, on="rank", how="left")
        .with_columns(pl.col("all").list.contains(pl.col("longest_step")).alias("known_step"))
    )
    assert held.filter(pl.col("total_us").is_null()).height == 0
    assert held.filter(pl.col("at_least_us") > pl.col("total_us") + 1.0).height == 0
    assert held.get_column("known_step").all()
    assert (held.group_by("rank").len().get_column("len").max() or 0) <= 9


def test_other_is_small_or_named(analysed: RunAnalysis) -> None:
    """`other` (the launching threads record nothing while the device idles) stays under 5% of the median
    step; the named exception: a trace without step annotations, analysed as one window over the whole trace
    (step -1), where no `ProfilerStep` annotation covers the Python between operators."""
    path = analysed.critical_path
    assert path is not None
    share = path.run_share("other") or 0.0
    whole_trace = path.per_step.height > 0 and path.per_step.get_column("step").eq(WHOLE_TRACE).all()
    assert share <= OTHER_SHARE_MAX or whole_trace
