"""One call from a `Run` to every result the renderers show: `analyze(run, options) -> RunAnalysis`."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from traceview.bubbles import BubbleAnalysis, run_bubbles
from traceview.budget import TimeBudget, all_step_windows, classified_events, time_budget
from traceview.clocks import rank_offsets, shift_to_reference
from traceview.collective_tables import CollectiveAnalysis, analyze_collectives
from traceview.collective_tables import gate_figures as collective_gate_figures
from traceview.compare_distributions import Distributions, sample_distributions
from traceview.crossrank import CrossRank, add_transfer, run_cross_rank
from traceview.kernel_names import user_patterns
from traceview.model import Run
from traceview.nccl import NcclLog
from traceview.nccl_join import NcclJoin, flag_verdict, join_nccl, log_hosts
from traceview.prediction import Prediction, predict
from traceview.prediction_inputs import PredictionOptions, with_nccl_overrides
from traceview.recommend import Recommendations, recommend
from traceview.timeline import Timeline, timeline
from traceview.verdict import Verdict, verdict


@dataclass(frozen=True)
class AnalysisOptions:
    """What the user can set; every field has the default a plain `traceview report RUN` uses."""

    comm_patterns: tuple[str, ...] = ()
    ranks_per_host: int | None = None  # hosts for clock alignment when traces name none (docs/metrics.md)
    rank_hosts: tuple[tuple[int, str], ...] = ()  # rank -> host, e.g. from NCCL logs; before ranks_per_host
    virtual_stages: int = 1  # V of the pipeline-bubble theory (P-1)/(M*V+P-1) (docs/metrics.md, "Bubbles")
    nccl_logs: tuple[NcclLog, ...] = ()  # parsed NCCL_DEBUG logs (traceview.nccl_join; docs/metrics.md)
    nccl_skipped: tuple[tuple[str, str], ...] = ()  # (path, reason) of NCCL logs that could not be read
    prediction: PredictionOptions = field(default_factory=PredictionOptions)  # alpha-beta model inputs


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class RunAnalysis:
    """Every result of one run; renderers read it and never compute."""

    header: RunHeader
    budget: TimeBudget
    verdict: Verdict
    options: AnalysisOptions = field(default_factory=AnalysisOptions)
    timeline: Timeline | None = None
    recommendations: Recommendations | None = None
    crossrank: CrossRank | None = None
    collectives: CollectiveAnalysis | None = None
    bubbles: BubbleAnalysis | None = None
    nccl: NcclJoin | None = None
    prediction: Prediction | None = None
    distributions: Distributions | None = None  # samples for `traceview compare` and `trend`

    def gate_figures(self) -> dict[str, float | None]:
        """The figures `--fail-on` can name: the run medians of the time budget (docs/metrics.md)."""
        figures = dict(self.budget.run_median)
        figures.update(self.crossrank.gate_figures() if self.crossrank else {})
        figures.update(collective_gate_figures(self.collectives))
        figures.update(self.bubbles.gate_figures() if self.bubbles else {})
        figures.update(self.prediction.gate_figures() if self.prediction else {})
        return figures


def _distinct(values: list[str]) -> tuple[str, ...]:
    return tuple(sorted({v for v in values if v}))


def run_header(run: Run) -> RunHeader:
    """The run's identity, gathered from every rank's metadata."""
    metas = [trace.meta for trace in run]
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
        skipped=tuple((s.path, s.reason) for s in run.skipped),
        warnings=tuple(str(w) for w in run.warnings),
        step_sources=_distinct([trace.step_source for trace in run]),
    )


def analyze(run: Run, options: AnalysisOptions | None = None) -> RunAnalysis:
    """Run every analysis on `run`."""
    options = options or AnalysisOptions()
    patterns = user_patterns(options.comm_patterns)
    events, windows = classified_events(run, patterns), all_step_windows(run)
    budget = time_budget(events, windows)
    collectives = analyze_collectives(run, events)
    nccl = (
        join_nccl(collectives, options.nccl_logs, options.nccl_skipped)
        if options.nccl_logs or options.nccl_skipped
        else None
    )
    crossrank = run_cross_rank(
        run,
        collectives.kernels,
        events,
        windows,
        budget,
        options.ranks_per_host,
        log_hosts(options.rank_hosts, nccl),
    )
    budget = add_transfer(budget, crossrank.transfer)
    offsets = rank_offsets(crossrank.hosts, crossrank.clocks)
    analysis = RunAnalysis(
        header=run_header(run),
        budget=budget,
        verdict=flag_verdict(verdict(budget.run_median), nccl),
        options=options,
        timeline=timeline(
            shift_to_reference(events, offsets, ("start_us", "end_us")),
            shift_to_reference(windows, offsets, ("window_start_us", "window_end_us")),
            budget.per_step,
        ),
        crossrank=crossrank,
        collectives=collectives,
        bubbles=run_bubbles(run, events, windows, collectives.kernels, options.virtual_stages),
        nccl=nccl,
        prediction=predict(
            run,
            collectives.kernels,
            windows,
            budget,
            crossrank,
            with_nccl_overrides(options.prediction, nccl),
            options.ranks_per_host,
        ),
        distributions=sample_distributions(events, windows, collectives.kernels),
    )
    return replace(analysis, recommendations=recommend(analysis))
