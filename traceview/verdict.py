"""The headline: compute-bound or communication-bound, and by how much (docs/metrics.md, "Verdict").

Rules are data: each row names a condition over the run's median figures and the sentence it produces; the first
row whose condition holds is the verdict.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

Figures = Mapping[str, float | None]


@dataclass(frozen=True)
class Verdict:
    """One of `compute-bound`, `communication-bound`, `idle-bound`, `no-device-activity`, and a sentence."""

    label: str
    sentence: str


def _value(figures: Figures, name: str) -> float:
    value = figures.get(name)
    return float(value) if value is not None else 0.0


def _idle_bound(f: Figures) -> bool:
    return _value(f, "idle_us") > _value(f, "comp_us") + _value(f, "exposed_comm_us")


def _comm_bound(f: Figures) -> bool:
    return _value(f, "gamma") > 1.0


def _comm_only(f: Figures) -> bool:
    return _value(f, "comp_us") <= 0.0 < _value(f, "comm_us")


def _comm_only_sentence(f: Figures) -> str:
    share = _value(f, "exposed_comm_us") / _value(f, "step_us")
    return (
        f"Communication-bound: the median step holds {_value(f, 'comm_us') / 1000:.2f} ms of communication and "
        f"no compute (gamma is unbounded); {share:.0%} of the step is communication nothing hides."
    )


def _no_activity(f: Figures) -> bool:
    return _value(f, "step_us") <= 0.0


def _idle_sentence(f: Figures) -> str:
    share = _value(f, "idle_us") / _value(f, "step_us")
    return (
        f"The GPU is idle {share:.0%} of the median step: neither compute nor communication sets the pace; "
        f"look at the host (input pipeline, launches, synchronisation)."
    )


def _bound_sentence(f: Figures, label: str) -> str:
    gamma, exposed = _value(f, "gamma"), _value(f, "exposed_gamma")
    exposed_share = _value(f, "exposed_comm_us") / _value(f, "step_us")
    side = "communication takes" if gamma > 1 else "communication takes only"
    return (
        f"{label.capitalize()}: {side} {gamma:.2f}x the compute time (measured gamma = T_comm / T_comp, median "
        f"over steps and ranks); {exposed_share:.0%} of the step is communication nothing hides "
        f"(exposed gamma {exposed:.2f})."
    )


RULES: tuple[tuple[str, Callable[[Figures], bool], Callable[[Figures], str]], ...] = (
    ("no-device-activity", _no_activity, lambda f: "The trace holds no device activity inside any step."),
    ("communication-bound", _comm_only, _comm_only_sentence),
    ("idle-bound", _idle_bound, _idle_sentence),
    ("communication-bound", _comm_bound, lambda f: _bound_sentence(f, "communication-bound")),
    ("compute-bound", lambda f: True, lambda f: _bound_sentence(f, "compute-bound")),
)


def verdict(run_median: Figures) -> Verdict:
    """The first rule of `RULES` that holds for the run's median figures."""
    for label, holds, sentence in RULES:
        if holds(run_median):
            return Verdict(label, sentence(run_median))
    raise AssertionError("the last rule always holds")  # pragma: no cover
