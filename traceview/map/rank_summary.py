"""The map of the pipeline: one rank's parsed trace in, a compact `RankSummary` out, the trace then freed.

A summary holds every per-rank result the cross-rank reduce (`traceview.reduce.reduce`) needs, and nothing
whose size grows with the trace's events: the per-step time budget, the communication kernels linked to their
calls, the step windows, one launch mark per communication kernel (the end of the compute before it, for
launch gaps), the idle-gap totals with the longest gaps, a bounded timeline, the compute time and duration
sketch of each kernel class (for comparisons), the kernels analysis's bounded frames
(`traceview.kernels.parts`), the critical path's per-step rows, bounded holders and one open node per
collective row (`traceview.critical_path`), and a compact host-side trace (step marks, the FLOPs of each
step, the first shape-bearing operator of each step) on which the model's inputs are read. Times are on the
rank's own time base; `shifted` moves a summary onto the run's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field, replace
from typing import Any

import polars as pl

from traceview.bubbles.gaps import (
    LARGEST_GAPS,
    LISTED_GAP_MIN_US,
    gap_steps_plan,
    gap_totals_plan,
    idle_gaps_plan,
)
from traceview.budget.time_budget import classified_events, step_budget_plan, with_graph_steps_plan
from traceview.collectives.calls import call_counts, launches
from traceview.collectives.comm_events import comm_events
from traceview.collectives.kernels import comm_kernels
from traceview.collectives.tables import suspected_comm_kernels
from traceview.core.engine import in_memory
from traceview.core.records import record
from traceview.critical_path.nodes import empty_nodes
from traceview.critical_path.sweep import PATH_HOST_COLUMNS, critical_path_plans, path_optimizations
from traceview.dimensions.group_time import group_phases, group_step_time
from traceview.distributions.samples import batch_class_parts
from traceview.events.host_timeline import on_host_timeline
from traceview.events.kernel_names import KernelPattern
from traceview.kernels.classes import clipped_events
from traceview.kernels.parts import KernelParts, batch_kernel_parts, classed_events
from traceview.map.compact import compact_inputs, compacted
from traceview.map.own_parts import OwnParts, extent, own_parts
from traceview.model.stacking import by_rank, distinct_rank_rounds, row_offsets, stacked, stacked_rows
from traceview.model.trace import RankTrace, Run
from traceview.moe.splits import batch_splits
from traceview.steps.windows import WINDOW_SCHEMA, StepChoice, chosen_windows_of
from traceview.timeline.step_view import rank_segments

TIME_COLUMNS: dict[str, tuple[str, ...]] = {
    "windows": ("window_start_us", "window_end_us"),
    "per_step": ("window_start_us", "window_end_us"),
    "kernels": ("start_us", "end_us", "call_start_us", "call_end_us", "launch_us"),
    "launch_marks": ("end_us",),
    "top_gaps": ("start_us", "end_us", "next_launch_us"),
    "segments": ("start_us", "end_us"),
    "first_launches": ("host_start_us", "first_launch_us"),
    "extent": ("trace_start_us", "trace_end_us"),
    "splits": ("start_us",),
    "path_nodes": ("entry_us", "exit_us"),
}
"""The frames of a summary that hold times on the rank's clock, and their time columns (durations excluded).
"""


@record
class RankSummary:
    """What the reduce needs of one rank (module docstring). `trace` is the compact trace: metadata, steps and
    the few host rows the model's inputs read; no device events."""

    trace: RankTrace
    windows: pl.DataFrame
    per_step: pl.DataFrame
    kernels: pl.DataFrame
    launch_marks: pl.DataFrame
    gap_steps: pl.DataFrame
    gap_causes: pl.DataFrame
    top_gaps: pl.DataFrame
    segments: pl.DataFrame
    segment_counts: pl.DataFrame
    kernel_classes: pl.DataFrame
    class_sketches: pl.DataFrame
    suspects: pl.DataFrame
    step_choice: StepChoice
    first_launches: pl.DataFrame
    calls: pl.DataFrame
    extent: pl.DataFrame
    group_time: pl.DataFrame  # per (step, group): comm and exposed time (traceview.dimensions.group_time)
    group_phase: pl.DataFrame  # per (step, group, collective): calls, and those early in the step's compute
    splits: pl.DataFrame  # its all-to-all calls with their split sizes (traceview.moe.splits)
    path_steps: pl.DataFrame = field(default_factory=pl.DataFrame)  # per step: the critical path's categories
    path_holders: pl.DataFrame = field(default_factory=pl.DataFrame)  # its bounded holders (critical_path)
    path_nodes: pl.DataFrame = field(default_factory=empty_nodes)  # per collective: its open node on the path
    path_unlinked: bool = False  # whether no launch tied its host rows to device work (every thread read)
    path_syncs: tuple[int, int] = (0, 0)  # its recorded CUDA sync events: host waits, cross-stream waits
    kernel_parts: KernelParts = field(default_factory=KernelParts.empty)  # no times on the rank's clock

    @property
    def rank(self) -> int:
        """The rank summarised."""
        return self.trace.rank

    def shifted(self, delta_us: float) -> RankSummary:
        """The same summary with every time moved by `delta_us` (onto the run's time base)."""
        if delta_us == 0:
            return self
        moved = {
            name: getattr(self, name).with_columns(pl.col(c) + delta_us for c in columns)
            for name, columns in TIME_COLUMNS.items()
        }
        return replace(self, trace=self.trace.shifted(delta_us), **moved)


