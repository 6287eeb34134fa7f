"""What `traceview compare` compares: the samples of each (family, metric, subject) read from a JSON summary
(docs/metrics.md, "Compare and trend"). The metrics are rows of tables; a summary without a key (an older
schema, an analysis that did not run) gives no samples for its rows.

Families: `step` (run-level budget figures, one sample per rank and step), `budget` (their shares of the
step), `crossrank` (arrival skew per matched collective instance), `idle` (idle time per step by cause),
`collective` (per process group, collective and size bucket: kernel durations and bus bandwidths),
`kernel_class` (per class: the durations of its kernels), `dimension` (per parallelism dimension: its exposed
time, T_comm, waiting and bytes per rank and step). `step`, `budget`, `crossrank`, `idle` and `dimension`
describe effects; `collective` and `kernel_class` name a cause, as do the paired families `collective_calls`,
`rank` and `kernel` (`traceview.compare.paired`, `traceview.compare.kernel_pairs`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import polars as pl

from traceview.compare.crossrank_findings import skew_values
from traceview.core.records import record

CAUSE_FAMILIES = ("collective", "collective_calls", "kernel_class", "kernel", "rank")


@record
class MetricRow:
    """A metric read from a column of per-step rows: name, column, statistic shown, the worse direction."""

    metric: str
    column: str
    statistic: str  # median | p90
    worse: str  # higher | lower


STEP_METRICS: tuple[MetricRow, ...] = (
    MetricRow("step_us", "step_us", "median", "higher"),
    MetricRow("step_us_p90", "step_us", "p90", "higher"),
    MetricRow("comp_us", "comp_us", "median", "higher"),
    MetricRow("comm_us", "comm_us", "median", "higher"),
    MetricRow("exposed_comm_us", "exposed_comm_us", "median", "higher"),
    MetricRow("idle_us", "idle_us", "median", "higher"),
    MetricRow("gamma", "gamma", "median", "higher"),
    MetricRow("exposed_gamma", "exposed_gamma", "median", "higher"),
    MetricRow("transfer_gamma", "transfer_gamma", "median", "higher"),
    MetricRow("overlap_ratio", "overlap_ratio", "median", "lower"),
)
BUDGET_SHARES: tuple[tuple[str, str], ...] = (
    ("comp_share", "comp_us"),
    ("exposed_comm_share", "exposed_comm_us"),
    ("idle_share", "idle_us"),
)
"""(share, numerator column): the share of the step, per rank and step; a larger share is worse except for
compute, whose share is judged in the `step` family's absolute figure instead (shown, never flagged)."""
IDLE_CAUSES: tuple[str, ...] = ("host_bound_us", "dependency_bound_us", "comm_wait_us")
RUN_METRICS: tuple[str, ...] = (
    *(m.metric for m in STEP_METRICS),
    *(share for share, _ in BUDGET_SHARES),
    "skew_us",
    *IDLE_CAUSES,
    "mismatches",
)
"""Every run-level metric a comparison finds (subject `run`): their `<metric>_change_pct` are gate figures."""


@record
class Samples:
    """The samples of one (family, metric, subject) of one run."""

    family: str
    metric: str
    subject: str
    statistic: str
    worse: str
    values: tuple[float, ...]
    fields: tuple[tuple[str, Any], ...] = ()  # subject fields: collective, pg_key, size_bucket, rank, ...


def _frame(rows: Any) -> pl.DataFrame:
    return pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()


def _column(frame: pl.DataFrame, column: str) -> tuple[float, ...]:
    if column not in frame.columns:
        return ()
    return tuple(frame.get_column(column).cast(pl.Float64).drop_nulls().drop_nans().to_list())


def _per_step(document: Mapping[str, Any]) -> pl.DataFrame:
    return _frame((document.get("time_budget") or {}).get("per_step"))


def step_samples(document: Mapping[str, Any]) -> list[Samples]:
    """The run-level figures, one sample per rank and step (`time_budget.per_step`)."""
    frame = _per_step(document)
    found = [
        Samples("step", m.metric, "run", m.statistic, m.worse, _column(frame, m.column)) for m in STEP_METRICS
    ]
    if "step_us" in frame.columns:
        shares = frame.filter(pl.col("step_us") > 0).with_columns(
            [(pl.col(column) / pl.col("step_us")).alias(share) for share, column in BUDGET_SHARES]
        )
        found += [
            Samples(
                "budget",
                share,
                "run",
                "median",
                "none" if share == "comp_share" else "higher",
                _column(shares, share),
            )
            for share, _ in BUDGET_SHARES
        ]
    return found


