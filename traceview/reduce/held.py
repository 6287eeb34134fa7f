"""The run's summaries as the reduce holds them: folded, as they arrive, into one frame per kind.

A summary is a few dozen frames of a few rows each (`traceview.map.rank_summary.RankSummary`), and polars pays
a fixed overhead per frame and column: held one by one, the summaries of 256 copies of the 8.7 MB
`hta_nccl_data` rank take 0.24 MiB each in the parent; folded 16 at a time, about 0.10 MiB (docs/scaling.md).
`HeldSummaries` keeps each summary's compact trace and step choice, and folds its frames every `FOLD_EVERY`
summaries (one contiguous frame per kind), noting each frame's height, from which each row's summary (its
arrival index) is known. `release(order, shifts_us)` gives the frames as the reduce reads them: the summaries
of `order` (arrival indices: the ranks `make_run` kept, in rank order) one after another, each summary's rows
in their order, every other summary left out, each rank's times moved onto the run's time base. Nothing is
computed here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields

import polars as pl

from traceview.core.errors import TraceviewError
from traceview.core.frames import repeated, vstacked
from traceview.core.records import record
from traceview.kernels.parts import KernelParts
from traceview.map.rank_summary import TIME_COLUMNS, RankSummary
from traceview.model.trace import RankTrace
from traceview.steps.windows import StepChoice

FOLD_EVERY = 16
"""Summaries folded together: enough to make the per-frame overhead small, few enough to hold little."""
HELD = "_held"
"""The column tagging a folded row with its summary's arrival index."""
_POSITION, _ROW = "_position", "_row"


@record
class Stacked:
    """The frames of every summary, one above the other, on the run's time base."""

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
    first_launches: pl.DataFrame
    calls: pl.DataFrame
    extent: pl.DataFrame
    group_time: pl.DataFrame
    group_phase: pl.DataFrame
    splits: pl.DataFrame
    path_steps: pl.DataFrame
    path_holders: pl.DataFrame
    path_nodes: pl.DataFrame
    kernel_parts: KernelParts


SUMMARY_FRAMES = tuple(f.name for f in fields(Stacked) if f.name != "kernel_parts")
PART_FRAMES = tuple(f.name for f in fields(KernelParts))
FRAMES = SUMMARY_FRAMES + PART_FRAMES


@record
class HeldRank:
    """What the reduce reads of one summary besides its frames."""

    trace: RankTrace
    step_choice: StepChoice
    path_unlinked: bool = False
    path_syncs: tuple[int, int] = (0, 0)


def _frames_of(summary: RankSummary) -> list[pl.DataFrame]:
    """The summary's frames in the order `FRAMES` lists them."""
    parts = summary.kernel_parts
    return [getattr(summary, n) for n in SUMMARY_FRAMES] + [getattr(parts, n) for n in PART_FRAMES]


def _arrivals(heights: list[int]) -> pl.Series:
    """The arrival index of each row of frames of `heights` rows stacked (summary i's frame: `heights[i]`
    rows)."""
    return repeated(HELD, range(len(heights)), heights, pl.Int64)


class HeldSummaries:
    """Summaries added one at a time (`add`), their frames folded every `FOLD_EVERY` (module docstring)."""

    def __init__(self, summaries: Sequence[RankSummary] = ()) -> None:
        self.ranks: list[HeldRank] = []
        self._pending: list[RankSummary] = []
        self._blocks: dict[str, list[pl.DataFrame]] | None = {name: [] for name in FRAMES}
        self._heights: dict[str, list[int]] = {name: [] for name in FRAMES}
        for summary in summaries:
            self.add(summary)

    def __len__(self) -> int:
        return len(self.ranks)

    def add(self, summary: RankSummary) -> None:
        """Hold `summary` (its arrival index is the number held before it)."""
        if self._blocks is None:
            raise TraceviewError("internal: summaries added after the held ones were released")
        self.ranks.append(
            HeldRank(summary.trace, summary.step_choice, summary.path_unlinked, summary.path_syncs)
        )
        self._pending.append(summary)
        if len(self._pending) >= FOLD_EVERY:
            self._fold()

    def _fold(self) -> None:
        if not self._pending or self._blocks is None:
            return
        columns = [list(frames) for frames in zip(*map(_frames_of, self._pending), strict=True)]
        for name, frames in zip(FRAMES, columns, strict=True):
            self._blocks[name].append(vstacked(frames, rechunk=True))
            self._heights[name] += [frame.height for frame in frames]
        self._pending = []

    def release(self, order: Sequence[int], shifts_us: Sequence[float]) -> Stacked:
        """The frames of the summaries `order` names, in that order, rank `order[i]`'s times moved by
        `shifts_us[i]` (module docstring); one query per frame, run together. The held frames are handed over
        (released here): a second call is refused."""
        if self._blocks is None:
            raise TraceviewError("internal: the held summaries' frames were already released")
        self._fold()
        blocks, self._blocks = self._blocks, None
        ranks = [self.ranks[i].trace.rank for i in order]
        positions = pl.col(HELD).replace_strict(list(order), list(range(len(order))), default=None)
        shift = pl.col("rank").replace_strict(ranks, list(shifts_us), default=0.0, return_dtype=pl.Float64)
        queries = []
        for name in FRAMES:
            query = (
                vstacked(blocks.pop(name))
                .with_columns(_arrivals(self._heights[name]))
                .lazy()
                .with_row_index(_ROW)
                .with_columns(positions.alias(_POSITION))
                .filter(pl.col(_POSITION).is_not_null())
                .sort(_POSITION, _ROW)
                .drop(HELD, _POSITION, _ROW)
            )
            moved = TIME_COLUMNS.get(name, ()) if any(shifts_us) else ()
            queries.append(query.with_columns(pl.col(c) + shift for c in moved))
        frames = dict(zip(FRAMES, pl.collect_all(queries), strict=True))
        parts = KernelParts(**{name: frames.pop(name) for name in PART_FRAMES})
        return Stacked(**frames, kernel_parts=parts)
