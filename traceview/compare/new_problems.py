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

from traceview.compare.findings import Finding
from traceview.compare.stats import TestResult

NOT_TESTED = TestResult(0, 0, None, None, None, None, name="named by the across-ranks analysis")


def _per_rank(document: Mapping[str, Any]) -> dict[int, Mapping[str, Any]]:
    rows = (document.get("across_ranks") or {}).get("per_rank") or ()
    return {int(row["rank"]): row for row in rows if isinstance(row.get("rank"), int)}


def _stragglers(document: Mapping[str, Any]) -> set[int]:
    return {int(rank) for rank in (document.get("across_ranks") or {}).get("stragglers") or ()}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def new_stragglers(baseline: Mapping[str, Any], candidate: Mapping[str, Any]) -> list[Finding]:
    """One regression per rank the candidate names a straggler and the baseline does not, with its cost."""
    rows = _per_rank(candidate)
    found = []
    for rank in sorted(_stragglers(candidate) - _stragglers(baseline)):
        row = rows.get(rank, {})
        cost, share = _number(row.get("lateness_cost_us")), _number(row.get("lateness_cost_share"))
        fields = (("rank", rank), ("lateness_cost_share", share), ("cause", row.get("cause")))
        found.append(
            Finding(
                family="rank",
                metric="lateness_cost_us",
                subject=f"rank {rank}",
                statistic="per step",
                worse="higher",
                baseline=0.0,
                candidate=cost,
                change_pct=None,  # no baseline to divide by: the change is its cost (its share in fields)
                test=NOT_TESTED,
                outcome="regression",
                fields=fields,
                likely_cause=None if row.get("cause") is None else f"new straggler: {row.get('cause')}",
            )
        )
    return found


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
