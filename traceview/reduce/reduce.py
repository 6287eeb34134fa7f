"""The reduce of the pipeline: every rank's `RankSummary` in, the run's `RunAnalysis` out.

Summaries are moved onto one time base (the smallest `baseTimeNanoseconds` of the run, as
`traceview.model.time_base`), stacked, and handed to the cross-rank analyses: matching, clock alignment,
stragglers, bubbles, the prediction and the verdict. Nothing here reads a device event: what the reduce needs
of one was kept by the map (`traceview.map.rank_summary`), so memory grows with the summaries (collectives and
steps), not with the traces.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import polars as pl

from traceview.across_ranks.analysis import CrossRank, run_cross_rank
from traceview.across_ranks.clocks import far_clock_warnings, rank_offsets, shift_to_reference
from traceview.across_ranks.matching import group_expr
from traceview.across_ranks.peer_sizes import with_peer_sizes
from traceview.bubbles.gaps import BubbleAnalysis, bubbles_from_parts
from traceview.bubbles.pipeline_bubble import P2P_COLLECTIVES, p2p_kernels
from traceview.budget.time_budget import TimeBudget, budget_of
from traceview.collectives.groups import config_groups
from traceview.collectives.tables import (
    CollectiveAnalysis,
    collective_tables,
    merged_suspects,
    with_transfer_busbw,
)
from traceview.core.engine import in_memory
from traceview.core.errors import ParseWarning
from traceview.critical_path.analysis import CriticalPath, call_waits, critical_path, step_waits
from traceview.dimensions.analysis import Dimensions, analyze_dimensions
from traceview.distributions.samples import Distributions, distributions_from_parts
from traceview.kernels.analysis import kernels_from_parts
from traceview.map.rank_summary import RankSummary
from traceview.model.time_base import trace_time_base
from traceview.model.trace import RankTrace, Run, SkippedInput
from traceview.moe.analysis import moe_balance
from traceview.nccl.inputs import read_logs
from traceview.nccl.inspector import InspectorJoin, join_inspector, read_inspector_files
from traceview.nccl.join import NcclJoin, join_nccl, log_hosts
from traceview.options.run import RunOptions
from traceview.prediction.gamma import Prediction
from traceview.reduce._pricing import priced
from traceview.reduce.held import HeldRank, HeldSummaries, Stacked
from traceview.reduce.results import RunAnalysis, RunHeader, run_header, with_identity, with_stated_facts
from traceview.replay.analysis import Replay, replay_run
from traceview.replay.predicted import predicted_gamma
from traceview.roofline.analysis import Roofline, communication_roofline
from traceview.steps.windows import StepChoice
from traceview.timeline.drilldown import drilldown
from traceview.timeline.step_view import Timeline, timeline_from_segments
from traceview.verdict.facts import Measured, RunShape, facts_of
from traceview.verdict.headline import verdict
from traceview.verdict.recommend import recommend

if TYPE_CHECKING:  # imported where a run names dumps (`_flight_recorder`)
    from traceview.flight_recorder.analysis import HangAnalysis


def compact_run(
    traces: Sequence[RankTrace],
    skipped: Sequence[SkippedInput] = (),
    source: str = "",
    extra_warnings: Sequence[ParseWarning] = (),
) -> Run:
    """A `Run` of the summaries' compact traces: metadata, steps and the host rows the model reads."""
    return Run(
        ranks=tuple(traces),
        skipped=tuple(skipped),
        source=source,
        extra_warnings=tuple(extra_warnings),
    )


