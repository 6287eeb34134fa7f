"""The facts' types (docs/metrics.md, "Verdict"): what the facts are read from (`Measured`, `RunShape`), the
facts themselves (`Facts`: named numbers and words) and the helpers every fact source and sentence uses."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import field

import polars as pl

from traceview.across_ranks.analysis import CrossRank
from traceview.bubbles.gaps import BubbleAnalysis
from traceview.budget.time_budget import TimeBudget
from traceview.collectives.tables import CollectiveAnalysis
from traceview.core.durations import duration_text as format_duration
from traceview.core.records import record
from traceview.critical_path.analysis import CriticalPath
from traceview.dimensions.analysis import Dimensions
from traceview.kernels.analysis import KernelAnalysis
from traceview.links_measured.analysis import LinksMeasured
from traceview.moe.analysis import MoeBalance
from traceview.nccl.join import NcclJoin
from traceview.prediction.gamma import Prediction
from traceview.replay.analysis import Replay
from traceview.replay.predicted import PredictedGamma


@record
class RunShape:
    """What the run is, beyond its figures: its world size, the host collective calls of its ranks (`rank`,
    `name`, `family`, `calls`), the step sources used, and what each rank's trace spans (`rank`,
    `trace_start_us`, `trace_end_us`)."""

    world_size: int | None = None
    calls: pl.DataFrame | None = None
    step_sources: tuple[str, ...] = ()
    extent: pl.DataFrame | None = None
    grad_off_ranks: int = 0  # ranks whose trace metadata says autograd was off (inference_mode, no_grad)


@record
class Measured:
    """The results the facts are read from: the time budget, and each other analysis when it ran."""

    budget: TimeBudget
    crossrank: CrossRank | None = None
    collectives: CollectiveAnalysis | None = None
    prediction: Prediction | None = None
    nccl: NcclJoin | None = None
    timelines: tuple[str, ...] = ("device",)  # device | host: the timelines the budget was measured on
    shape: RunShape = field(default_factory=RunShape)
    kernels: KernelAnalysis | None = None
    dimensions: Dimensions | None = None
    moe: MoeBalance | None = None
    links: LinksMeasured | None = None
    bubbles: BubbleAnalysis | None = None
    path: CriticalPath | None = None
    predicted: PredictedGamma | None = None  # the headline's gamma_pred (`traceview.replay.predicted`)
    replay: Replay | None = None  # its `no_straggler` levers give a straggler's stake


@record
class Facts:
    """Named numbers and named words about one run; `facts[name]` reads a number."""

    numbers: Mapping[str, float] = field(default_factory=dict)
    words: Mapping[str, str] = field(default_factory=dict)

    def __getitem__(self, name: str) -> float:
        return self.numbers[name]

    def __contains__(self, name: object) -> bool:
        return name in self.numbers or name in self.words

    def word(self, name: str) -> str:
        """The named word (KeyError when no analysis said it)."""
        return self.words[name]


Found = tuple[dict[str, float], dict[str, str]]


def duration_text(facts: Facts, name: str) -> str:
    """The named duration (us) for a sentence: milliseconds from 1 ms up, else microseconds."""
    return format_duration(facts[name])


def finite(values: Mapping[str, object]) -> dict[str, float]:
    """The entries of `values` that are finite numbers, as floats (bools are not numbers here)."""
    return {
        k: float(v)
        for k, v in values.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }
