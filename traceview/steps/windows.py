"""Step windows on the device clock, per rank (docs/metrics.md section 3).

The parser keeps every `ProfilerStep#N` candidate (`RankTrace.steps`, column `source`: `gpu` for GPU-side
annotations, `cpu` for host ones). `choose_steps` picks one set per rank by evidence:

- GPU annotations are used when their windows hold enough of the reference device activity: at least
  `GPU_COVER_MIN_SHARE_OF_CPU_STEPS` of the device busy time of the events launched inside the CPU steps, or,
  without CPU steps, `GPU_COVER_MIN_SHARE_OF_TRACE` of the whole trace's. Otherwise (ROCm traces carry GPU
  step annotations of a few microseconds) they are rejected, the reason is stated as a run warning, and the
  CPU steps are used, or the whole trace without them.
- CPU `ProfilerStep#N` windows: each device event belongs to the step whose CPU window contains the runtime
  call that launched it (matched by correlation id; an event without a launch falls back to its own start
  time). A step ends when its last device work ends: window N runs from the end of step N-1 to the end of step
  N (the first from its own first device activity). So the device time between steps, the input pipeline's gap
  included, is charged to the step it precedes, pipelined steps (the next step's prefetch running under this
  one) are not cut in two, and nothing is lost between windows.
- No steps: the whole trace is one step, numbered `WHOLE_TRACE`, from its first device activity to its last.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from traceview.core.records import record
from traceview.model.stacking import distinct_rank_rounds
from traceview.model.trace import RankTrace
from traceview.steps._keyed import (
    SOURCES,
    WHOLE_TRACE,
    WINDOW_SCHEMA,
    Stacked,
    busy_of,
    chosen_rows,
    event_steps,
    evidence_rows,
    window_rows,
    windows_of,
)

__all__ = [
    "GPU_COVER_MIN_SHARE_OF_CPU_STEPS",
    "GPU_COVER_MIN_SHARE_OF_TRACE",
    "STEP_MARK",
    "WHOLE_TRACE",
    "WINDOW_SCHEMA",
    "StepChoice",
    "choose_steps",
    "chosen_windows",
    "chosen_windows_of",
    "device_event_steps",
    "step_windows",
]
STEP_MARK = r"^ProfilerStep#\d+$"
"""The name of a host step mark: the profiler's `ProfilerStep#N` annotation."""
GPU_COVER_MIN_SHARE_OF_CPU_STEPS = 0.9
"""GPU step annotations whose windows hold less than this share of the device busy time launched inside the
CPU steps are rejected: a GPU ProfilerStep annotation spans its step's device work, so a faithful set holds
nearly all of it."""
GPU_COVER_MIN_SHARE_OF_TRACE = 0.5
"""Without CPU steps, the reference is the trace's whole device busy time, which may hold work outside every
step (warm-up, the profiler's stop): GPU step annotations holding less than this share of it are rejected."""


@record
class StepChoice:
    """The step source used for one rank (`gpu` | `cpu` | `none`) and, when GPU annotations were weighed,
    the device busy time (us) inside their windows and in the reference; `warning` says why they were
    rejected (None when they were not)."""

    rank: int
    source: str
    gpu_covered_us: float | None = None
    reference_us: float | None = None
    warning: str | None = None


def _span(microseconds: float) -> str:
    return f"{microseconds / 1000:.1f} ms" if microseconds >= 1000 else f"{microseconds:.0f} us"


def choose_steps(trace: RankTrace) -> StepChoice:
    """The step source of the rank, by evidence (see the module docstring). One query when GPU annotations
    are weighed, none otherwise."""
    return chosen_windows(trace, windows=False)[0]


def chosen_windows(
    trace: RankTrace, windows: bool = True, also: Sequence[pl.LazyFrame] = ()
) -> tuple[StepChoice, pl.DataFrame, list[pl.DataFrame]]:
    """`choose_steps(trace)`, when `windows` `step_windows(trace, choice)` (else an empty frame), and the
    queries `also` collected: the evidence, the windows of each source it may choose and `also` in one query.
    """
    return chosen_windows_of([trace], [also], windows)[0]


def chosen_windows_of(
    traces: Sequence[RankTrace], also: Sequence[Sequence[pl.LazyFrame]], windows: bool = True
) -> list[tuple[StepChoice, pl.DataFrame, list[pl.DataFrame]]]:
    """`chosen_windows` of each trace (with its `also`), in order. The batch's evidence and windows are a
    fixed number of queries keyed by `rank`, whatever the number of traces (`traceview.steps._keyed`; a
    rank claimed twice goes to another round of them), collected with every `also` in one `pl.collect_all`.
    """
    if len(also) != len(traces):
        raise ValueError(f"{len(traces)} traces but {len(also)} lists of queries")
    parts = distinct_rank_rounds(traces)
    rounds = [_Round.of([traces[i] for i in part], windows) for part in parts]
    queries = [plan for one in rounds for plan in one.plans.values()]
    queries += [query for extra in also for query in extra]
    found = iter(pl.collect_all(queries) if queries else [])
    answered: dict[int, tuple[StepChoice, pl.DataFrame]] = {}
    for part, one in zip(parts, rounds, strict=True):
        answered.update(zip(part, one.answers({name: next(found) for name in one.plans}), strict=True))
    return [(*answered[i], [next(found) for _ in extra]) for i, extra in enumerate(also)]


