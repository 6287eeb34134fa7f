"""A series of nightly summaries: chosen metrics over the runs, change points, and the latest run judged
against the history (docs/metrics.md, "Compare and trend").

Order: by each run's recorded start (`run.recorded_at`, schema 1.6: the traces' time base and first step, else
run.json's `created`; in older summaries the time base, `run.base_times_ns`, plus the first step window, as
`traceview.model.time_base.recorded_start_us`); a summary without one is placed by its file's modification
time, with a warning; equal times keep the order given. Each run is labelled by its date and its commit, else
its job, else its file name (`run.label`, from `--label`, replaces the commit). Values: each run's median over
its (rank, step) samples; `skew_us`, over its matched collective instances (the samples `compare` tests).

Change points, by binary segmentation: in a segment of runs, the split (leaving at least `min_segment` runs
on each side) that minimises the summed squared deviations of the run values from each side's mean is a
change point when the Mann-Whitney p of the pooled step samples before against after, times the number of
splits scanned (Bonferroni), is below alpha and the median of the run values after differs from the one
before by more than the threshold (a time: also by `min_step_share` of the median step); both sides are then
searched again. The latest run is judged against the history since the last change point
before it: Mann-Whitney of its samples against the history's pooled samples, Holm-adjusted over the metrics;
a regression is a significant change beyond the threshold the worse way (every trend metric is worse higher;
a metric's own threshold, `compare.metric_threshold_pct`, where one is set: `skew_us` 20%). A rank the latest
run names a straggler and the run before it did not is a regression with its cost per step, whatever the
threshold: the stragglers and the rule are `compare`'s (`traceview.compare.crossrank_findings`,
`traceview.compare.new_problems.straggler_findings`), read from the runs themselves (a history keeps them).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import polars as pl

from traceview.compare.findings import CompareSettings, TrendSettings
from traceview.compare.new_problems import straggler_findings
from traceview.compare.prediction_method import method_changes
from traceview.compare.same_job import job_differences
from traceview.compare.series import RunSeries, kernel_metrics, metric_samples, run_series, run_value
from traceview.compare.stats import holm, mann_whitney, relative_change
from traceview.compare.two_runs import compare
from traceview.core.records import record


@record
class ChangePoint:
    """A change in `metric` at run `index` (the first run after the change)."""

    metric: str
    index: int
    run: str
    before: float | None
    after: float | None
    change_pct: float | None
    p_value: float
    label: str = ""  # the run as shown (`RunSeries.shown`)


@record
class LatestJudgement:
    """The latest run's value of a metric against the history since the last change point."""

    metric: str
    history_runs: int
    history: float | None
    latest: float | None
    change_pct: float | None
    p_adjusted: float | None
    outcome: str  # regression | improvement | not significant | unchanged | not judged


@record
class Trend:
    """The series, its change points and the judgement of the latest run; `warnings`: runs placed by their
    file's time."""

    runs: list[RunSeries]
    ordered_by: str  # run time | run time and file time | as given
    values: pl.DataFrame  # run, index, metric, value
    changes: list[ChangePoint]
    latest: list[LatestJudgement]
    verdict: str
    warnings: tuple[str, ...] = ()

    @property
    def latest_regressions(self) -> list[LatestJudgement]:
        """The metrics whose latest run is a significant regression against the history."""
        return [j for j in self.latest if j.outcome == "regression"]


def _ordered(runs: Sequence[RunSeries]) -> tuple[list[RunSeries], str, tuple[str, ...]]:
    """The runs by recorded start (stable: equal or unknown starts keep the order given), how they were
    ordered, and a warning for each run placed by its file's time."""
    by_file = [r for r in runs if r.time_source == "file time"]
    warnings = tuple(
        f"{r.name}: no recorded run time (no trace time base, no run.json `created`): placed by its file's "
        f"modification time, {r.date} UTC"
        for r in by_file
    )
    starts = {r.started_us for r in runs}
    if None in starts or (len(starts) == 1 and len(runs) > 1):  # unknown, or one time for every run
        return list(runs), "as given", warnings
    ordered = sorted(runs, key=lambda r: r.started_us or 0.0)
    return ordered, "run time and file time" if by_file else "run time", warnings


def _samples(runs: Sequence[RunSeries], metric: str) -> list[float]:
    columns = [metric_samples(r, metric) for r in runs]
    return [v for column in columns if column is not None for v in column.drop_nulls()]


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    found = pl.Series(known, dtype=pl.Float64).median() if known else None
    return None if found is None else float(found)  # type: ignore[arg-type]


def _material(
    metric: str, before: float | None, after: float | None, step_us: float | None, settings: TrendSettings
) -> bool:
    """Whether a change of a time is at least `min_step_share` of the median step (other metrics: always)."""
    if not metric.endswith("_us") or before is None or after is None or not step_us:
        return True
    return abs(after - before) >= settings.min_step_share * step_us


def _step_reference(runs: Sequence[RunSeries]) -> float | None:
    return _median([run_value(r, "step_us") for r in runs])


