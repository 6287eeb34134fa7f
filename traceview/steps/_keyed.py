"""The queries of `traceview.steps.windows` for a batch of ranks, keyed by `rank`: the traces' frames stacked
one above the other (`traceview.model.stacking`), each query written once for the whole batch (a query costs
its call, not its rows), each rank's answer read from its own rows.

Every step is per rank: sorts put `rank` first, groups and window expressions are by `rank`, the launches'
steps are matched `by="rank"`. The device busy times are left as one row per interval (`busy_rows`), summed
per rank here (`summed`) on the rank's own slice, so that a rank's sum adds its terms in the order it does
alone, to the last bit.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import polars as pl

from traceview.core.intervals import clipped
from traceview.core.records import record
from traceview.model.stacking import by_rank, stacked_plan
from traceview.model.trace import RankTrace

WHOLE_TRACE = -1
WINDOW_SCHEMA = {
    "rank": pl.Int64,
    "step": pl.Int64,
    "window_start_us": pl.Float64,
    "window_end_us": pl.Float64,
}
SOURCES = ("gpu", "cpu", "none")
"""The step sources, in the order `window_rows` puts their windows."""
_RANK = pl.col("rank")
_INTERVAL = ["rank", "start_us", "end_us"]


@record
class Stacked:
    """A batch's frames stacked with `rank`, as lazy plans: the step candidates (`RankTrace.steps`), the
    device events (`rank`, `correlation`, `start_us`, `end_us`) and the host events (`rank`, `kind`,
    `correlation`, `start_us`)."""

    ranks: list[int]
    steps: pl.LazyFrame
    gpu: pl.LazyFrame
    cpu: pl.LazyFrame

    @staticmethod
    def of(traces: Sequence[RankTrace]) -> Stacked:
        """The frames of `traces` (distinct ranks) stacked, rank by rank (no query)."""
        gpu = stacked_plan(traces, lambda trace: trace.gpu[["correlation", "start_us", "end_us"]])
        cpu = stacked_plan(traces, lambda trace: trace.cpu[["kind", "correlation", "start_us"]])
        steps = stacked_plan(traces, lambda trace: trace.steps)
        return Stacked([trace.rank for trace in traces], steps, gpu, cpu)

    def candidates(self, source: str, ranks: Collection[int] | None = None) -> pl.LazyFrame:
        """The step candidates of `source` (of `ranks` only, when given)."""
        chosen = pl.col("source") == source
        return self.steps.filter(chosen if ranks is None else chosen & _RANK.is_in(list(ranks)))

    def events(self, ranks: Collection[int]) -> pl.LazyFrame:
        """The device events of `ranks`: `rank`, `start_us`, `end_us`."""
        return self.gpu.filter(_RANK.is_in(list(ranks))).select(_INTERVAL)


def event_steps(stack: Stacked) -> pl.LazyFrame:
    """Each device event's CPU step (by its launch; `traceview.steps.windows.device_event_steps`), columns
    `rank`, `correlation`, `start_us`, `end_us`, `step`, sorted by rank and launch time."""
    launches = (
        stack.cpu.filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null())
        .select("rank", "correlation", pl.col("start_us").alias("launch_us"))
        .unique(["rank", "correlation"], keep="first")
    )
    steps = (
        stack.candidates("cpu")
        .sort("rank", "start_us", maintain_order=True)
        .select("rank", "step", pl.col("start_us").alias("step_start"), pl.col("end_us").alias("step_end"))
    )
    return (
        stack.gpu.join(launches, on=["rank", "correlation"], how="left", maintain_order="left")
        .with_columns(pl.coalesce("launch_us", "start_us").alias("at_us"))
        .pipe(rank_sorted, len(stack.ranks) == 1, "at_us")
        .join_asof(steps, left_on="at_us", right_on="step_start", by="rank", check_sortedness=False)
        .filter(pl.col("step").is_not_null() & (pl.col("at_us") <= pl.col("step_end")))
        .select("rank", "correlation", "start_us", "end_us", "step")
    )


_REACH = pl.col("end_us").cum_max().shift(1).over("rank")
_UNCOVERED = (
    pl.col("end_us") - pl.max_horizontal(pl.col("start_us"), _REACH.fill_null(pl.col("start_us")))
).clip(lower_bound=0.0)
"""Per interval (sorted by rank and start): the part of it no earlier interval of its rank covers."""
_NEW_SEGMENT = (pl.col("start_us") > _REACH).fill_null(True).cast(pl.Int64).cum_sum()


def rank_sorted(frame: pl.LazyFrame, one_rank: bool, *by: str) -> pl.LazyFrame:
    """`frame` sorted by rank, then `by`, stably; the rows of `one_rank` by `by` alone (the same order, at
    about half the cost of a sort on two keys)."""
    return frame.sort(*by, maintain_order=True) if one_rank else frame.sort("rank", *by, maintain_order=True)


def busy_rows(intervals: pl.LazyFrame, one_rank: bool, *ties: str) -> pl.LazyFrame:
    """The part of each interval (`rank`, `start_us`, `end_us`) that no earlier one of its rank covers, as
    `rank`, `busy_us`, sorted by rank and start (then by `ties`, else kept in their order; `one_rank`: of one
    rank): a rank's device busy time is the sum of its rows (`summed`); the terms of
    `traceview.core.intervals.union_length`."""
    ordered = rank_sorted(intervals.select(_INTERVAL), one_rank, "start_us", *ties)
    return ordered.select("rank", _UNCOVERED.alias("busy_us"))


def covered_rows(stack: Stacked, ranks: Collection[int], single: Collection[int]) -> pl.LazyFrame:
    """`busy_rows` of the device events of `ranks` inside the union of their GPU step annotations: the
    events clipped to each rank's merged annotations (`traceview.core.intervals.clipped`), or, for the
    ranks `single` (one annotation), to it directly."""
    several = [rank for rank in ranks if rank not in single]
    parts = [_clipped_to_one(stack, single)] if single else []
    if several:
        parts.append(clipped(stack.events(several), _merged_annotations(stack, several), ["rank"]))
    return busy_rows(pl.concat(parts), len(stack.ranks) == 1, "end_us")


def _clipped_to_one(stack: Stacked, ranks: Collection[int]) -> pl.LazyFrame:
    window = stack.candidates("gpu", ranks).select("rank", pl.col("start_us").alias("_from"), "end_us")
    return (
        stack.events(ranks)
        .join(window.rename({"end_us": "_to"}), on="rank")
        .select(
            "rank",
            pl.max_horizontal("start_us", "_from").alias("start_us"),
            pl.min_horizontal("end_us", "_to").alias("end_us"),
        )
        .filter(pl.col("end_us") > pl.col("start_us"))
    )


def _merged_annotations(stack: Stacked, ranks: Collection[int]) -> pl.LazyFrame:
    return (
        stack.candidates("gpu", ranks)
        .select(_INTERVAL)
        .sort("rank", "start_us", maintain_order=True)
        .with_columns(_NEW_SEGMENT.alias("_segment"))
        .group_by("rank", "_segment")
        .agg(pl.col("start_us").min().alias("window_start_us"), pl.col("end_us").max().alias("window_end_us"))
        .drop("_segment")
    )


def evidence_rows(
    stack: Stacked, stepped: pl.LazyFrame, launched: list[int], own: list[int], single: Collection[int]
) -> pl.LazyFrame:
    """The `busy_rows` of the reference (of the events launched in the CPU steps, `stepped`, for the ranks
    `launched`; of every device event for the ranks `own`), then (`_covered` 1) those inside the GPU step
    annotations (`covered_rows`; `single`: the ranks with one), of each rank in turn."""
    events = stepped.filter(_RANK.is_in(launched)).select(_INTERVAL)
    reference = busy_rows(pl.concat([events, stack.events(own)]), len(stack.ranks) == 1)
    covered = covered_rows(stack, [*launched, *own], single)
    parts = [reference.with_columns(_NOT_COVERED), covered.with_columns(_COVERED)]
    return pl.concat(parts).sort("rank", "_covered", maintain_order=True)


_NOT_COVERED, _COVERED = (pl.lit(flag, pl.Int64).alias("_covered") for flag in (0, 1))


def busy_of(rows: pl.DataFrame, ranks: Sequence[int]) -> list[tuple[float, float]]:
    """Per rank of `ranks`, the device busy time of the reference and inside the GPU annotations: the sums of
    its `evidence_rows` (0 without rows), each on the rank's own slice, its terms added as alone."""
    busy = []
    for part in by_rank(rows.rechunk(), ranks):
        terms = part.get_column("busy_us")
        cut = part.height - int(part.get_column("_covered").sum())
        busy.append((float(terms.slice(0, cut).sum()), float(terms.slice(cut).sum())))
    return busy