@in_memory
def summarize(
    trace: RankTrace, comm_patterns: Sequence[KernelPattern] = (), ranks_in_run: int = 1
) -> RankSummary:
    """The map: every per-rank result of `trace` (on its own time base); the trace itself is not kept.
    `ranks_in_run` shares the timeline's segment budget among the ranks (`timeline.rank_segments`). A rank
    without device activity is summarised on its host timeline (`traceview.events.host_timeline`)."""
    return summarize_many([trace], comm_patterns, ranks_in_run)[0]


@in_memory
def summarize_many(
    traces: Sequence[RankTrace], comm_patterns: Sequence[KernelPattern] = (), ranks_in_run: int = 1
) -> list[RankSummary]:
    """`summarize` of each trace, in order, the ranks' frames stacked so that each analysis runs once for
    all of them (a query costs its call, not its rows: many small ranks cost about what one does). Each rank
    stays on its own clock; traces claiming a rank already in the batch are summarised in another round."""
    return summarize_taken(list(traces), comm_patterns, ranks_in_run)


@in_memory
def summarize_taken(
    traces: list[RankTrace], comm_patterns: Sequence[KernelPattern] = (), ranks_in_run: int = 1
) -> list[RankSummary]:
    """`summarize_many`, the traces taken out of `traces` (the list is left empty): where the caller keeps
    no other reference, nothing holds a trace but its analyses, which free its columns as they finish with
    them (the map's own batches: a large rank's host rows are gone before its budget is cut)."""
    pending = dict(enumerate(traces))
    rounds = distinct_rank_rounds(traces)
    traces.clear()
    done: dict[int, RankSummary] = {}
    for positions in rounds:
        summaries = _summarized([pending.pop(i) for i in positions], comm_patterns, ranks_in_run)
        done.update(zip(positions, summaries, strict=True))
    return [done[i] for i in range(len(done))]


