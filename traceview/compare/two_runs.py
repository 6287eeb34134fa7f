"""Two runs compared, noise-aware (docs/metrics.md, "Compare and trend"; docs/compare.md).

Input: two JSON summary documents (`traceview summary --json`, or built from a run). Every (family, metric,
subject) both have samples for is tested (`traceview.compare.stats.mann_whitney`), and the work both runs did
on the same rank is paired (`traceview.compare.paired`: collectives per process group, ranks); within each
family the p-values are Holm-adjusted. A change is a regression when it goes the worse way, its size passes
the relative threshold (and, for a time, `min_step_share` of the baseline's median step), and the adjusted
p-value is below alpha. A subject only one run has is a structure change, listed, never a regression; when a
run was read only in part (skipped files, unlinked kernels, mismatched collectives) its findings are marked
`partial` and do not fail the comparison.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field, replace
from typing import Any

import polars as pl

from traceview.compare.findings import CompareSettings, Finding
from traceview.compare.new_problems import new_problems
from traceview.compare.paired import explained_by_ranks, paired_findings
from traceview.compare.same_job import job_differences
from traceview.compare.samples import DIMENSION_METRICS, RUN_METRICS, Samples, all_samples
from traceview.compare.scaling import Scaling, scaling_analysis
from traceview.compare.stats import holm, mann_whitney, relative_change
from traceview.compare.structure import Structure, structure_changes
from traceview.core.durations import duration_text
from traceview.core.records import record
from traceview.dimensions.analysis import DIMENSION_NAMES


@record
class Comparison:
    """The result of `compare`: every finding, structure changes, the scaling analysis when world sizes
    differ, and the one-sentence verdict."""

    baseline_source: str
    candidate_source: str
    findings: list[Finding]
    structure: Structure
    scaling: Scaling | None
    settings: CompareSettings
    verdict: str = ""
    budgets: pl.DataFrame = field(default_factory=pl.DataFrame)
    different_jobs: tuple[str, ...] = ()  # what makes the runs different jobs (`traceview.compare.same_job`)

    @property
    def regressions(self) -> list[Finding]:
        """Significant changes the worse way, largest first."""
        return _ranked([f for f in self.findings if f.outcome == "regression"])

    @property
    def improvements(self) -> list[Finding]:
        """Significant changes the better way, largest first."""
        return _ranked([f for f in self.findings if f.outcome == "improvement"])

    @property
    def not_significant(self) -> list[Finding]:
        """Changes beyond the threshold but within the runs' spread, causes first, largest first."""
        return _ranked([f for f in self.findings if f.outcome == "not significant"])

    @property
    def explained(self) -> list[Finding]:
        """Kernel-class changes that the ranks which moved explain, largest first."""
        return _ranked([f for f in self.findings if f.outcome == "explained"])

    @property
    def scaling_shortfall_pct(self) -> float | None:
        """How far the measured scaling efficiency falls short of the model's, in percent of the model's."""
        scaling = self.scaling
        if scaling is None or scaling.measured_efficiency is None or not scaling.predicted_efficiency:
            return None
        return (1 - scaling.measured_efficiency / scaling.predicted_efficiency) * 100

    @property
    def failing(self) -> list[Finding]:
        """Regressions that fail the comparison: those not marked partial. Between world sizes with a model
        prediction, the size-driven changes are expected: the comparison fails only when the measured
        efficiency falls short of the model's by more than the threshold."""
        shortfall = self.scaling_shortfall_pct
        if shortfall is not None and shortfall <= self.settings.threshold_pct:
            return []
        return [f for f in self.regressions if not f.partial]

    def gate_figures(self) -> dict[str, float | None]:
        """What `--fail-on` can name: counts, and `<metric>_change_pct` of every run-level figure."""
        figures: dict[str, float | None] = {
            "regressions": float(len(self.failing)),
            "improvements": float(len(self.improvements)),
            "scaling_shortfall_pct": self.scaling_shortfall_pct,
        }
        for finding in self.findings:
            if finding.subject == "run":
                figures[f"{finding.metric}_change_pct"] = finding.change_pct
            if finding.family == "dimension":  # a nightly gate on one dimension: tp_exposed_us_change_pct
                figures[f"{dict(finding.fields)['dimension']}_{finding.metric}_change_pct"] = (
                    finding.change_pct
                )
        return figures