def crossrank_samples(document: Mapping[str, Any]) -> list[Samples]:
    """Arrival skew, one sample per matched collective instance (`traceview.compare.crossrank_findings`: the
    one reader compare and trend share)."""
    return [Samples("crossrank", "skew_us", "run", "median", "higher", skew_values(document))]


def idle_samples(document: Mapping[str, Any]) -> list[Samples]:
    """Idle time per rank and step by cause (`bubbles.per_step`)."""
    frame = _frame((document.get("bubbles") or {}).get("per_step"))
    return [Samples("idle", cause, "run", "median", "higher", _column(frame, cause)) for cause in IDLE_CAUSES]


def collective_subject(row: Mapping[str, Any]) -> str:
    """`AllReduce pg=0 64 MiB - 1 GiB`: collective, process group and size bucket."""
    return f"{row['collective']} pg={row['pg_key']} {row['size_bucket']}"


def collective_samples(document: Mapping[str, Any]) -> list[Samples]:
    """Per (process group, collective, size bucket): kernel durations and bus bandwidths."""
    found = []
    for row in (document.get("distributions") or {}).get("collective_kernels") or ():
        fields = tuple((key, row[key]) for key in ("collective", "pg_key", "size_bucket"))
        subject = collective_subject(row)
        durations = tuple(v for v in row["dur_us"] if v is not None)
        bandwidths = tuple(v for v in row["busbw_Bps"] if v is not None)
        found.append(Samples("collective", "kernel_us", subject, "median", "higher", durations, fields))
        found.append(Samples("collective", "busbw_Bps", subject, "median", "lower", bandwidths, fields))
    return found


def kernel_class_samples(document: Mapping[str, Any]) -> list[Samples]:
    """Per compute kernel class: the durations of its kernels."""
    return [
        Samples(
            "kernel_class",
            "kernel_us",
            f"kernel class {row['kernel_class']}",
            "median",
            "higher",
            tuple(v for v in row["dur_us"] if v is not None),
            (("kernel_class", row["kernel_class"]),),
        )
        for row in (document.get("distributions") or {}).get("class_kernels") or ()
    ]


DIMENSION_METRICS: tuple[MetricRow, ...] = (
    MetricRow("exposed_us", "exposed_us", "median", "higher"),
    MetricRow("comm_us", "comm_us", "median", "higher"),
    MetricRow("wait_us", "wait_us", "median", "higher"),
    MetricRow("bytes", "bytes", "median", "higher"),
)
"""The figures of each parallelism dimension compared, one sample per (rank, step) (`dimensions.per_step`)."""


def dimension_subject(dimension: str) -> str:
    """`dimension tp`: the subject of a dimension's findings."""
    return f"dimension {dimension}"


def dimension_samples(document: Mapping[str, Any]) -> list[Samples]:
    """Per named parallelism dimension: its exposed time, T_comm, waiting and bytes per (rank, step)."""
    frame = _frame((document.get("dimensions") or {}).get("per_step"))
    if "dimension" not in frame.columns:
        return []
    found = []
    for dimension in sorted(set(frame.get_column("dimension").drop_nulls().to_list()) - {"unknown"}):
        mine = frame.filter(pl.col("dimension") == dimension)
        fields = (("dimension", dimension),)
        found += [
            Samples(
                "dimension",
                m.metric,
                dimension_subject(dimension),
                m.statistic,
                m.worse,
                _column(mine, m.column),
                fields,
            )
            for m in DIMENSION_METRICS
        ]
    return found


SAMPLERS: tuple[Callable[[Mapping[str, Any]], list[Samples]], ...] = (
    step_samples,
    crossrank_samples,
    idle_samples,
    collective_samples,
    kernel_class_samples,
    dimension_samples,
)
"""Every family's reader, in the order findings are listed."""


def all_samples(document: Mapping[str, Any]) -> dict[tuple[str, str, str], Samples]:
    """Every (family, metric, subject) of a summary document with its samples."""
    return {(s.family, s.metric, s.subject): s for sampler in SAMPLERS for s in sampler(document)}
