"""The reduce's part of the kernels analysis: every rank's `KernelParts` in, the run's `KernelAnalysis` out
(docs/metrics.md, "Kernels and operators").

Per rank, medians over its steps; over the run, medians over every (rank, step); the roofline over every
rank's operators; the slow ranks explained against the median rank (`traceview.kernels.slow_rank`).
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from traceview.core.records import record
from traceview.events.kernel_classes import CLASSES, OVERLAP
from traceview.kernels.host import PHASES
from traceview.kernels.operators import TOP_OPERATORS, with_achieved
from traceview.kernels.parts import KernelParts
from traceview.kernels.roofline import Device, roofline, run_device
from traceview.kernels.slow_rank import SlowRank, explain, slow_ranks
from traceview.kernels.top import TOP_KERNELS

CLASS_ORDER = {name: index for index, name in enumerate((*CLASSES, OVERLAP))}
LAUNCH_MEDIANS = ("launches", "launch_us", "device_us", "kernels", "short_kernels", "queue_median_us")


@record
class KernelAnalysis:
    """Where the compute time went, per rank and step, and the slow ranks' kernels (module docstring)."""

    parts: KernelParts
    per_rank: pl.DataFrame  # rank, kernel_class, in_comp, time_us, exclusive_us (medians over steps), share
    run_classes: (
        pl.DataFrame
    )  # kernel_class, in_comp, time_us, exclusive_us (medians over (rank, step)), share
    run_kernels: pl.DataFrame  # per kernel name over the ranks that list it
    run_operators: pl.DataFrame  # per operator over the ranks that list it
    roofline: pl.DataFrame
    launches_per_rank: pl.DataFrame
    host_per_rank: pl.DataFrame
    device: Device
    slow_ranks: tuple[SlowRank, ...]

    @property
    def linked_share(self) -> float | None:
        """Share of the run's kernels linked to the operator that launched them."""
        ranks = self.parts.ranks
        kernels = int(ranks.get_column("kernels").sum()) if ranks.height else 0
        return None if kernels == 0 else float(ranks.get_column("linked_kernels").sum()) / kernels

    def explain(self, rank: int) -> SlowRank | None:
        """`rank` against the median rank, kernel by kernel (also for a rank not explained unasked)."""
        found = next((s for s in self.slow_ranks if s.rank == rank), None)
        return found or explain(self.parts.class_steps, self.parts.key_steps, rank)

    def facts(self) -> dict[str, float]:
        """The run's medians over (rank, step) the advice cites: host phases per step (`host_<phase>_us`, 0 in
        a step without the phase where the trace records it elsewhere), launches, launch and device time,
        short kernels, and the linked share."""
        found: dict[str, float] = {}
        host = self.parts.host
        if host.height:
            steps = self.parts.launches.select("rank", "step").unique()
            for phase in host.get_column("phase").unique().to_list():
                times = steps.join(host.filter(pl.col("phase") == phase), on=["rank", "step"], how="left")
                medians = times.select(pl.col("time_us", "spans").fill_null(0).median()).row(0)
                found[f"host_{phase}_us"], found[f"host_{phase}_spans"] = float(medians[0]), float(medians[1])
        launches = self.parts.launches
        for column in LAUNCH_MEDIANS if launches.height else ():
            value = launches.get_column(column).median()
            if value is not None:
                found[f"step_{column}"] = float(value)  # type: ignore[arg-type]
        share = self.linked_share
        return found | ({"kernels_linked_share": share} if share is not None else {})


def _ordered(frame: pl.DataFrame) -> pl.DataFrame:
    order = pl.col("kernel_class").replace_strict(CLASS_ORDER, default=len(CLASS_ORDER))
    return frame.sort([c for c in ("rank",) if c in frame.columns] + [order])


def _with_share(frame: pl.DataFrame, by: Sequence[str]) -> pl.DataFrame:
    """`share`: the class's exclusive time over T_comp (the compute rows' sum), per `by`."""
    comp = pl.col("exclusive_us").filter(pl.col("in_comp")).sum()
    total = comp.over(by) if by else comp
    return frame.with_columns(pl.when(pl.col("in_comp")).then(pl.col("exclusive_us") / total).alias("share"))


