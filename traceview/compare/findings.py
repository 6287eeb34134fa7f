"""The settings and the findings of `traceview compare` (docs/metrics.md, "Compare and trend"): one finding
per tested (family, metric, subject), whatever test produced it (`traceview.compare.two_runs`,
`traceview.compare.paired`)."""

from __future__ import annotations

from typing import Any

from traceview.budget.time_budget import MEDIAN_COLUMNS, TRANSFER_COLUMNS
from traceview.compare.samples import CAUSE_FAMILIES
from traceview.compare.stats import TestResult
from traceview.core.records import record


@record
class CompareSettings:
    """The thresholds of `traceview compare` (defaults: `traceview/compare/thresholds.toml`)."""

    threshold_pct: float = 5.0
    alpha: float = 0.05
    min_step_share: float = 0.01
    min_samples: int = 3
    metric_threshold_pct: tuple[tuple[str, float], ...] = ()

    def threshold_for(self, metric: str) -> float:
        """The relative threshold (percent) that applies to `metric`."""
        return dict(self.metric_threshold_pct).get(metric, self.threshold_pct)


TREND_METRICS: tuple[str, ...] = (*MEDIAN_COLUMNS, *TRANSFER_COLUMNS)
"""The per-step figures a trend may follow: the time budget's (docs/metrics.md, section 4)."""
TREND_FOLLOWED: tuple[str, ...] = (*TREND_METRICS, "skew_us")
"""Every figure a trend may follow: the per-step figures and the arrival skew per matched instance."""


@record
class TrendSettings:
    """The thresholds of `traceview trend`."""

    threshold_pct: float = 5.0
    alpha: float = 0.05
    metrics: tuple[str, ...] = (
        "step_us",
        "comp_us",
        "exposed_comm_us",
        "idle_us",
        "gamma",
        "exposed_gamma",
        "skew_us",
    )
    min_segment: int = 1
    min_step_share: float = 0.01
    metric_threshold_pct: tuple[tuple[str, float], ...] = ()
    """A metric's own threshold (percent), as `compare`'s table sets it (`skew_us` 20)."""

    def threshold_for(self, metric: str) -> float:
        """The relative threshold (percent) that applies to `metric`."""
        return dict(self.metric_threshold_pct).get(metric, self.threshold_pct)


@record
class Finding:
    """One tested (family, metric, subject): medians (p90 for `statistic` p90), the change and the test."""

    family: str
    metric: str
    subject: str
    statistic: str
    worse: str
    baseline: float | None
    candidate: float | None
    change_pct: float | None
    test: TestResult
    p_adjusted: float | None = None
    outcome: str = (
        "unchanged"  # regression | improvement | not significant | unchanged | not judged | explained
    )
    partial: bool = False
    fields: tuple[tuple[str, Any], ...] = ()
    likely_cause: str | None = None  # for a run-level change: the cause finding that best explains it
    beyond_peers_pct: float | None = None  # a rank: its change beyond its peers', which must pass too
    explained_by: str | None = None  # a kernel class whose change is that of these ranks only

    @property
    def is_cause(self) -> bool:
        """Whether the subject names a cause (a collective, a kernel class, a rank)."""
        return self.family in CAUSE_FAMILIES