def gpu_windows(stack: Stacked, ranks: Collection[int]) -> pl.LazyFrame:
    """The windows of the GPU step annotations of `ranks`, as written."""
    return stack.candidates("gpu", ranks).select(
        "rank", "step", pl.col("start_us").alias("window_start_us"), pl.col("end_us").alias("window_end_us")
    )


def cpu_windows(stepped: pl.LazyFrame, ranks: Collection[int]) -> pl.LazyFrame:
    """The windows of the CPU steps of `ranks` from their launches (`stepped`: `event_steps`): each ends
    at the end of its step's last device work, and starts where the step before ended (the first: at its
    first device activity)."""
    ends = (
        stepped.filter(_RANK.is_in(list(ranks)))
        .group_by("rank", "step")
        .agg(pl.col("start_us").min().alias("first_start"), pl.col("end_us").max().alias("window_end_us"))
        .sort("rank", "step")
        .with_columns(pl.col("window_end_us").cum_max().over("rank"))
    )
    start = pl.col("window_end_us").shift(1).over("rank").fill_null(pl.col("first_start"))
    return (
        ends.with_columns(start.alias("window_start_us"))
        .select(list(WINDOW_SCHEMA))
        .filter(pl.col("window_end_us") > pl.col("window_start_us"))
    )