def _sse(values: Sequence[float | None]) -> float:
    """Sum of squared deviations from the mean of the known values."""
    known = [v for v in values if v is not None]
    mean = sum(known) / len(known) if known else 0.0
    return sum((v - mean) ** 2 for v in known)


def _best_split(
    runs: Sequence[RunSeries], metric: str, lo: int, hi: int, settings: TrendSettings
) -> ChangePoint | None:
    """The least-squares split of the run values in [lo, hi), kept when significant and large enough."""
    values = [run_value(r, metric) for r in runs]
    splits = list(range(lo + settings.min_segment, hi - settings.min_segment + 1))
    if not splits:
        return None
    k = min(splits, key=lambda split: (_sse(values[lo:split]) + _sse(values[split:hi]), split))
    test = mann_whitney(_samples(runs[lo:k], metric), _samples(runs[k:hi], metric))
    before, after = _median(values[lo:k]), _median(values[k:hi])
    change = relative_change(before, after)
    if test.p_value is None or change is None:
        return None
    p_value = min(1.0, test.p_value * len(splits))
    if p_value >= settings.alpha or abs(change) * 100 <= settings.threshold_for(metric):
        return None
    if not _material(metric, before, after, _step_reference(runs[lo:hi]), settings):
        return None
    return ChangePoint(metric, k, runs[k].name, before, after, change * 100, p_value, runs[k].shown)


def change_points(runs: Sequence[RunSeries], metric: str, settings: TrendSettings) -> list[ChangePoint]:
    """The change points of `metric` by binary segmentation (see the module docstring), in run order."""
    found, pending = [], [(0, len(runs))]
    while pending:
        lo, hi = pending.pop()
        point = _best_split(runs, metric, lo, hi, settings)
        if point is not None:
            found.append(point)
            pending += [(lo, point.index), (point.index, hi)]
    return sorted(found, key=lambda c: c.index)


def _judge_latest(
    runs: Sequence[RunSeries], changes: Sequence[ChangePoint], settings: TrendSettings, metrics: Sequence[str]
) -> list[LatestJudgement]:
    last = len(runs) - 1
    rows = []
    for metric in metrics:
        starts = [c.index for c in changes if c.metric == metric and c.index < last]
        history = runs[max(starts, default=0) : last]
        test = mann_whitney(_samples(history, metric), _samples(runs[last:], metric))
        before = _median([run_value(r, metric) for r in history])
        latest = run_value(runs[last], metric)
        change = relative_change(before, latest)
        if not _material(metric, before, latest, _step_reference(history), settings):
            change = 0.0 if change is not None else None  # too small a time to matter: unchanged
        rows.append(
            (metric, len(history), before, latest, relative_change(before, latest), change, test.p_value)
        )
    adjusted = holm([row[6] for row in rows])
    return [
        LatestJudgement(
            metric,
            n,
            before,
            latest,
            None if change is None else change * 100,
            p,
            _outcome(metric, n, judged, p, settings),
        )
        for (metric, n, before, latest, change, judged, _), p in zip(rows, adjusted, strict=True)
    ]


def _outcome(
    metric: str, history_runs: int, change: float | None, p: float | None, settings: TrendSettings
) -> str:
    if history_runs == 0 or change is None or p is None:
        return "not judged"
    if abs(change) * 100 <= settings.threshold_for(metric):
        return "unchanged"
    if p >= settings.alpha:
        return "not significant"
    return "regression" if change > 0 else "improvement"


VALUE_SCHEMA = {
    "run": pl.Utf8,
    "index": pl.Int64,
    "metric": pl.Utf8,
    "value": pl.Float64,
    "label": pl.Utf8,
    "started_us": pl.Float64,
}
"""`Trend.values`: each run's value of each metric, with the run as shown and its start."""


def trend(named_documents: Sequence[tuple[str, Mapping[str, Any]]], settings: TrendSettings) -> Trend:
    """The trend of a series of summary documents (file name, document)."""
    return trend_of_runs([run_series(name, doc) for name, doc in named_documents], settings)