def _critical_path(
    frames: Stacked, budget: TimeBudget, crossrank: CrossRank, ranks: Sequence[HeldRank]
) -> CriticalPath:
    """The critical path: the map's rows, the peers' waits resolved per matched call from the map's open
    nodes (`call_waits`, `step_waits`), the medians over the budget's counted steps."""
    per_step = budget.per_step
    waits, per_call = pl.DataFrame(), pl.DataFrame()
    if crossrank.calls.height:
        per_call = call_waits(crossrank.calls, frames.path_nodes)
        waits = step_waits(per_call)
    counted = per_step.filter(~pl.col("graph_capture")) if "graph_capture" in per_step.columns else None
    unlinked = [r.trace.rank for r in ranks if r.path_unlinked]
    syncs = {r.trace.rank: r.path_syncs for r in ranks}
    return critical_path(frames.path_steps, frames.path_holders, waits, unlinked, counted, syncs, per_call)


def _bubbles(
    frames: Stacked, kernels: pl.DataFrame, virtual_stages: int, path: CriticalPath | None = None
) -> BubbleAnalysis:
    """The bubble analysis from the stacked gap parts, |C| per (rank, step) and the P2P kernels."""
    compute = frames.per_step.select("rank", "step", pl.col("comp_us").alias("compute_us"))
    return bubbles_from_parts(
        frames.top_gaps,
        frames.gap_steps,
        frames.gap_causes,
        compute,
        frames.windows,
        p2p_kernels(kernels, pl.DataFrame()),
        virtual_stages,
        path,
        _other_exposed(frames.group_time, kernels),
    )


def _other_exposed(group_time: pl.DataFrame, kernels: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, step): the exposed communication of the groups that run no point-to-point call (the
    pipeline bubble leaves it out: a DP all-reduce's wait is not the pipeline's idle)."""
    pipeline = kernels.filter(pl.col("collective").is_in(P2P_COLLECTIVES)).select(group_expr().alias("group"))
    return (
        group_time.join(pipeline.unique(), on="group", how="anti")
        .group_by("rank", "step")
        .agg(pl.col("exposed_us").sum().alias("other_exposed_us"))
    )


def _timeline(frames: Stacked, offsets: pl.DataFrame, per_step: pl.DataFrame) -> Timeline:
    """The timeline from every rank's segments, moved onto the aligned clock."""
    return timeline_from_segments(
        shift_to_reference(frames.segments, offsets, ("start_us", "end_us")),
        frames.segment_counts,
        shift_to_reference(frames.windows, offsets, ("window_start_us", "window_end_us")),
        per_step,
    )


def _collectives(frames: Stacked) -> CollectiveAnalysis:
    """The collective tables of every rank's kernels, with the suspected kernel names of every rank."""
    return replace(collective_tables(frames.kernels), suspected_comm_kernels=merged_suspects(frames.suspects))


def _sized_by_peers(collectives: CollectiveAnalysis, crossrank: CrossRank) -> CollectiveAnalysis:
    """The collectives with the calls their own traces leave unsized sized by their matched peers
    (`traceview.across_ranks.peer_sizes`), the tables rebuilt from them."""
    kernels = with_peer_sizes(collectives.kernels, crossrank.calls)
    if kernels is collectives.kernels:
        return collectives
    return replace(collective_tables(kernels), suspected_comm_kernels=collectives.suspected_comm_kernels)


def _inspector(
    options: RunOptions, collectives: CollectiveAnalysis, world_size: int | None
) -> InspectorJoin | None:
    """NCCL Inspector's records joined to the collectives, when Inspector output was given."""
    if not options.inspector_files:
        return None
    records, skipped = read_inspector_files(options.inspector_files)
    return join_inspector(collectives.kernels, records, options.inspector_files, skipped, world_size)


def _nccl(options: RunOptions, collectives: CollectiveAnalysis, run: Run) -> NcclJoin | None:
    """The NCCL logs joined to the run, when any were given or found (a log that cannot be read is
    skipped)."""
    logs, skipped = read_logs(options.nccl_logs)
    if not (logs or skipped):
        return None
    return join_nccl(collectives, logs, skipped, run)


def _flight_recorder(options: RunOptions) -> HangAnalysis | None:
    """The job's Flight Recorder dumps read together, when any were given (`--flight-recorder`, run.json)."""
    if not options.flight_recorder:
        return None
    from traceview.flight_recorder.job import hang_job

    return hang_job(options.flight_recorder)


