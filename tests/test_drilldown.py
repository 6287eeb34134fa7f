"""The drill-down's figures (docs/metrics.md, "Report"), computed by the analyses and checked here by plain
Python over the rows they come from."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import traceview

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def test_drilldown_figures_by_hand() -> None:
    analysis = traceview.analyze(SAMPLES / "dp8_straggler", workers=1).raw
    found = analysis.drilldown
    assert found is not None
    assert analysis.crossrank is not None
    assert analysis.collectives is not None
    waits: dict[tuple[int, int], float] = defaultdict(float)
    for row in analysis.crossrank.calls.iter_rows(named=True):
        waits[row["rank"], row["step"]] += row["wait_us"]
    for row in found.step_waits.iter_rows(named=True):
        assert abs(row["wait_us"] - waits.get((row["rank"], row["step"]), 0.0)) < 1e-6
    by_step: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for row in analysis.budget.per_step.iter_rows(named=True):
        by_step[row["step"]].append((row["step_us"], row["rank"]))
    medians = {step: sorted(rows)[(len(rows) - 1) // 2][1] for step, rows in by_step.items()}
    assert dict(found.median_ranks.iter_rows()) == medians
    total = sum(analysis.collectives.per_collective.get_column("total_us").to_list())
    assert abs(sum(found.by_cost.get_column("total_us").to_list()) - total) < 1e-3
    per_row = found.costly_instances.group_by("pg_key", "collective", "size_bucket").len()
    assert max(per_row.get_column("len").to_list()) <= 10
    assert found.costly_instances.get_column("last_rank").drop_nulls().unique().to_list() == [5]


def test_every_outlier_is_beyond_the_fences_by_hand() -> None:
    budget = traceview.analyze(SAMPLES / "dp8_straggler", workers=1).raw.budget
    steps = sorted(budget.per_rank.get_column("comp_us").to_list())
    assert len(steps) == 8
    rows = budget.outliers.filter(budget.outliers["figure"] == "comp_us").rows()
    # rank 5 computes ~11 ms more a step than the 7 others, whose medians are within tens of us of each other
    assert [ranks for _, _, ranks in rows] == [[5]]
