"""The results of a run's analysis as the renderers read them: the run's header and `RunAnalysis` (with the
`RunOptions` it was analysed with), built by `traceview.reduce.analysis.analyze` (map, then reduce)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field, replace
from typing import TYPE_CHECKING, Any

import polars as pl

from traceview.across_ranks.analysis import CrossRank
from traceview.across_ranks.clocks import ASSUMED_HOSTS
from traceview.bubbles.gaps import CAUSE_COLUMNS, BubbleAnalysis
from traceview.budget.time_budget import MEDIAN_COLUMNS, TRANSFER_COLUMNS, TimeBudget
from traceview.collectives.tables import CollectiveAnalysis
from traceview.collectives.tables import gate_figures as collective_gate_figures
from traceview.core.ranks import rank_ranges
from traceview.core.records import record
from traceview.critical_path.analysis import CriticalPath
from traceview.dimensions.analysis import Dimensions
from traceview.distributions.samples import Distributions
from traceview.kernels.analysis import KernelAnalysis
from traceview.links_measured.analysis import LinksMeasured
from traceview.load.non_traces import IgnoredInputs, set_apart_non_traces
from traceview.model.time_base import iso_time, recorded_start_us
from traceview.model.trace import Run
from traceview.moe.analysis import MoeBalance
from traceview.nccl.inspector import InspectorJoin
from traceview.nccl.join import NcclJoin
from traceview.nccl.problems import NCCL_GATE_FIGURES, nccl_gate_figures
from traceview.options.run import RunFacts, RunOptions
from traceview.prediction.gamma import Prediction
from traceview.replay.analysis import Replay
from traceview.roofline.analysis import Roofline
from traceview.steps.windows import StepChoice
from traceview.timeline.drilldown import Drilldown
from traceview.timeline.step_view import Timeline
from traceview.verdict.headline import Verdict
from traceview.verdict.recommend import Recommendations

if TYPE_CHECKING:  # read only where a run names dumps: imported then (`reduce._flight_recorder`)
    from traceview.flight_recorder.analysis import HangAnalysis

GATE_FIGURES: frozenset[str] = frozenset(
    (
        *MEDIAN_COLUMNS,
        *TRANSFER_COLUMNS,
        *("stragglers", "mismatches", "median_skew_us", "max_wait_share"),  # across ranks
        *("comm_linked_share", "comm_unknown_kernels"),  # collectives
        *(f"idle_{column}" for column in CAUSE_COLUMNS.values()),
        *("pipeline_bubble", "pipeline_bubble_excess"),  # bubbles
        *("gamma_pred", "gamma_ratio"),  # prediction
        *NCCL_GATE_FIGURES,
    )
)
"""Every figure `--fail-on` may name (`RunAnalysis.gate_figures`), known before any file is read, so that a
misspelled metric is refused at once (tests/test_gates.py checks it against the figures of real runs)."""


@record
class RunHeader:
    """Who and what the run is: the report's header and the JSON summary's `run` object."""

    source: str
    ranks: tuple[int, ...]
    world_size: int | None
    devices: tuple[str, ...]
    hostnames: tuple[str, ...]
    pytorch_versions: tuple[str, ...]
    nccl_versions: tuple[str, ...]
    backends: tuple[str, ...]
    files: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]
    warnings: tuple[str, ...]
    step_sources: tuple[str, ...]
    ignored: IgnoredInputs = field(default_factory=IgnoredInputs)  # not traces (traceview.load.non_traces)
    base_times_ns: tuple[int, ...] = ()  # each rank's baseTimeNanoseconds (0: unknown), in `ranks` order
    timelines: tuple[str, ...] = ()  # device | host: the timelines analysed (traceview.events.host_timeline)
    manifest: str | None = None  # the run.json read (docs/run-manifest.md), None without one
    # each rank's move onto the run's time base (traceview.model.time_base)
    base_shifts_us: tuple[float, ...] = ()
    recorded_at: str | None = None  # when the run started, ISO 8601 UTC (docs/json-schema.md, `run`)
    recorded_at_source: str | None = None  # "trace base time" | "run.json created"
    job: str | None = None  # run.json's job
    commit: str | None = None  # run.json's commit
    label: str | None = None  # --label
    sources: tuple[tuple[str, str], ...] = ()  # where hostnames, pytorch_versions, world_size came from


@record
class RunAnalysis:
    """Every result of one run; renderers read it and never compute."""

    header: RunHeader
    budget: TimeBudget
    verdict: Verdict
    options: RunOptions = field(default_factory=RunOptions)
    timeline: Timeline | None = None
    recommendations: Recommendations | None = None
    crossrank: CrossRank | None = None
    collectives: CollectiveAnalysis | None = None
    bubbles: BubbleAnalysis | None = None
    nccl: NcclJoin | None = None
    inspector: InspectorJoin | None = None  # NCCL Inspector's records joined to the collectives
    prediction: Prediction | None = None
    drilldown: Drilldown | None = None  # the report's drill-down figures (traceview.timeline.drilldown)
    distributions: Distributions | None = None  # samples for `traceview compare` and `trend`
    kernels: KernelAnalysis | None = None  # where the compute time went (traceview.kernels)
    dimensions: Dimensions | None = None  # parallelism dimensions: groups, cost, volumes
    moe: MoeBalance | None = None  # expert-parallel balance from the all-to-alls' splits
    roofline: Roofline | None = None  # the communication roofline per dimension and link level
    links_measured: LinksMeasured | None = None  # alpha and beta fitted on the run's transfer times
    critical_path: CriticalPath | None = None  # what held each step (traceview.critical_path)
    flight_recorder: HangAnalysis | None = None  # Flight Recorder dumps of the job read together
    replay: Replay | None = None  # the run's own skeletons replayed, and one replay per lever

    def gate_figures(self) -> dict[str, float | None]:
        """The figures `--fail-on` can name: the run medians of the time budget (docs/metrics.md)."""
        figures = dict(self.budget.run_median)
        figures.update(self.crossrank.gate_figures() if self.crossrank else {})
        figures.update(collective_gate_figures(self.collectives))
        figures.update(self.bubbles.gate_figures() if self.bubbles else {})
        figures.update(self._predicted_figures())
        figures.update(self.dimensions.gate_figures() if self.dimensions else {})
        figures.update(self.moe.gate_figures() if self.moe else {})
        figures.update({"roofline_efficiency": self.roofline.efficiency} if self.roofline else {})
        figures.update(nccl_gate_figures(self.nccl))
        figures.update(dict.fromkeys(self.withheld(), None))
        return figures

    def _predicted_figures(self) -> dict[str, float | None]:
        """`gamma_pred` and `gamma_ratio` as the headline decided them (`Verdict`, its source
        `gamma_pred_source`: the replay's comm_model lever or the closed form)."""
        if self.prediction is None:
            return {}
        return {"gamma_pred": self.verdict.gamma_pred, "gamma_ratio": self.verdict.gamma_ratio}

    def recommendation_rows(self) -> list[dict[str, Any]]:
        """The recommendations in their ranked order (the most saved first): the stake (its share of the
        median step), the rule, the sentence and the time per step at stake (its `saved_us`)."""
        items = self.recommendations.items if self.recommendations else ()
        return [
            {
                "stake_share": item.score,
                "rule": item.rule,
                "sentence": item.sentence,
                "time_per_step_us": item.saved_us,
            }
            for item in items
        ]

    def withheld(self) -> dict[str, str]:
        """Figure -> why, for the headline figures the verdict withholds (`Verdict.withheld`): None in
        `gate_figures`, withheld on the tiles and the card, `not evaluated` for `--fail-on`."""
        return dict(self.verdict.withheld)


def with_identity(header: RunHeader, run: Run, budget: TimeBudget, facts: RunFacts) -> RunHeader:
    """`header` with when the run started and who it is (`recorded_at` and its source, `job`, `commit`,
    `label`): run.json's `created` when it states one (the manifest's facts come before the traces', as for
    every input), else the traces' time base and first step
    (`traceview.model.time_base.recorded_start_us`)."""
    windows = budget.per_step.get_column("window_start_us") if budget.per_step.height else None
    first = None if windows is None else windows.min()
    started = recorded_start_us([t.meta.base_time_ns for t in run], first)  # type: ignore[arg-type]
    at, source = (facts.created, "run.json created") if facts.created else (None, None)
    if at is None and started is not None:
        at, source = iso_time(started), "trace base time"
    return replace(
        header,
        recorded_at=at,
        recorded_at_source=source,
        job=facts.job,
        commit=facts.commit,
        label=facts.label,
    )


def with_stated_facts(header: RunHeader, hosts: pl.DataFrame, facts: RunFacts) -> RunHeader:
    """`header` with the one answer the whole page and document give for hosts, PyTorch version and world
    size: the traces' own, else what the run names elsewhere (hosts: the ranks' hosts the clock alignment
    used, from the traces, the NCCL logs or run.json, `traceview.across_ranks.clocks.rank_hosts`; the
    others: run.json), each with its source in `sources`."""
    stated = hosts.filter(pl.col("host_source") != ASSUMED_HOSTS)
    names = tuple(sorted(set(stated.get_column("host").to_list())))
    sources = (
        {"hostnames": ", ".join(sorted(set(stated.get_column("host_source").to_list())))} if names else {}
    )
    pytorch, world = header.pytorch_versions, header.world_size
    if not pytorch and facts.pytorch_version:
        pytorch, sources["pytorch_versions"] = (facts.pytorch_version,), "run.json"
    elif pytorch:
        sources["pytorch_versions"] = "trace"
    if world is None and facts.world_size:
        world, sources["world_size"] = facts.world_size, "run.json"
    elif world is not None:
        sources["world_size"] = "trace"
    return replace(
        header,
        hostnames=names or header.hostnames,
        pytorch_versions=pytorch,
        world_size=world,
        sources=tuple(sorted(sources.items())),
    )


def _distinct(values: list[str]) -> tuple[str, ...]:
    return tuple(sorted({v for v in values if v}))


def rank_warnings(run: Run) -> list[str]:
    """Every parse warning of the run, one line each; a message several ranks share is one line naming
    them (`ranks 0-7: no baseTimeNanoseconds ...`), in the order first seen; the run's own after."""
    by_message: dict[str, list[tuple[int, str]]] = {}
    for trace in run:
        for warning in trace.warnings:
            by_message.setdefault(warning.message, []).append((trace.rank, str(warning)))
    lines = [
        said[0][1] if len(said) == 1 else f"ranks {rank_ranges(r for r, _ in said)}: {message}"
        for message, said in by_message.items()
    ]
    return [*lines, *(str(w) for w in run.extra_warnings)]


def run_header(run: Run, choices: Sequence[StepChoice] = (), warnings: Sequence[str] = ()) -> RunHeader:
    """The run's identity, gathered from every rank's metadata; the step sources are the ones chosen by
    evidence (`choices`, `traceview.steps.windows.StepChoice`, one per rank) and their warnings join
    `warnings`."""
    metas = [trace.meta for trace in run]
    skipped, ignored = set_apart_non_traces(run.skipped)
    world_sizes = {m.world_size for m in metas if m.world_size}
    return RunHeader(
        source=run.source,
        ranks=tuple(run.rank_ids),
        world_size=max(world_sizes) if world_sizes else None,
        devices=_distinct([d for m in metas for d in m.devices]),
        hostnames=_distinct([m.hostname for m in metas]),
        pytorch_versions=_distinct([m.pytorch_version for m in metas]),
        nccl_versions=_distinct([m.nccl_version for m in metas]),
        backends=_distinct([m.backend for m in metas]),
        files=tuple(trace.path for trace in run),
        skipped=tuple((s.path, s.reason) for s in skipped),
        ignored=ignored,
        warnings=(*rank_warnings(run), *(c.warning for c in choices if c.warning), *warnings),
        step_sources=_distinct([choice.source for choice in choices]),
        base_times_ns=tuple(trace.meta.base_time_ns for trace in run),
        timelines=_distinct([trace.meta.timeline for trace in run]),
    )