def _class_medians(class_steps: pl.DataFrame, by: Sequence[str]) -> pl.DataFrame:
    """Median over steps of each class's times, a class absent from a step counted 0 there."""
    keys = [*by, "step"] if "rank" in by else ["rank", "step"]
    steps = class_steps.select(keys).unique()
    classes = class_steps.select("kernel_class", "in_comp").unique()
    filled = steps.join(classes, how="cross").join(
        class_steps.select(*keys, "kernel_class", "time_us", "exclusive_us"),
        on=[*keys, "kernel_class"],
        how="left",
    )
    medians = filled.group_by(*by, "kernel_class", "in_comp").agg(
        pl.col("time_us").fill_null(0.0).median(),
        pl.col("exclusive_us").fill_null(0.0).median(),
        pl.col("time_us").is_not_null().sum().cast(pl.Int64).alias("steps"),
    )
    computed = medians.with_columns(
        pl.when(pl.col("in_comp")).then(pl.col("exclusive_us")).alias("exclusive_us")
    )
    return _ordered(_with_share(computed, by))


def _rank_medians(frame: pl.DataFrame, keys: Sequence[str], columns: Sequence[str]) -> pl.DataFrame:
    if frame.height == 0:
        return pl.DataFrame()
    return frame.group_by(*keys).agg(*(pl.col(c).median() for c in columns)).sort(list(keys))


RUN_KERNEL_SCHEMA: dict[str, pl.DataType] = {
    "name": pl.Utf8(),
    "key": pl.Utf8(),
    "kernel_class": pl.Utf8(),
    "ranks": pl.Int64(),
    "count": pl.Int64(),
    "total_us": pl.Float64(),
    "per_rank_us": pl.Float64(),
    "median_us": pl.Float64(),
    "p99_us": pl.Float64(),
}


def run_kernels(top: pl.DataFrame, ranks: int, bound: int) -> pl.DataFrame:
    """Per kernel name over every rank's top list: ranks listing it, count and total summed, the total per
    rank of the run, the median of the ranks' medians and the largest of their p99s; the `bound` of largest
    total."""
    if top.height == 0:
        return pl.DataFrame(schema=RUN_KERNEL_SCHEMA)
    grouped = top.group_by("name").agg(
        pl.col("key").first(),
        pl.col("kernel_class").first(),
        pl.col("rank").n_unique().cast(pl.Int64).alias("ranks"),
        pl.col("count").sum(),
        pl.col("total_us").sum(),
        pl.col("median_us").median(),
        pl.col("p99_us").max(),
    )
    return (
        grouped.with_columns((pl.col("total_us") / max(ranks, 1)).alias("per_rank_us"))
        .sort(["total_us", "name"], descending=[True, False])
        .head(bound)
        .select(list(RUN_KERNEL_SCHEMA))
    )


def run_operators(operators: pl.DataFrame, ranks: int, bound: int) -> pl.DataFrame:
    """Per operator over every rank's top list: the sums, the kernel time per rank of the run, the achieved
    FLOP/s; the `bound` of largest kernel time."""
    if operators.height == 0:
        return operators.drop("rank")
    summed = ("calls", "kernels", "kernel_us", "flops", "flops_kernel_us", "bytes", "bytes_kernel_us")
    grouped = operators.group_by("operator").agg(
        pl.col("op_class").first(),
        pl.col("rank").n_unique().cast(pl.Int64).alias("ranks"),
        *(pl.when(pl.col(c).is_not_null().any()).then(pl.col(c).sum()).alias(c) for c in summed),
        pl.col("dtype").drop_nulls().mode().sort().first(),
    )
    return (
        with_achieved(grouped)
        .with_columns((pl.col("kernel_us") / max(ranks, 1)).alias("per_rank_us"))
        .sort(["kernel_us", "operator"], descending=[True, False])
        .head(bound)
    )


def kernels_from_parts(parts: Sequence[KernelParts], asked: Sequence[int] = ()) -> KernelAnalysis:
    """The run's kernels analysis from every rank's parts; `asked` ranks are explained whatever their excess
    (the stragglers), then every rank computing `SLOW_EXCESS_MIN` more than its median peer."""
    stacked = KernelParts.stacked(list(parts))
    device = run_device(stacked.ranks)
    explained = [
        explain(stacked.class_steps, stacked.key_steps, r) for r in slow_ranks(stacked.class_steps, asked)
    ]
    return KernelAnalysis(
        parts=stacked,
        per_rank=_class_medians(stacked.class_steps, ["rank"]),
        run_classes=_class_medians(stacked.class_steps, []),
        run_kernels=run_kernels(stacked.top_kernels, stacked.ranks.height, TOP_KERNELS),
        run_operators=run_operators(stacked.operators, stacked.ranks.height, TOP_OPERATORS),
        roofline=roofline(stacked.roofline, device),
        launches_per_rank=_rank_medians(stacked.launches, ["rank"], LAUNCH_MEDIANS),
        host_per_rank=_rank_medians(stacked.host, ["rank", "phase"], ("time_us", "spans")),
        device=device,
        slow_ranks=tuple(found for found in explained if found is not None),
    )


__all__ = ["PHASES", "KernelAnalysis", "kernels_from_parts"]