COMPARE_GATE_FIGURES: frozenset[str] = frozenset(
    (
        "regressions",
        "improvements",
        "scaling_shortfall_pct",
        *(f"{metric}_change_pct" for metric in RUN_METRICS),
        *(
            f"{dimension}_{row.metric}_change_pct"
            for dimension in DIMENSION_NAMES
            for row in DIMENSION_METRICS
        ),
    )
)
"""Every figure `compare --fail-on` may name (`Comparison.gate_figures`), known before any file is read."""


def _ranked(findings: list[Finding]) -> list[Finding]:
    """Causes first, then effects; within each, fully read before partial, then the largest change."""
    return sorted(findings, key=lambda f: (not f.is_cause, f.partial, -abs(f.change_pct or 0.0)))


def _statistic(values: tuple[float, ...], statistic: str, median: float | None) -> float | None:
    if statistic == "p90" and values:
        found = pl.Series(values).quantile(0.9, "linear")
        return None if found is None else float(found)
    return median


def _test(base: Samples, cand: Samples) -> Finding:
    result = mann_whitney(base.values, cand.values)
    baseline = _statistic(base.values, base.statistic, result.baseline_median)
    candidate = _statistic(cand.values, cand.statistic, result.candidate_median)
    change = relative_change(baseline, candidate)
    return Finding(
        family=base.family,
        metric=base.metric,
        subject=base.subject,
        statistic=base.statistic,
        worse=base.worse,
        baseline=baseline,
        candidate=candidate,
        change_pct=None if change is None else change * 100,
        test=result,
        fields=base.fields,
    )


def _outcome(finding: Finding, settings: CompareSettings, step_us: float | None) -> str:
    test, change = finding.test, finding.change_pct
    if min(test.baseline_n, test.candidate_n) < settings.min_samples or finding.p_adjusted is None:
        return "not judged"
    if change is None or finding.worse == "none" or abs(change) <= settings.threshold_for(finding.metric):
        return "unchanged"
    if _too_small(finding, settings, step_us):
        return "unchanged"
    if not _beyond_peers(finding, change, settings):
        return "unchanged"
    if finding.p_adjusted >= settings.alpha:
        return "not significant"
    worse = change > 0 if finding.worse == "higher" else change < 0
    return "regression" if worse else "improvement"


def _beyond_peers(finding: Finding, change: float, settings: CompareSettings) -> bool:
    """A rank's change must also exceed its peers' by the threshold, the same way (others: always true)."""
    beyond = finding.beyond_peers_pct
    if beyond is None:
        return True
    return beyond * change > 0 and abs(beyond) > settings.threshold_for(finding.metric)


def _too_small(finding: Finding, settings: CompareSettings, step_us: float | None) -> bool:
    """A step-level time that moves by less than `min_step_share` of the step, or a share that moves by less
    than `min_step_share` (absolute), is too small to matter whatever its relative change."""
    if (
        finding.baseline is None
        or finding.candidate is None
        or finding.family not in ("step", "budget", "idle", "dimension")
    ):
        return False
    moved = abs(finding.candidate - finding.baseline)
    if finding.metric.endswith("_share"):
        return moved < settings.min_step_share
    return (
        finding.metric.endswith("_us") and step_us is not None and moved < settings.min_step_share * step_us
    )


