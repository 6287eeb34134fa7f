"""Problems the candidate has and the baseline had not, ranked as regressions with their cost
(docs/compare.md, "New stragglers and mismatches"): a rank the candidate names a straggler that the
baseline did not (its cost is its lateness cost, `across_ranks.per_rank.lateness_cost_us`, and its share of
the step), and collective mismatches where the baseline had none (their count). No statistical test decides
these: the across-ranks analysis of each run already did; they are regressions whatever the threshold,
except where a run was read only in part.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from traceview.compare.crossrank_findings import Straggler, named_stragglers
from traceview.compare.findings import Finding
from traceview.compare.stats import TestResult

NOT_TESTED = TestResult(0, 0, None, None, None, None, name="named by the across-ranks analysis")


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def straggler_findings(before: Sequence[Straggler], after: Sequence[Straggler]) -> list[Finding]:
    """One regression per straggler of `after` that `before` does not name, with its cost: the rule compare
    and trend share (`traceview.compare.crossrank_findings` reads both sides)."""
    known = {s.rank for s in before}
    return [
        Finding(
            family="rank",
            metric="lateness_cost_us",
            subject=f"rank {straggler.rank}",
            statistic="per step",
            worse="higher",
            baseline=0.0,
            candidate=straggler.cost_us,
            change_pct=None,  # no baseline to divide by: the change is its cost (its share in fields)
            test=NOT_TESTED,
            outcome="regression",
            fields=(
                ("rank", straggler.rank),
                ("lateness_cost_share", straggler.cost_share),
                ("cause", straggler.cause),
            ),
            likely_cause=None if straggler.cause is None else f"new straggler: {straggler.cause}",
        )
        for straggler in after
        if straggler.rank not in known
    ]


def new_stragglers(baseline: Mapping[str, Any], candidate: Mapping[str, Any]) -> list[Finding]:
    """One regression per rank the candidate names a straggler and the baseline does not, with its cost."""
    return straggler_findings(named_stragglers(baseline) or (), named_stragglers(candidate) or ())


def new_mismatches(baseline: Mapping[str, Any], candidate: Mapping[str, Any]) -> list[Finding]:
    """A regression when the candidate's collectives mismatch across ranks and the baseline's did not."""
    counts = [
        _number(((d.get("across_ranks") or {}).get("figures") or {}).get("mismatches"))
        for d in (baseline, candidate)
    ]
    before, after = counts
    if before is None or after is None or before > 0 or after <= 0:
        return []
    return [
        Finding(
            family="collective",
            metric="mismatches",
            subject="run",
            statistic="count",
            worse="higher",
            baseline=before,
            candidate=after,
            change_pct=None,
            test=NOT_TESTED,
            outcome="regression",
            likely_cause="collectives that do not match across ranks (a hang or a deadlock in waiting)",
        )
    ]


def new_problems(baseline: Mapping[str, Any], candidate: Mapping[str, Any]) -> Sequence[Finding]:
    """Every new straggler and new mismatch of the candidate, as regressions (module docstring); none when
    either summary has no across-ranks analysis (an older schema, one rank): it cannot say what is new."""
    if not (baseline.get("across_ranks") and candidate.get("across_ranks")):
        return []
    return [*new_stragglers(baseline, candidate), *new_mismatches(baseline, candidate)]