def _cross_rank(
    run: Run,
    frames: Stacked,
    kernels: pl.DataFrame,
    budget: TimeBudget,
    options: RunOptions,
    nccl: NcclJoin | None,
) -> CrossRank:
    """Matching, clocks, skew and stragglers; hosts from the traces, the NCCL logs, then the ranks
    per host."""
    hosts = log_hosts(options.rank_hosts, nccl)
    return run_cross_rank(
        run,
        kernels,
        frames.launch_marks,
        frames.windows,
        budget,
        options.ranks_per_host,
        hosts,
        options.ranks_per_host_source,
        frames.first_launches,
    )


def _dimensions(
    run: Run,
    frames: Stacked,
    parts: tuple[CollectiveAnalysis, CrossRank, Prediction, BubbleAnalysis],
    options: RunOptions,
) -> Dimensions:
    """The parallelism dimensions of the run: groups classified, their cost per step and their volumes."""
    collectives, crossrank, prediction, bubbles = parts
    worlds = [trace.meta.world_size for trace in run if trace.meta.world_size]
    micro = bubbles.pipeline.get_column("micro_batches").drop_nulls() if bubbles.pipeline.height else None
    return analyze_dimensions(
        collectives.kernels,
        config_groups(run),
        frames.windows,
        (frames.group_time, frames.group_phase),
        crossrank,
        prediction,
        max(worlds) if worlds else None,
        (options.layout, options.shape, options.virtual_stages),
        float(micro.median()) if micro is not None and micro.len() else None,  # type: ignore[arg-type]
    )


def _world(run: Run) -> int:
    """The world size the traces state (the largest), else the ranks read."""
    worlds = [trace.meta.world_size for trace in run if trace.meta.world_size]
    return max(worlds) if worlds else len(run)


def _header(
    run: Run,
    choices: Sequence[StepChoice],
    shifts_us: tuple[float, ...],
    parts: tuple[CollectiveAnalysis, TimeBudget, CrossRank],
    options: RunOptions,
) -> RunHeader:
    """The run's header: its facts, identity (job, commit, time, label), what run.json states, its
    warnings."""
    collectives, budget, crossrank = parts
    header = replace(
        run_header(run, choices, collectives.warnings),
        manifest=None if options.manifest is None else str(options.manifest),
        base_shifts_us=shifts_us,
    )
    header = with_identity(header, run, budget, options.facts)
    header = with_stated_facts(header, crossrank.hosts, options.facts)
    return replace(header, warnings=(*header.warnings, *far_clock_warnings(crossrank.clocks)))


def reduce_summaries(
    summaries: Sequence[RankSummary],
    options: RunOptions | None = None,
    skipped: Sequence[SkippedInput] = (),
    source: str = "",
    extra_warnings: Sequence[ParseWarning] = (),
) -> RunAnalysis:
    """Every cross-rank analysis of the run from its ranks' summaries (in rank order; of equal ranks, in the
    order given)."""
    order = sorted(range(len(summaries)), key=lambda i: summaries[i].rank)
    return reduce_held(HeldSummaries(summaries), order, options, skipped, source, extra_warnings)


def _distributions(frames: Stacked, collectives: CollectiveAnalysis, crossrank: CrossRank) -> Distributions:
    """The samples compare and trend read, from the stacked kernel parts and the matched instances."""
    return distributions_from_parts(
        frames.kernel_classes, frames.class_sketches, collectives.kernels, crossrank.instances
    )


def _replay(
    run: Run,
    frames: Stacked,
    found: tuple[CollectiveAnalysis, CrossRank, TimeBudget, Prediction | None, CriticalPath],
    options: RunOptions,
) -> Replay | None:
    """The run's skeletons replayed, as recorded and under each lever (`traceview.replay`)."""
    collectives, crossrank, budget, prediction, path = found
    lanes = (frames.path_nodes, path.per_step)
    return replay_run(crossrank, collectives.kernels, budget, prediction, _world(run), options.levers, lanes)