def _adjusted(findings: list[Finding], settings: CompareSettings) -> list[Finding]:
    """Holm within each family, over the findings with enough samples to be judged."""
    result = list(findings)
    for family in dict.fromkeys(f.family for f in findings):
        indexes = [
            i
            for i, f in enumerate(findings)
            if f.family == family and min(f.test.baseline_n, f.test.candidate_n) >= settings.min_samples
        ]
        adjusted = holm([findings[i].test.p_value for i in indexes])
        for i, p in zip(indexes, adjusted, strict=True):
            result[i] = replace(findings[i], p_adjusted=p)
    return result


def _run_step(document: Mapping[str, Any]) -> float | None:
    value = ((document.get("time_budget") or {}).get("run_median") or {}).get("step_us")
    return None if value is None else float(value)


def compare(
    baseline: Mapping[str, Any], candidate: Mapping[str, Any], settings: CompareSettings
) -> Comparison:
    """Compare two summary documents (see the module docstring)."""
    base_samples, cand_samples = all_samples(baseline), all_samples(candidate)
    shared = [key for key in base_samples if key in cand_samples]
    structure = structure_changes(baseline, candidate, base_samples, cand_samples)
    unpaired = [_test(base_samples[key], cand_samples[key]) for key in shared]
    tested = _adjusted(unpaired + paired_findings(baseline, candidate), settings)
    step_us = _run_step(baseline)
    findings = explained_by_ranks(
        [
            replace(f, outcome=_outcome(f, settings, step_us), partial=structure.is_partial(f.family))
            for f in tested
        ],
        baseline,
        candidate,
        settings,
    )
    findings += [
        replace(f, partial=structure.is_partial(f.family)) for f in new_problems(baseline, candidate)
    ]
    comparison = Comparison(
        baseline_source=str((baseline.get("run") or {}).get("source", "")),
        candidate_source=str((candidate.get("run") or {}).get("source", "")),
        findings=with_likely_causes(findings),
        structure=structure,
        scaling=scaling_analysis(baseline, candidate) if structure.world_size_changed else None,
        settings=settings,
        budgets=budget_table(baseline, candidate),
        different_jobs=tuple(job_differences(baseline, candidate)),
    )
    return replace(comparison, verdict=verdict_sentence(comparison))


CAUSE_RULES: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("comp_us", "comp_share"), ("kernel_class", "kernel", "rank")),
    (
        (
            "comm_us",
            "exposed_comm_us",
            "exposed_comm_share",
            "gamma",
            "exposed_gamma",
            "transfer_gamma",
            "overlap_ratio",
        ),
        ("collective", "collective_calls", "rank"),
    ),
    (
        ("skew_us", "comm_wait_us", "idle_us", "idle_share", "dependency_bound_us", "host_bound_us"),
        ("rank", "collective", "collective_calls"),
    ),
)
"""(run-level metrics, the cause families that can explain them, in order); any other metric: every family."""


def _cause_families(metric: str) -> tuple[str, ...]:
    for metrics, families in CAUSE_RULES:
        if metric in metrics:
            return families
    return ("collective", "collective_calls", "kernel_class", "kernel", "rank")


def with_likely_causes(findings: list[Finding]) -> list[Finding]:
    """Each run-level regression or improvement with the cause finding of the same outcome that best explains
    it: the first family of `CAUSE_RULES` with one, its largest change."""
    result = []
    for finding in findings:
        causes = [
            f
            for f in findings
            if f.is_cause
            and not f.partial
            and f.outcome == finding.outcome
            and f.outcome in ("regression", "improvement")
        ]
        cause = None
        if not finding.is_cause and causes:
            for family in _cause_families(finding.metric):
                ranked = _ranked([f for f in causes if f.family == family])
                if ranked:
                    cause = _describe(ranked[0])
                    break
        result.append(replace(finding, likely_cause=cause))
    return result


BUDGET_ROWS: tuple[str, ...] = ("step_us", "comp_us", "comm_us", "exposed_comm_us", "idle_us", "transfer_us")