def whole_windows(stack: Stacked, ranks: Collection[int]) -> pl.LazyFrame:
    """One window per rank of `ranks`, step `WHOLE_TRACE`, from its first device activity to its last."""
    return (
        stack.events(ranks)
        .group_by("rank")
        .agg(
            pl.lit(WHOLE_TRACE, dtype=pl.Int64).alias("step"),
            pl.col("start_us").min().alias("window_start_us"),
            pl.col("end_us").max().alias("window_end_us"),
        )
        .sort("rank")
    )


def window_rows(stack: Stacked, stepped: pl.LazyFrame, wanted: dict[str, list[int]]) -> pl.LazyFrame:
    """The windows (`windows_of`) of each source for the ranks `wanted` of it, sorted by rank, then by
    source (`_source`: its index in `SOURCES`)."""
    parts = [
        windows_of(stack, source, ranks, stepped).with_columns(
            pl.lit(SOURCES.index(source), pl.Int64).alias("_source")
        )
        for source, ranks in wanted.items()
    ]
    return pl.concat(parts).sort("rank", "_source", maintain_order=True)


def chosen_rows(rows: pl.DataFrame, ranks: Sequence[int], chosen: Sequence[str | None]) -> list[pl.DataFrame]:
    """Per rank of `ranks`, its windows of its `chosen` source (none for None) in `window_rows`, by slices."""
    windows = []
    for part, source in zip(by_rank(rows.rechunk(), ranks), chosen, strict=True):
        sources, index = part.get_column("_source"), -1 if source is None else SOURCES.index(source)
        found = part.slice(int((sources < index).sum()), int((sources == index).sum()))
        found.drop_in_place("_source")
        windows.append(found)
    return windows


def windows_of(stack: Stacked, source: str, ranks: Collection[int], stepped: pl.LazyFrame) -> pl.LazyFrame:
    """The windows of `source` (`gpu` | `cpu` | `none`) of `ranks`, columns `WINDOW_SCHEMA`, sorted by rank;
    `stepped`: `event_steps(stack)`."""
    if source == "gpu":
        return gpu_windows(stack, ranks)
    if source == "cpu":
        return cpu_windows(stepped, ranks)
    return whole_windows(stack, ranks)