def _summarized(
    traces: Sequence[RankTrace], comm_patterns: Sequence[KernelPattern], ranks_in_run: int
) -> list[RankSummary]:
    traces = [on_host_timeline(trace) for trace in traces]
    batch = Run(ranks=tuple(traces), own_clocks=True)
    ranks = [trace.rank for trace in traces]
    events = classified_events(batch, comm_patterns)
    offsets = row_offsets(traces)
    cpu, steps = stacked_rows(traces, lambda t: t.cpu), stacked_rows(traces, lambda t: t.steps)  # once
    chosen = chosen_windows_of(traces, [compact_inputs(cpu), *([] for _ in traces[1:])])
    windows = stacked([c[1] for c in chosen], WINDOW_SCHEMA)
    launch_rows = launches(batch)
    kernels = comm_kernels(batch, events, launch_rows)
    calls = call_counts(batch)
    events, host_launches = comm_events(events, kernels)  # communication wherever it runs, counted once
    own = own_parts(traces, steps, cpu, (events, kernels, launch_rows), chosen[0][2])
    launch_rows = pl.concat([launch_rows, host_launches], how="vertical_relaxed")
    events_of = by_rank(events, ranks)
    classed, names = classed_events(events)
    kernel_parts, class_parts = _kernel_parts(traces, classed, names, windows, (cpu, steps))
    splits = _splits(own, cpu, windows, ranks)
    compact = [compacted(trace, rows) for trace, rows in zip(traces, _compact_rows(own, ranks), strict=True)]
    extents = [extent(trace) for trace in traces]
    path_host = pl.DataFrame([cpu.get_column(c) for c in PATH_HOST_COLUMNS])  # no query; the rest freed
    syncs = stacked_rows(traces, lambda t: t.syncs)
    del batch, traces, cpu, steps  # the parsed traces freed (their caller keeps none): the rest reads events
    path = _critical_path(classed, path_host, windows, kernels, syncs)
    del classed, path_host, syncs  # the host rows' last reader
    path_steps, path_holders, path_nodes, unlinked_ranks, synced = path
    per_step, gap_steps, gap_causes, top_gaps = _budget_and_gaps(events, windows, launch_rows, own.graphs)
    del launch_rows
    segments, counts = rank_segments(events, windows, ranks_in_run)
    keyed = {
        "windows": windows,
        "per_step": per_step,
        "kernels": _event_rows_per_rank(kernels, offsets),
        "launch_marks": own.launch_marks,
        "first_launches": own.first_launches,
        "gap_steps": gap_steps,
        "gap_causes": gap_causes,
        "top_gaps": top_gaps,
        "segments": segments,
        "segment_counts": counts,
        "calls": calls,
        "group_time": group_step_time(events, kernels, windows),
        "group_phase": group_phases(events, kernels, windows),
        "path_steps": path_steps,
        "path_holders": path_holders,
        "path_nodes": path_nodes,
    }
    split = {name: by_rank(frame, ranks) for name, frame in keyed.items()}
    per_rank: dict[str, Sequence[Any]] = {"kernel_classes": [c[0] for c in class_parts]}
    per_rank |= {"class_sketches": [c[1] for c in class_parts]}
    per_rank |= {"suspects": _suspects(events, events_of), "step_choice": [c[0] for c in chosen]}
    per_rank |= {"extent": extents, "kernel_parts": kernel_parts, "splits": splits}
    per_rank |= {"path_unlinked": [rank in unlinked_ranks for rank in ranks], **split}
    per_rank |= {"path_syncs": [synced.get(rank, (0, 0)) for rank in ranks]}
    return [
        RankSummary(trace=compact[i], **{k: v[i] for k, v in per_rank.items()}) for i in range(len(compact))
    ]


def _critical_path(
    classed: pl.DataFrame,
    host: pl.DataFrame,
    windows: pl.DataFrame,
    kernels: pl.DataFrame,
    syncs: pl.DataFrame,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, set[int], dict[int, tuple[int, int]]]:
    """The batch's critical path (`critical_path_plans`): per-step rows, holders, the collectives' open
    nodes, the ranks not linked, and the recorded sync events per rank (host waits, cross-stream waits)."""
    plans = critical_path_plans(classed, host, windows, kernels, syncs)
    optimizations = path_optimizations(classed, host)
    steps, holders, unlinked, nodes, syncs_read = pl.collect_all(plans, optimizations=optimizations)
    synced = {row[0]: (row[1], row[2]) for row in syncs_read.iter_rows()}
    return steps, holders, nodes, set(unlinked.get_column("rank").to_list()), synced


