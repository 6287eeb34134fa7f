"""Whether two runs are the same job (docs/compare.md, "Different jobs"): a comparison across jobs measures
the change of workload, not a regression, so `traceview compare` says so first and refuses (exit 2) unless
told `--allow-different-jobs`: a nightly gate must not pass silently the night the model changes.

Each row of `JOB_FACTS` reads one fact from both summaries; when both know it and they differ, the row names
the difference. Facts: the parameter count P (the prediction's input, within 1%), the world size, the process
groups (their sizes), and the model's shapes as the collectives see them (the distinct message sizes of the
calls: a different model moves different gradients; they differ when fewer than half of the smaller set are
shared).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from traceview.core.records import record

PARAMS_TOLERANCE = 0.01
"""Two parameter counts within this share of each other are one model."""
SHAPES_SHARED = 0.5
"""Two sets of message sizes sharing less than this share of the smaller are two models."""

Document = Mapping[str, Any]


def _params(document: Document) -> float | None:
    rows = (document.get("prediction") or {}).get("assumptions") or ()
    found = next((row.get("value") for row in rows if str(row.get("name", "")).startswith("P (")), None)
    return float(found) if isinstance(found, int | float) and math.isfinite(found) and found > 0 else None


def _world_size(document: Document) -> int | None:
    run = document.get("run") or {}
    size = run.get("world_size")
    return int(size) if isinstance(size, int) else (len(run["ranks"]) if run.get("ranks") else None)


def _groups(document: Document) -> tuple[int, ...] | None:
    rows = (document.get("collectives") or {}).get("per_process_group") or ()
    sizes = tuple(sorted(int(row["group_size"]) for row in rows if isinstance(row.get("group_size"), int)))
    return sizes or None


def _shapes(document: Document) -> frozenset[tuple[str, int]] | None:
    calls = (document.get("distributions") or {}).get("collective_calls") or ()
    sizes = {
        (str(row.get("collective")), int(row["size_bytes"]))
        for row in calls
        if isinstance(row.get("size_bytes"), int) and row["size_bytes"] > 0
    }
    return frozenset(sizes) or None


def _params_differ(base: Any, cand: Any) -> bool:
    return bool(abs(base - cand) > PARAMS_TOLERANCE * max(base, cand))


def _shapes_differ(base: Any, cand: Any) -> bool:
    return len(base & cand) < SHAPES_SHARED * min(len(base), len(cand))


def _quantity(value: float) -> str:
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.3g}"


def _groups_text(sizes: Any) -> str:
    return ", ".join(f"{size}" for size in sizes) + " ranks"


def _shapes_text(base: Any, cand: Any) -> str:
    return f"{len(base)} and {len(cand)} message sizes, {len(base & cand)} shared"


@record
class JobFact:
    """One fact of a job: how it is read, when two values differ, how the difference is said."""

    name: str
    read: Callable[[Document], Any]
    differ: Callable[[Any, Any], bool]
    said: Callable[[Any, Any], str]


JOB_FACTS: tuple[JobFact, ...] = (
    JobFact("parameters", _params, _params_differ, lambda b, c: f"{_quantity(b)} -> {_quantity(c)}"),
    JobFact("world size", _world_size, lambda b, c: bool(b != c), lambda b, c: f"{b} -> {c}"),
    JobFact(
        "process groups",
        _groups,
        lambda b, c: bool(b != c),
        lambda b, c: f"{_groups_text(b)} -> {_groups_text(c)}",
    ),
    JobFact("model shapes", _shapes, _shapes_differ, _shapes_text),
)
"""The facts two runs of one job share, in the order they are named."""


def job_differences(baseline: Document, candidate: Document) -> list[str]:
    """What makes the two runs different jobs, one phrase per fact (`parameters 350M -> 105M`); empty when
    they may be one job (a fact either run does not know is not held against them)."""
    found = []
    for fact in JOB_FACTS:
        base, cand = fact.read(baseline), fact.read(candidate)
        if base is not None and cand is not None and fact.differ(base, cand):
            found.append(f"{fact.name} {fact.said(base, cand)}")
    return found
