"""The time budget of a step, per rank (docs/metrics.md section 4): T_comp, T_comm and its split by where it
ran, T_overlap, exposed communication, overlap ratio, idle, the device's wait inside host collectives,
measured and exposed gamma.

C = union of compute kernels, M = union of every communication interval (device kernels, copy-engine
transfers, host collective ops: `traceview.collectives.comm_events`), G = union of all device activity, H =
union of the host collective ops, W = the step window (see `traceview.steps.windows`). |C ∩ M| = |C| + |M| -
|C ∪ M|; the device's idle inside a host collective is |G ∪ H| - |G|, and idle is |W| - |G ∪ H|, so step =
busy + host_comm_wait + idle.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from traceview.core.intervals import clipped, union_lengths
from traceview.core.outliers import rank_outliers
from traceview.core.records import record
from traceview.events.classify import HOST_KIND, classify_gpus
from traceview.events.kernel_names import KernelPattern
from traceview.model.time_base import aligned_ranks
from traceview.model.trace import Run
from traceview.steps.windows import WINDOW_SCHEMA, StepChoice, choose_steps, step_windows

BUDGET_COLUMNS = (
    "rank",
    "step",
    "window_start_us",
    "window_end_us",
    "step_us",
    "comp_us",
    "comm_us",
    "overlap_us",
    "exposed_comm_us",
    "overlap_ratio",
    "busy_us",
    "idle_us",
    "gamma",
    "exposed_gamma",
    "compute_kernels",
    "comm_kernels",
    "comm_device_us",
    "comm_copy_us",
    "comm_host_us",
    "host_comm_wait_us",
)
MEDIAN_COLUMNS = (
    "step_us",
    "comp_us",
    "comm_us",
    "overlap_us",
    "exposed_comm_us",
    "overlap_ratio",
    "idle_us",
    "gamma",
    "exposed_gamma",
    "comm_device_us",
    "comm_copy_us",
    "comm_host_us",
    "host_comm_wait_us",
)
COMM_SPLIT = {"device": "comm_device_us", "copy engine": "comm_copy_us", "host": "comm_host_us"}
"""T_comm by where it ran (`traceview.events.classify.COMM_KINDS`), each moment counted by the first kind, in
this order, that covers it: the three add up to `comm_us`."""


KEYS = ["rank", "step"]

OUTLIER_FIGURES = ("step_us", "comp_us", "overlap_us", "exposed_comm_us", "idle_us", "gamma", "exposed_gamma")
"""The per-rank figures whose outliers the budget names (the report's per-rank charts)."""


@record
class TimeBudget:
    """Per (rank, step) figures, their medians per rank, and the run's medians over every step of
    every rank."""

    per_step: pl.DataFrame
    per_rank: pl.DataFrame
    run_median: dict[str, float | None]

    @property
    def comm_off_device(self) -> bool:
        """Whether some (rank, step) communicates off the device's kernels (a copy engine, a host collective)
        or its device waits inside a host collective: then the surfaces show where T_comm ran."""
        names = [
            n for n in ("comm_copy_us", "comm_host_us", "host_comm_wait_us") if n in self.per_step.columns
        ]
        return bool(names) and bool(self.per_step.select(pl.any_horizontal(pl.col(names) > 0).any()).item())

    @property
    def steps_analysed(self) -> int:
        """How many (rank, step) windows the budget covers."""
        return self.per_step.height

    @property
    def outliers(self) -> pl.DataFrame:
        """The ranks whose median step figure lies beyond Tukey's fences (`traceview.core.outliers`)."""
        return rank_outliers(self.per_rank, OUTLIER_FIGURES)


def classified_events(run: Run, extra_patterns: Sequence[KernelPattern] = ()) -> pl.DataFrame:
    """Every device event of every rank (on one time base) with its `event_class`."""
    return classify_gpus(aligned_ranks(run), extra_patterns) if run.ranks else pl.DataFrame()


def step_choices(run: Run) -> tuple[StepChoice, ...]:
    """The step source of every rank, in rank order, chosen by evidence
    (`traceview.steps.windows.choose_steps`)."""
    return tuple(choose_steps(trace) for trace in run)


def all_step_windows(run: Run, choices: Sequence[StepChoice] | None = None) -> pl.DataFrame:
    """Step windows of every rank, on the run's time base; `choices` is `step_choices(run)` (computed here
    when not given)."""
    chosen = step_choices(run) if choices is None else choices
    frames = [step_windows(trace, choice) for trace, choice in zip(aligned_ranks(run), chosen, strict=True)]
    return pl.concat(frames) if frames else pl.DataFrame(schema=WINDOW_SCHEMA)


def time_budget(events: pl.DataFrame, windows: pl.DataFrame) -> TimeBudget:
    """The docs/metrics.md section 4 budget from classified device events and step windows."""
    return budget_of(step_budget(events, windows))


def step_budget(events: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """`time_budget`'s per-(rank, step) rows (`BUDGET_COLUMNS`) alone, without the medians (two queries):
    what the map keeps of a rank."""
    return step_budget_plan(events, windows).collect()


def step_budget_plan(events: pl.DataFrame, windows: pl.DataFrame) -> pl.LazyFrame:
    """`step_budget` as a lazy query (the events cut into the windows by one query first)."""
    return _per_step(events, windows)


GRAPH_COLUMNS = {"graph_capture": pl.Boolean, "launches": pl.Int64, "launches_ran": pl.Int64}
"""Per (rank, step): whether the step captures a CUDA/HIP graph (`traceview.steps.graphs`), its kernel
launches on the host and how many of them ran."""


def with_graph_steps(per_step: pl.DataFrame, graphs: pl.DataFrame) -> pl.DataFrame:
    """`per_step` with `GRAPH_COLUMNS` from `graphs` (`traceview.steps.graphs.graph_steps`); a step it does
    not list captures nothing."""
    return with_graph_steps_plan(per_step.lazy(), graphs).collect()


def with_graph_steps_plan(per_step: pl.LazyFrame, graphs: pl.DataFrame) -> pl.LazyFrame:
    """`with_graph_steps` as a lazy query (of `step_budget_plan`, say: the map's budget in one query)."""
    return (
        per_step.drop(_GRAPH_NAMES, strict=False)
        .join(graphs.lazy().select(*KEYS, *_GRAPH_NAMES), on=KEYS, how="left")
        .with_columns(_NO_GRAPH)
        .cast(GRAPH_COLUMNS)  # type: ignore[arg-type]
    )


_GRAPH_NAMES = list(GRAPH_COLUMNS)
_NO_GRAPH = [pl.col("graph_capture").fill_null(False), pl.col("launches", "launches_ran").fill_null(0)]


def _counted(per_step: pl.DataFrame) -> pl.DataFrame:
    """The (rank, step) rows the medians read: all but the graph capture steps, unless every step is one."""
    if "graph_capture" not in per_step.columns:
        return per_step
    replays = per_step.filter(~pl.col("graph_capture").fill_null(False))
    return replays if replays.height else per_step


TRANSFER_COLUMNS = ("transfer_us", "transfer_gamma")


def with_transfer(per_step: pl.DataFrame, transfer: pl.DataFrame) -> pl.DataFrame:
    """`per_step` with `transfer_us` (per (rank, step), from the matched collectives: `transfer` has columns
    rank, step, transfer_us; 0 where the rank took part in none; null throughout when no collective was
    matched across ranks, so nothing was measured) and `transfer_gamma` = transfer_us / comp_us."""
    joined = per_step.drop(TRANSFER_COLUMNS, strict=False).join(transfer, on=["rank", "step"], how="left")
    measured = pl.lit(0.0) if transfer.height else pl.lit(None, dtype=pl.Float64)
    return joined.with_columns(pl.col("transfer_us").fill_null(measured)).with_columns(
        pl.when(pl.col("comp_us") > 0).then(pl.col("transfer_us") / pl.col("comp_us")).alias("transfer_gamma")
    )


def budget_of(per_step: pl.DataFrame, transfer: pl.DataFrame | None = None) -> TimeBudget:
    """The budget of per-(rank, step) rows (`BUDGET_COLUMNS`): their per-rank and run medians (graph capture
    steps left out, unless every step is one); with the cross-rank `transfer` per (rank, step), also
    transfer_us and transfer_gamma (docs/metrics.md section 4)."""
    columns: tuple[str, ...] = MEDIAN_COLUMNS
    if transfer is not None and per_step.height:
        per_step, columns = with_transfer(per_step, transfer), (*MEDIAN_COLUMNS, *TRANSFER_COLUMNS)
    per_rank, medians = pl.collect_all(_median_plans(_counted(per_step).lazy(), columns))
    return _budget(per_step, per_rank, medians, columns)


def _median_plans(counted: pl.LazyFrame, columns: tuple[str, ...]) -> list[pl.LazyFrame]:
    """The queries of the per-rank medians (with the count of `steps`) and of the run's medians."""
    medians = _MEDIANS if columns == MEDIAN_COLUMNS else [pl.col(c).median() for c in columns]
    return [
        counted.group_by("rank").agg(pl.len().alias("steps"), *medians).sort("rank"),
        counted.select(medians),
    ]


_MEDIANS = [pl.col(c).median() for c in MEDIAN_COLUMNS]


def _budget(
    per_step: pl.DataFrame, per_rank: pl.DataFrame, medians: pl.DataFrame, columns: tuple[str, ...]
) -> TimeBudget:
    run_median = {c: (medians.item(0, c) if per_step.height else None) for c in columns}
    return TimeBudget(per_step=per_step, per_rank=per_rank, run_median=run_median)


def _unions() -> dict[str, pl.Expr]:
    """The unions the budget measures per (rank, step): column -> the clipped events it unions."""
    comm, kind = pl.col("event_class") == "comm", pl.col("comm_kind")
    return {
        "comp_us": pl.col("event_class") == "compute",
        "comm_us": comm,
        "_device_us": comm & (kind == "device"),
        "_on_device_us": comm & kind.is_in(["device", "copy engine"]),
        "kernels_us": pl.col("event_class") != "memory",
        "busy_us": pl.col("kind") != HOST_KIND,
        "_active_us": pl.lit(True),
    }


UNIONS = _unions()
_UNION_CODES = {name: code for code, name in enumerate(sorted(UNIONS))}
"""Each union's rows tagged with a one-byte code, not its name (a text column costs 16 bytes a row); the
codes follow the names' order, so the rows sort as they would by name."""
_UNION_ROWS = [
    (
        rows,
        [*KEYS, pl.col("start_us"), pl.col("end_us"), pl.lit(_UNION_CODES[name], pl.UInt8).alias("_union")],
    )
    for name, rows in UNIONS.items()
]
_UNION_COLUMNS = [
    *(pl.col("_us").filter(pl.col("_union") == _UNION_CODES[name]).first().alias(name) for name in UNIONS),
    *(
        pl.col("_n").filter(pl.col("_union") == _UNION_CODES[union]).first().cast(pl.Int64).alias(name)
        for union, name in (("comp_us", "compute_kernels"), ("comm_us", "comm_kernels"))
    ),
]
EMPTY_PER_STEP = pl.DataFrame(
    schema={
        c: (pl.Int64 if c in ("rank", "step", "compute_kernels", "comm_kernels") else pl.Float64)
        for c in BUDGET_COLUMNS
    }
)


def _per_step(events: pl.DataFrame, windows: pl.DataFrame) -> pl.LazyFrame:
    """The per-(rank, step) rows (`BUDGET_COLUMNS`) as a lazy query on the events cut into the windows (cut
    by one query first, so that each union's copy of the rows reads the cut instead of repeating it): the
    unions of `UNIONS` measured together, their rows counted."""
    if events.height == 0 or windows.height == 0:
        return EMPTY_PER_STEP.lazy()
    cut = clipped(_with_kinds(events), windows.lazy(), ["rank"]).collect().lazy()
    rows = pl.concat([cut.filter(where).select(columns) for where, columns in _UNION_ROWS])
    lengths = union_lengths(rows, [*KEYS, "_union"], "_us", pl.len().alias("_n"))
    table = windows.lazy().join(lengths.group_by(KEYS).agg(_UNION_COLUMNS), on=KEYS, how="left").fill_null(0)
    return table.with_columns(_DERIVED).with_columns(_RATIOS).sort(KEYS).select(BUDGET_COLUMNS)


_COMM_KIND = pl.when(pl.col("event_class") == "comm")
_KINDS = [
    _COMM_KIND.then(pl.col("comm_kind")).alias("comm_kind"),
    _COMM_KIND.then(pl.lit("device")).alias("comm_kind"),
]


def _with_kinds(events: pl.DataFrame) -> pl.LazyFrame:
    """The columns the budget reads; events classified without a `comm_kind` have device communication."""
    kind = _KINDS[0] if "comm_kind" in events.columns else _KINDS[1]
    return events.lazy().select("rank", "start_us", "end_us", "event_class", "kind", kind)


def _derived() -> tuple[list[pl.Expr], list[pl.Expr]]:
    """The budget's figures from the unions: those read from them, then the ratios."""
    comm, comp = pl.col("comm_us"), pl.col("comp_us")
    overlap = (comp + comm - pl.col("kernels_us")).clip(lower_bound=0.0)
    measured = [
        (pl.col("window_end_us") - pl.col("window_start_us")).alias("step_us"),
        overlap.alias("overlap_us"),
        (comm - overlap).alias("exposed_comm_us"),
        pl.col("_device_us").alias("comm_device_us"),
        (pl.col("_on_device_us") - pl.col("_device_us")).alias("comm_copy_us"),
        (comm - pl.col("_on_device_us")).alias("comm_host_us"),
        (pl.col("_active_us") - pl.col("busy_us")).alias("host_comm_wait_us"),
    ]
    ratios = [
        pl.when(comm > 0).then(pl.col("overlap_us") / comm).alias("overlap_ratio"),
        (pl.col("step_us") - pl.col("_active_us")).alias("idle_us"),
        pl.when(comp > 0).then(comm / comp).alias("gamma"),
        pl.when(comp > 0).then(pl.col("exposed_comm_us") / comp).alias("exposed_gamma"),
    ]
    return measured, ratios


_DERIVED, _RATIOS = _derived()