def _splits(own: OwnParts, cpu: pl.DataFrame, windows: pl.DataFrame, ranks: Sequence[int]) -> list[Any]:
    """Each rank's all-to-all calls with their split sizes (`traceview.moe.splits.batch_splits`), from the
    batch's host rows and windows."""
    return by_rank(batch_splits(own.alltoall_calls, cpu, windows), ranks)


def _compact_rows(own: OwnParts, ranks: Sequence[int]) -> list[pl.DataFrame]:
    """Each rank's compact host rows (`traceview.map.compact.compact_cpu`), without `rank`."""
    rows = by_rank(own.compact_cpu, ranks)
    for rank_rows in rows:
        rank_rows.drop_in_place("rank")  # no query (`drop` runs one a rank)
    return rows


def _event_rows_per_rank(kernels: pl.DataFrame, offsets: dict[int, int]) -> pl.DataFrame:
    """`kernels` with each `event_row` counted among its own rank's events, not the batch's."""
    if not any(offsets.values()) or kernels.height == 0:
        return kernels
    offset = pl.col("rank").replace_strict(offsets, return_dtype=pl.Int64)
    return kernels.with_columns(pl.col("event_row") - offset)


def _suspects(events: pl.DataFrame, events_of: Sequence[pl.DataFrame]) -> list[pl.DataFrame]:
    """Per rank, its kernels suspected of communication (`suspected_comm_kernels`), looked for in each rank
    only when the batch has any."""
    found = suspected_comm_kernels(events)
    if found.height == 0 or len(events_of) == 1:
        return [found] * len(events_of)
    return [suspected_comm_kernels(rank_events) for rank_events in events_of]


def _budget_and_gaps(
    events: pl.DataFrame, windows: pl.DataFrame, launch_rows: pl.DataFrame, graphs: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The batch's per-step budget with its graph steps, and of its idle gaps (`idle_gaps`, read once) the
    per-step totals, the per-cause totals and the longest (`_top_gaps`): one query."""
    gaps = idle_gaps_plan(events, windows, launch_rows).cache()
    per_step = with_graph_steps_plan(step_budget_plan(events, windows), graphs)
    plans = [per_step, gap_steps_plan(gaps, windows), gap_totals_plan(gaps), _top_gaps(gaps)]
    budget, steps, causes, top = pl.collect_all(plans)
    return budget, steps, causes, top


def _top_gaps(gaps: pl.LazyFrame) -> pl.LazyFrame:
    """Per rank, its `LARGEST_GAPS` longest gaps of at least `LISTED_GAP_MIN_US` (then by start)."""
    order = ["rank", "dur_us", "start_us"]
    return (
        gaps.filter(pl.col("dur_us") >= LISTED_GAP_MIN_US)
        .sort(order, descending=[False, True, False], maintain_order=True)
        .filter(pl.int_range(pl.len()).over("rank") < LARGEST_GAPS)
    )


def _kernel_parts(
    traces: Sequence[RankTrace],
    classed: pl.DataFrame,
    names: pl.DataFrame,
    windows: pl.DataFrame,
    stacked_host: tuple[pl.DataFrame, pl.DataFrame],
) -> tuple[list[KernelParts], list[tuple[pl.DataFrame, pl.DataFrame]]]:
    """Per trace, its kernels-analysis parts and its kernel-class samples (`batch_class_parts`), from the
    batch's stacked events (`classed_events`), step windows and host rows and steps (`stacked_host`)."""
    clipped = clipped_events(classed, windows)  # the kernel classes of each step
    ranks = [trace.rank for trace in traces]
    parts = batch_kernel_parts(traces, classed, names, clipped, windows, stacked_host)
    return parts, batch_class_parts(clipped, ranks)
