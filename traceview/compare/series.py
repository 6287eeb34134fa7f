"""One run of a trend's series (docs/metrics.md, "Compare and trend"): who it is, when it was recorded, its
per-step samples, its compute kernels, and the cross-rank findings `compare` reads too (its stragglers with
their cost, its arrival skew: `traceview.compare.crossrank_findings`), read from a saved summary or a history.

The recorded start: `run.recorded_at` (schema 1.6: the traces' time base and first step, else run.json's
`created`); in older summaries the time base, `run.base_times_ns`, plus the first step window, as
`traceview.model.time_base.recorded_start_us`; else (`run_series`'s `file_time_us`) the file's time.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Any

import polars as pl

from traceview.compare.crossrank_findings import Straggler, named_stragglers, skew_values
from traceview.compare.kernel_pairs import kernel_means
from traceview.core.records import record
from traceview.model.time_base import recorded_start_us


@record
class RunSeries:
    """One run of the series: its file name, recorded start (us since the epoch, None if unknown) and step
    samples; where the start came from (`trace base time`, `run.json created`, `file time`), who the run is
    (source, commit, job, label), and its compute kernels' mean durations per (rank, key)
    (`traceview.compare.kernel_pairs`), its arrival skews and named stragglers."""

    name: str
    started_us: float | None
    per_step: pl.DataFrame
    time_source: str | None = None
    source: str = ""
    commit: str | None = None
    job: str | None = None
    label: str | None = None
    kernels: pl.DataFrame = field(default_factory=pl.DataFrame)
    skew_us: tuple[float, ...] = ()
    """The arrival skew of every matched collective instance (`crossrank_findings.skew_values`)."""
    stragglers: tuple[Straggler, ...] | None = None
    """The stragglers the run names with their cost; None when unknown (no across-ranks analysis)."""
    document: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)
    """The summary itself when the run was read from one (not from a history file): what `compare` reads."""

    @property
    def date(self) -> str | None:
        """The recorded start as `2026-11-20 02:00` (UTC), None when unknown."""
        if self.started_us is None:
            return None
        return dt.datetime.fromtimestamp(self.started_us / 1e6, tz=dt.UTC).strftime("%Y-%m-%d %H:%M")

    @property
    def shown(self) -> str:
        """How the run is named in the tables and the plots: its date and its label, commit, job or name."""
        who = self.label or (self.commit[:12] if self.commit else None) or self.job or self.name
        return f"{self.date} {who}" if self.date else who


def _stated_start(run: Mapping[str, Any]) -> tuple[float | None, str | None]:
    """`run.recorded_at` (schema 1.6) as microseconds since the epoch, with its source."""
    stated = run.get("recorded_at")
    if not isinstance(stated, str):
        return None, None
    try:
        moment = dt.datetime.fromisoformat(stated.replace("Z", "+00:00"))
    except ValueError:
        return None, None
    moment = moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)
    return moment.timestamp() * 1e6, str(run.get("recorded_at_source") or "run.json created")


def recorded_start(document: Mapping[str, Any], per_step: pl.DataFrame) -> tuple[float | None, str | None]:
    """The run's recorded start (us since the epoch) and where it came from (module docstring)."""
    run = document.get("run") or {}
    started, source = _stated_start(run)
    if started is not None:
        return started, source
    if "window_start_us" not in per_step.columns or per_step.height == 0:
        return None, None
    first = per_step.get_column("window_start_us").min()
    found = recorded_start_us(run.get("base_times_ns") or (), first)  # type: ignore[arg-type]
    return found, None if found is None else "trace base time"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def run_series(name: str, document: Mapping[str, Any], file_time_us: float | None = None) -> RunSeries:
    """A summary document as one run of a series; `file_time_us` places a run without a recorded start."""
    rows = (document.get("time_budget") or {}).get("per_step") or []
    frame = pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()
    started, source = recorded_start(document, frame)
    if started is None and file_time_us is not None:
        started, source = file_time_us, "file time"
    run = document.get("run") or {}
    return RunSeries(
        name,
        started,
        frame,
        source,
        str(run.get("source") or name),
        _text(run.get("commit")),
        _text(run.get("job")),
        _text(run.get("label")),
        kernel_means(document),
        skew_values(document),
        named_stragglers(document),
        document,
    )


KERNEL_METRIC = "kernel:"
"""A trend metric `kernel:<key>`: the mean duration of that compute kernel, one sample per rank."""
SKEW_METRIC = "skew_us"
"""The trend metric of arrival skew: one sample per matched collective instance (`RunSeries.skew_us`)."""
TREND_KERNELS = 5
"""Kernels followed: the latest run's keys of largest total time that an earlier run also lists."""


def kernel_metrics(runs: Sequence[RunSeries]) -> list[str]:
    """The `kernel:<key>` metrics of the series (`TREND_KERNELS`)."""
    if len(runs) < 2 or runs[-1].kernels.height == 0:
        return []
    earlier = {key for r in runs[:-1] if r.kernels.height for key in r.kernels.get_column("key").to_list()}
    totals = (
        runs[-1]
        .kernels.group_by("key")
        .agg(pl.col("total_us").sum())
        .sort(["total_us", "key"], descending=[True, False])
    )
    keys = [key for key in totals.get_column("key").to_list() if key in earlier]
    return [f"{KERNEL_METRIC}{key}" for key in keys[:TREND_KERNELS]]


def metric_samples(run: RunSeries, metric: str) -> pl.Series | None:
    """A metric's samples in one run: a per-step column, the skew per matched instance, or a kernel's mean
    duration per rank."""
    if metric == SKEW_METRIC:
        return pl.Series(metric, run.skew_us, dtype=pl.Float64) if run.skew_us else None
    if metric.startswith(KERNEL_METRIC):
        if run.kernels.height == 0:
            return None
        return run.kernels.filter(pl.col("key") == metric.removeprefix(KERNEL_METRIC)).get_column("mean_us")
    return run.per_step.get_column(metric) if metric in run.per_step.columns else None


def run_value(run: RunSeries, metric: str) -> float | None:
    """The run's value of `metric`: the median of its samples (None: it has none)."""
    column = metric_samples(run, metric)
    found = None if column is None else column.median()
    return None if found is None else float(found)  # type: ignore[arg-type]