def _roofline(dimensions: Dimensions | None, prediction: Prediction | None, budget: TimeBudget) -> Roofline:
    """The communication roofline of the run's dimensions at its median step and exposed communication."""
    medians = budget.run_median
    return communication_roofline(
        dimensions, prediction, medians.get("step_us"), medians.get("exposed_comm_us")
    )


def _shape(header: RunHeader, frames: Stacked, ordered: Sequence[HeldRank]) -> RunShape:
    """What the run is beyond its figures (`RunShape`): its ranks read with gradients off among them."""
    grad_off = sum(r.trace.meta.grad_mode == "off" for r in ordered)
    return RunShape(header.world_size, frames.calls, header.step_sources, frames.extent, grad_off)


@in_memory
def reduce_held(
    held: HeldSummaries,
    order: Sequence[int],
    options: RunOptions | None = None,
    skipped: Sequence[SkippedInput] = (),
    source: str = "",
    extra_warnings: Sequence[ParseWarning] = (),
) -> RunAnalysis:
    """Every cross-rank analysis of the run from the held summaries `order` names (arrival indices, in rank
    order; `traceview.reduce.held`); their frames are released to it."""
    options = options or RunOptions()
    ordered = [held.ranks[i] for i in order]
    base = trace_time_base([r.trace for r in ordered])
    traces = [r.trace.shifted(shift) for r, shift in zip(ordered, base.shifts_us, strict=True)]
    run = compact_run(traces, skipped, source, extra_warnings)
    frames = held.release(order, base.shifts_us)
    collectives = _collectives(frames)
    nccl = _nccl(options, collectives, run)
    crossrank = _cross_rank(run, frames, collectives.kernels, budget_of(frames.per_step), options, nccl)
    collectives = _sized_by_peers(collectives, crossrank)
    budget = budget_of(frames.per_step, crossrank.transfer)
    collectives = with_transfer_busbw(collectives, crossrank.calls)
    prediction, links = priced(run, frames, (collectives, budget, crossrank), options, nccl)
    path = _critical_path(frames, budget, crossrank, ordered)
    bubbles = _bubbles(frames, collectives.kernels, options.virtual_stages, path)
    dimensions = _dimensions(run, frames, (collectives, crossrank, prediction, bubbles), options)
    moe = moe_balance(frames.splits, crossrank)
    roofline = _roofline(dimensions, prediction, budget)
    replay = _replay(run, frames, (collectives, crossrank, budget, prediction, path), options)
    header = _header(
        run, [r.step_choice for r in ordered], base.shifts_us, (collectives, budget, crossrank), options
    )
    kernels = kernels_from_parts([frames.kernel_parts], crossrank.stragglers)
    shape = _shape(header, frames, ordered)
    found = (budget, crossrank, collectives, prediction, nccl, header.timelines, shape, kernels, dimensions)
    facts = facts_of(Measured(*found, moe, links, bubbles, path, predicted_gamma(prediction, replay), replay))
    return RunAnalysis(
        header=header,
        budget=budget,
        recommendations=(advice := recommend(facts)),
        verdict=verdict(facts, advice.items),  # the verdict reads the advice's ranking, never ranks again
        options=options,
        timeline=_timeline(frames, rank_offsets(crossrank.hosts, crossrank.clocks), budget.per_step),
        crossrank=crossrank,
        collectives=collectives,
        bubbles=bubbles,
        drilldown=drilldown(budget.per_step, crossrank.calls, collectives.per_collective),
        nccl=nccl,
        inspector=_inspector(options, collectives, header.world_size),
        prediction=prediction,
        distributions=_distributions(frames, collectives, crossrank),
        kernels=kernels,
        dimensions=dimensions,
        moe=moe,
        roofline=roofline,
        critical_path=path,
        links_measured=links,
        flight_recorder=_flight_recorder(options),
        replay=replay,
    )
