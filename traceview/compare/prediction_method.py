"""Whether two summaries' headline gamma_ratio may be set against each other (docs/metrics.md, "Predicted
gamma", The headline's gamma_pred; "Compare and trend"): a headline gamma_pred replayed on the run's own graph
(`replay`) and one of the closed form (`closed form`) are two methods, so `compare` and `trend` say "method
changed" rather than compare gamma_ratio across them. A summary written before `verdict.gamma_pred_source`
existed had the closed form's; one without a headline gamma_pred has no method.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

BEFORE_SOURCE = "closed form"
"""The method of a summary's headline gamma_pred when the summary does not name one (written before 1.18)."""


def gamma_pred_source(document: Mapping[str, Any]) -> str | None:
    """The method of the summary's headline gamma_pred, None when it has none (not computed, withheld)."""
    verdict = document.get("verdict") or {}
    if verdict.get("gamma_pred") is None:
        return None
    source = verdict.get("gamma_pred_source")
    return source if isinstance(source, str) and source else BEFORE_SOURCE


def method_change(before: Mapping[str, Any], after: Mapping[str, Any]) -> str | None:
    """`method changed: ...` when both summaries have a headline gamma_pred and their methods differ."""
    old, new = gamma_pred_source(before), gamma_pred_source(after)
    if old is None or new is None or old == new:
        return None
    return f"method changed: the headline's gamma_pred by the {old} -> by the {new}; gamma_ratio not compared"


def method_changes(documents: Sequence[Mapping[str, Any] | None]) -> list[tuple[int, str]]:
    """(index, `method changed: ...`) before each summary of a series whose headline gamma_pred's method
    differs from the one before it (a run without its summary, read from a history file, is not judged)."""
    found = []
    for index in range(1, len(documents)):
        before, after = documents[index - 1], documents[index]
        change = None if before is None or after is None else method_change(before, after)
        if change:
            found.append((index, change))
    return found