def budget_table(baseline: Mapping[str, Any], candidate: Mapping[str, Any]) -> pl.DataFrame:
    """The run medians of the time budget side by side, with each one's share of the median step."""
    medians = [(doc.get("time_budget") or {}).get("run_median") or {} for doc in (baseline, candidate)]
    rows = []
    for figure in BUDGET_ROWS:
        base, cand = (m.get(figure) for m in medians)
        base_step, cand_step = (m.get("step_us") for m in medians)
        rows.append(
            {
                "figure": figure,
                "baseline_us": base,
                "candidate_us": cand,
                "baseline_share": base / base_step if base is not None and base_step else None,
                "candidate_share": cand / cand_step if cand is not None and cand_step else None,
            }
        )
    schema = {
        "figure": pl.Utf8,
        "baseline_us": pl.Float64,
        "candidate_us": pl.Float64,
        "baseline_share": pl.Float64,
        "candidate_share": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema)


def _describe(finding: Finding) -> str:
    if finding.metric == "lateness_cost_us" and finding.candidate is not None:
        share = dict(finding.fields).get("lateness_cost_share")
        of_step = f" ({share:.0%} of the step)" if isinstance(share, float) else ""
        return (
            f"{finding.subject} a new straggler costing {duration_text(finding.candidate)} per step{of_step}"
        )
    if finding.metric == "mismatches":
        return f"{finding.candidate:.0f} collective mismatch(es) across ranks, none in the baseline"
    change = "" if finding.change_pct is None else f" {finding.change_pct:+.0f}%"
    return f"{finding.metric} of {finding.subject}{change}"


def verdict_sentence(comparison: Comparison) -> str:
    """One sentence: different jobs first, then regressions (causes first) or improvements, or no significant
    change; partial runs said; a changed setup (devices, NCCL, PyTorch) named, as the first suspect of
    whatever changed."""
    sentence = _core_verdict(comparison)
    setup = comparison.structure.setup_changes
    sentence = f"{sentence[:-1]}, with the setup changed ({'; '.join(setup)})." if setup else sentence
    if comparison.different_jobs:
        return f"Different jobs ({'; '.join(comparison.different_jobs)}): {sentence[0].lower()}{sentence[1:]}"
    return sentence


def _core_verdict(comparison: Comparison) -> str:
    failing, improvements = comparison.failing, comparison.improvements
    if comparison.scaling is not None:
        if comparison.scaling_shortfall_pct is not None:
            verdict = "loss beyond the model" if failing else "within the model's expectation"
        else:
            verdict = f"{len(failing)} significant regression(s)" if failing else "no significant regression"
        return f"{comparison.scaling.sentence[:-1]}: {verdict}."
    partial = " (a run was read only in part)" if comparison.structure.partial else ""
    uncertain = [f for f in comparison.regressions if f.partial]
    doubt = (
        f" Uncertain ({'; '.join(comparison.structure.partial_notes)}): {_describe(uncertain[0])}"
        f"{f' and {len(uncertain) - 1} more' if len(uncertain) > 1 else ''}."
        if uncertain
        else ""
    )
    if failing:
        top = "; ".join(_describe(f) for f in failing[:3])
        more = f" and {len(failing) - 3} more" if len(failing) > 3 else ""
        return f"Regression: {top}{more}.{doubt}"
    if uncertain:
        return f"No failing regression.{doubt}"
    within_noise = comparison.not_significant
    if within_noise:
        return (
            f"No significant regression{partial}: {len(within_noise)} change(s) beyond the threshold are "
            f"within "
            f"the runs' spread, e.g. {_describe(within_noise[0])} (p = {within_noise[0].p_adjusted:.2g})."
        )
    if improvements:
        return f"No significant regression; improved: {'; '.join(_describe(f) for f in improvements[:3])}."
    return f"No significant change beyond the runs' own spread{partial}."
