"""`traceview scaleup SMALL LARGE`: the scale-up post-mortem as a command (docs/compare.md, "scaleup").

Two runs of one model at two sizes. They are refused only on evidence that they are different models: the
parameter counts both state differ (beyond `PARAMS_TOLERANCE`), or the compute kernels' signature sets (each
run's kernel keys, `traceview.compare.kernel_pairs`) differ by more than `KERNEL_SHARE` of their union. When
neither run states its parameters, the headline says `same model: not verifiable`. The analysis itself is
`traceview.compare.scaling` (measured against the model's predicted efficiency, the loss split by factor in
absolute times).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from traceview.compare.kernel_pairs import kernel_means
from traceview.compare.same_job import PARAMS_TOLERANCE
from traceview.compare.scaling import Scaling, scaling_analysis
from traceview.core.records import record

KERNEL_SHARE = 0.5
"""Two runs whose compute-kernel signature sets share less than this share of their union are two models."""
GUESSED_SOURCES = ("default", "guess", "estimat", "shape", "trace")
"""Sources of a parameter count that are not the user's statement (a default, a guess from the trace)."""

Document = Mapping[str, Any]


@record
class Scaleup:
    """The post-mortem: the scaling analysis, whether the model is the same (evidence, or not verifiable)."""

    scaling: Scaling
    same_model: str  # "same model: stated parameters agree" | "same model: not verifiable"
    kernel_overlap: float | None  # shared compute kernel signatures / their union

    @property
    def headline(self) -> str:
        """The first line: measured scaling efficiency against the model's, whether the model is the same."""
        scaling = self.scaling
        return (
            f"Scaling {scaling.baseline_world_size} -> {scaling.candidate_world_size} GPUs: measured scaling "
            f"efficiency {_pct(scaling.measured_efficiency)} against the alpha-beta model's "
            f"{_pct(scaling.predicted_efficiency)} ({EXPECTED_FROM}); {self.same_model}."
        )


EXPECTED_FROM = "today's predicted efficiency"
"""What the model's efficiency in the headline is: the alpha-beta prediction of each size."""


def _pct(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.0%}"


def _stated_params(document: Document) -> float | None:
    rows = (document.get("prediction") or {}).get("assumptions") or ()
    for row in rows:
        if str(row.get("name", "")).startswith("P ("):
            value, source = row.get("value"), str(row.get("source") or "")
            guessed = any(word in source for word in GUESSED_SOURCES)
            stated = isinstance(value, int | float) and math.isfinite(value) and value > 0 and not guessed
            return float(value) if stated else None
    return None


def _signatures(document: Document) -> set[str]:
    means = kernel_means(document)
    return set(means.get_column("key").to_list()) if means.height else set()


def kernel_overlap(small: Document, large: Document) -> float | None:
    """Shared compute-kernel signatures over their union; None when a run lists none."""
    first, second = _signatures(small), _signatures(large)
    if not first or not second:
        return None
    return len(first & second) / len(first | second)


def model_differences(small: Document, large: Document) -> list[str]:
    """The evidence that the two runs are different models (empty: none)."""
    found = []
    params = (_stated_params(small), _stated_params(large))
    if None not in params and abs(params[0] - params[1]) > PARAMS_TOLERANCE * max(params):  # type: ignore[operator,type-var]
        found.append(f"stated parameters {params[0]:.4g} -> {params[1]:.4g}")
    overlap = kernel_overlap(small, large)
    if overlap is not None and overlap < KERNEL_SHARE:
        found.append(
            f"compute kernels: {overlap:.0%} of their signatures shared (at least {KERNEL_SHARE:.0%} needed)"
        )
    return found


def scaleup(small: Document, large: Document) -> Scaleup:
    """The post-mortem of `small` against `large` (call `model_differences` first to refuse two models)."""
    params = (_stated_params(small), _stated_params(large))
    same = (
        "same model: stated parameters agree"
        if None not in params
        else "same model: not verifiable (neither run states its parameters: give --params or run.json)"
        if params == (None, None)
        else "same model: not verifiable (one run states its parameters)"
    )
    return Scaleup(scaling_analysis(small, large), same, kernel_overlap(small, large))