def trend_of_runs(
    series: Sequence[RunSeries], settings: TrendSettings, compare_settings: CompareSettings | None = None
) -> Trend:
    """The trend of a series of runs (module docstring), ordered by their recorded start: split where the
    job changes (`job_changes`), change points and the latest run's judgement within one job; with
    `compare_settings`, the latest run is also compared with the run before it (`with_compared`)."""
    runs, ordered_by, warnings = _ordered(series)
    metrics = [*settings.metrics, *kernel_metrics(runs)]
    jobs = job_changes(runs)
    starts = [0, *(c.index for c in jobs), len(runs)]
    changes = sorted(
        (
            replace(
                c, index=c.index + start, run=runs[c.index + start].name, label=runs[c.index + start].shown
            )
            for start, end in itertools.pairwise(starts)
            for metric in metrics
            for c in change_points(runs[start:end], metric, settings)
        ),
        key=lambda c: (c.index, c.metric),
    )
    last_job = runs[starts[-2] :] if runs else []
    values = pl.DataFrame(
        [
            {"run": r.name, "index": i, "metric": m, "value": run_value(r, m), "label": r.shown}
            | {"started_us": r.started_us}
            for m in metrics
            for i, r in enumerate(runs)
        ],
        schema=VALUE_SCHEMA,
    )
    within = [replace(c, index=c.index - starts[-2]) for c in changes if c.index >= starts[-2]]
    latest = _judge_latest(last_job, within, settings, metrics) if len(last_job) > 1 else []
    latest += new_stragglers(last_job)
    latest = with_compared(latest, last_job, compare_settings)
    methods = [
        ChangePoint("gamma_ratio", i, runs[i].name, None, None, None, 0.0, label)
        for i, label in method_changes([r.document for r in runs])
    ]
    changes = sorted([*changes, *jobs, *methods], key=lambda c: (c.index, c.metric))
    return Trend(runs, ordered_by, values, changes, latest, _verdict(runs, changes, latest), warnings)


def _job_change(before: RunSeries, after: RunSeries) -> list[str]:
    """What makes `after` another job than `before`: the facts `compare` refuses on (both summaries read),
    else the jobs run.json names."""
    if before.document is not None and after.document is not None:
        return job_differences(before.document, after.document)
    if before.job and after.job and before.job != after.job:
        return [f"job {before.job} -> {after.job}"]
    return []


def job_changes(runs: Sequence[RunSeries]) -> list[ChangePoint]:
    """A change point `job` (label `job changed: what differs`) before each run of another job than the one
    before it: the series is judged within one job, as `compare` refuses two."""
    found = []
    for index in range(1, len(runs)):
        differs = _job_change(runs[index - 1], runs[index])
        if differs:
            label = f"job changed: {'; '.join(differs)}"
            found.append(ChangePoint("job", index, runs[index].name, None, None, None, 0.0, label))
    return found


def new_stragglers(runs: Sequence[RunSeries]) -> list[LatestJudgement]:
    """A regression for each rank the latest run names a straggler and the run before it did not, with its
    cost per step: `compare`'s rule on the same findings (`straggler_findings`), read from the runs (a run
    read back from a history keeps them); none when either run cannot say who is late."""
    if len(runs) < 2 or runs[-2].stragglers is None or runs[-1].stragglers is None:
        return []
    return [
        LatestJudgement(
            f"{f.metric} of {f.subject}", 1, f.baseline, f.candidate, f.change_pct, None, "regression"
        )
        for f in straggler_findings(runs[-2].stragglers, runs[-1].stragglers)
    ]


def with_compared(
    latest: list[LatestJudgement], runs: Sequence[RunSeries], settings: CompareSettings | None
) -> list[LatestJudgement]:
    """`latest` and, for each finding `compare` fails on between the run before the latest and the latest
    that `latest` does not already judge a regression (collectives, kernels, ranks, a skew beyond compare's
    threshold), a regression judged on that pair: one gate, one answer. Needs both summaries (a run read
    back from a history file has none)."""
    if settings is None or len(runs) < 2 or runs[-2].document is None or runs[-1].document is None:
        return latest
    comparison = compare(runs[-2].document, runs[-1].document, settings)
    judged = {j.metric for j in latest if j.outcome == "regression"}
    return [
        *latest,
        *(
            LatestJudgement(
                f"{f.metric} of {f.subject}",
                1,
                f.baseline,
                f.candidate,
                f.change_pct,
                f.p_adjusted,
                "regression",
            )
            for f in comparison.failing
            if f"{f.metric} of {f.subject}" not in judged and not (f.subject == "run" and f.metric in judged)
        ),
    ]


def _change_text(judgement: LatestJudgement) -> str:
    """`+60%` where the history has a value to divide by; else `new (12.3 ms)`: no division by zero."""
    if judgement.change_pct is not None:
        return f"{judgement.change_pct:+.0f}%"
    size = judgement.latest
    shown = (
        "" if size is None else f" ({size / 1e3:.3g} ms)" if "_us" in judgement.metric else f" ({size:.3g})"
    )
    return f"new{shown}"


def _verdict(
    runs: Sequence[RunSeries], changes: Sequence[ChangePoint], latest: Sequence[LatestJudgement]
) -> str:
    worse = [j for j in latest if j.outcome == "regression"]
    if worse:
        listed = "; ".join(f"{j.metric} {_change_text(j)}" for j in worse)
        return f"The latest run ({runs[-1].shown}) is a regression against the history: {listed}."
    moved = f"; {len(changes)} change point(s) in the series" if changes else ""
    if not runs:
        return "No runs."
    new_job = [c for c in changes if c.metric == "job" and c.index == len(runs) - 1]
    if new_job:
        return f"The latest run ({runs[-1].shown}) starts another job ({new_job[0].label}): not judged."
    return f"The latest run ({runs[-1].shown}) is within the history's spread{moved}."