@record
class _Flags:
    """What `chosen_windows` needs to know of one trace before its queries (no query)."""

    rank: int
    has_gpu: bool
    has_cpu: bool
    has_events: bool
    one_gpu_step: bool

    @staticmethod
    def of(trace: RankTrace) -> _Flags:
        source = trace.steps.get_column("source")
        has_gpu, has_cpu = bool((source == "gpu").any()), bool((source == "cpu").any())
        one = int((source == "gpu").sum()) == 1
        return _Flags(trace.rank, has_gpu, has_cpu, trace.gpu.height > 0, one)

    @property
    def fallback(self) -> str:
        return "cpu" if self.has_cpu else "none"

    @property
    def weigh(self) -> bool:
        """The GPU annotations are weighed against the reference (they and device events are present)."""
        return self.has_gpu and self.has_events

    def choice(self, busy: tuple[float, float] | None) -> StepChoice:
        """The choice, from the busy time of the reference and inside the GPU annotations when weighed."""
        weighed = list(busy) if self.weigh and busy is not None else []
        return _choice(self.rank, self.has_gpu, self.fallback, self.has_cpu, weighed)

    def framed(self, source: str, windows: bool) -> str | None:
        """`source` when its windows were computed, else None (no windows)."""
        return source if source in self.sources(windows) else None

    def sources(self, windows: bool) -> tuple[str, ...]:
        """The sources whose windows are computed: those the choice may pick (none without device events)."""
        if not (windows and self.has_events):
            return ()
        return ("gpu", self.fallback) if self.weigh else ("gpu" if self.has_gpu else self.fallback,)


@record
class _Round:
    """The queries of traces of distinct ranks, keyed by rank (at most two: the evidence of the ranks that
    weigh their GPU annotations, and the windows of each source a rank may choose), and how each trace's
    answer is read from them."""

    flags: list[_Flags]
    windows: bool
    plans: dict[str, pl.LazyFrame]

    @staticmethod
    def of(traces: Sequence[RankTrace], windows: bool) -> _Round:
        flags = [_Flags.of(trace) for trace in traces]
        return _Round(flags, windows, _plans(Stacked.of(traces), flags, windows))

    def answers(self, found: dict[str, pl.DataFrame]) -> list[tuple[StepChoice, pl.DataFrame]]:
        """Each trace's choice and chosen windows, from the collected `plans` (by name)."""
        ranks = [flags.rank for flags in self.flags]
        busy = busy_of(found["evidence"], ranks) if "evidence" in found else [None] * len(ranks)
        choices = [flags.choice(weighed) for flags, weighed in zip(self.flags, busy, strict=True)]
        chosen = [flags.framed(c.source, self.windows) for flags, c in zip(self.flags, choices, strict=True)]
        rows = found.get("windows", _NO_WINDOWS)
        return list(zip(choices, chosen_rows(rows, ranks, chosen), strict=True))


_NO_WINDOWS = pl.DataFrame(schema={**WINDOW_SCHEMA, "_source": pl.Int64})


def _plans(stack: Stacked, flags: Sequence[_Flags], windows: bool) -> dict[str, pl.LazyFrame]:
    """The `evidence_rows` of the ranks that weigh their GPU annotations and the `window_rows` of each source
    a rank may choose, each only when some rank needs it."""
    stepped = event_steps(stack)  # one plan, shared
    plans = {}
    weigh = [one for one in flags if one.weigh]
    if weigh:
        launched = [one.rank for one in weigh if one.has_cpu]
        own = [one.rank for one in weigh if not one.has_cpu]
        single = {one.rank for one in weigh if one.one_gpu_step}
        plans["evidence"] = evidence_rows(stack, stepped, launched, own, single)
    wanted = {source: [one.rank for one in flags if source in one.sources(windows)] for source in SOURCES}
    if any(wanted.values()):
        plans["windows"] = window_rows(
            stack, stepped, {source: ranks for source, ranks in wanted.items() if ranks}
        )
    return plans


def _choice(rank: int, has_gpu: bool, fallback: str, has_cpu: bool, busy: list[float]) -> StepChoice:
    """The choice from the busy time of the reference and inside the GPU annotations (`busy`, empty when they
    were not weighed)."""
    if not busy:
        return StepChoice(rank, "gpu" if has_gpu else fallback)
    reference, covered = busy
    share = GPU_COVER_MIN_SHARE_OF_CPU_STEPS if has_cpu else GPU_COVER_MIN_SHARE_OF_TRACE
    if reference <= 0 or covered >= share * reference:
        return StepChoice(rank, "gpu", covered, reference)
    what = "the device activity launched in the CPU steps" if has_cpu else "the trace's device activity"
    instead = "using the CPU ProfilerStep windows" if has_cpu else "analysing the whole trace as one step"
    warning = (
        f"rank {rank}: GPU ProfilerStep annotations cover {covered / reference:.2%} of {what} "
        f"({_span(covered)} of {_span(reference)}); {instead}"
    )
    return StepChoice(rank, fallback, covered, reference, warning)


def step_windows(trace: RankTrace, choice: StepChoice | None = None) -> pl.DataFrame:
    """Device-clock windows of the rank's steps: columns `rank`, `step`, `window_start_us`, `window_end_us`.

    `choice` is `choose_steps(trace)` (computed here when not given)."""
    if trace.gpu.height == 0:
        return pl.DataFrame(schema=WINDOW_SCHEMA)
    source = (choice or choose_steps(trace)).source
    stack = Stacked.of([trace])
    return windows_of(stack, source, [trace.rank], event_steps(stack)).collect()


def device_event_steps(trace: RankTrace) -> pl.DataFrame:
    """Each device event's CPU step (by its launch), columns `correlation`, `start_us`, `end_us`, `step`;
    events launched outside every CPU step are left out. One query."""
    return event_steps(Stacked.of([trace])).drop("rank").collect()
