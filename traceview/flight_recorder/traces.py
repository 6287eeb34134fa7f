"""The Kineto traces of the same job joined to the dumps (docs/metrics.md, "Hang forensics"): where each
rank's trace stopped, per process group, and what that says at the divergent collective.

A rank's collective calls are its host ops of one family (`traceview.collectives.calls`), the first of
`TRACE_FAMILIES` it has: `record_param_comms` (which names the group and, in newer traces, the sequence
number), else the `c10d::*` operator, else the backend annotation (`gloo:all_reduce`). A rank's last call in
a group is its latest; its position is the sequence number the trace states, else its order among the
rank's calls of that group in the trace (1-based: a profiler that recorded a window of steps counts from the
window's start). A call whose trace names no group is counted under no group (`group` null) and stands for
every group. Only the traces' host ops are queried; nothing else of them is analysed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import polars as pl

from traceview.core.errors import TraceviewError, reason_of
from traceview.core.records import record
from traceview.flight_recorder.findings import HangFinding, ranks_text

if TYPE_CHECKING:
    from traceview.model.trace import Run

TRACE_FAMILIES = ("rpc", "c10d", "backend")
"""Call families read from a trace, the first a rank has (`traceview.core.vocab.CALL_FAMILIES`' names)."""
TRACED_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "rank": pl.Int64,
    "path": pl.String,
    "group": pl.String,  # the trace's `Process Group Name`; null when it names none
    "collective": pl.String,  # canonical (`AllReduce`)
    "seq": pl.Int64,  # the sequence number the trace states; null when none
    "order": pl.Int64,  # the call's place among the rank's calls of the group in the trace (1-based)
    "calls": pl.Int64,  # the rank's calls of the group in the trace
}
"""Columns of the last traced call per (rank, group)."""


def read_traces(files: Sequence[str]) -> tuple[pl.DataFrame, tuple[tuple[str, str], ...]]:
    """The last collective call of each rank and group in the Kineto traces `files` (`TRACED_SCHEMA`; a rank
    whose trace holds none: one row, its group and call null), and the traces that could not be read (path,
    reason). No trace read: an empty frame and the reasons."""
    from traceview.load.inputs import load_run

    if not files:
        return pl.DataFrame(schema=TRACED_SCHEMA), ()
    try:
        run = load_run(list(files))
    except TraceviewError as error:
        return pl.DataFrame(schema=TRACED_SCHEMA), ((str(files[0]), reason_of(error)),)
    unread = tuple((skipped.path, skipped.reason) for skipped in run.skipped)
    paths = pl.DataFrame(
        {"rank": run.rank_ids, "path": [trace.path for trace in run.ranks]},
        schema={"rank": pl.Int64, "path": pl.String},
    )
    traced = paths.join(last_calls(run), on="rank", how="left")  # a rank without a call: one row of nulls
    return traced.select(pl.col(name).cast(dtype) for name, dtype in TRACED_SCHEMA.items()), unread


def last_calls(run: Run) -> pl.DataFrame:
    """Each rank's last call per group (module docstring), without the path: rank, group, collective, seq,
    order, calls."""
    from traceview.collectives.calls import collective_calls

    calls = collective_calls(run)
    if calls.is_empty():
        return pl.DataFrame(schema={k: v for k, v in TRACED_SCHEMA.items() if k != "path"})
    precedence = pl.col("family").replace_strict(
        {family: index for index, family in enumerate(TRACE_FAMILIES)}, default=None, return_dtype=pl.Int64
    )
    return (
        calls.with_columns(precedence.alias("precedence"))
        .filter(pl.col("precedence") == pl.col("precedence").min().over("rank"))
        .sort("rank", "start_us", maintain_order=True)
        .with_columns(
            pl.col("pg_name").alias("group"),
            pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("rank", "pg_name").alias("order"),
            pl.len().over("rank", "pg_name").cast(pl.Int64).alias("calls"),
        )
        .group_by("rank", "group", maintain_order=True)
        .agg(pl.all().last())
        .select("rank", "group", "collective", pl.col("seq").cast(pl.Int64), "order", "calls")
        .sort("rank", "group", nulls_last=True)
    )


@record
class TracedSide:
    """Ranks whose traces stopped at the same place in a finding's group: the last traced collective, its
    sequence number (when the trace states one) or its order in the trace, and the sentence saying so."""

    ranks: tuple[int, ...]
    state: str  # TRACED_SENTENCES' keys
    collective: str | None
    seq: int | None
    order: int | None
    sentence: str


TRACED_SENTENCES: dict[str, str] = {
    "seq": "rank {ranks}: last traced {collective} #{seq} of group {group} (the trace's sequence number)",
    "order": (
        "rank {ranks}: last traced {collective}, call {order} of group {group} in the trace (it states no "
        "sequence number)"
    ),
    "order_any_group": (
        "rank {ranks}: last traced {collective}, call {order} in the trace (it names no group)"
    ),
    "no_call": "rank {ranks}: its trace recorded no collective",
    "no_trace": "rank {ranks}: no trace written",
}
"""What a side says, by its state."""


def _state() -> pl.Expr:
    return (
        pl.when(pl.col("traced").is_null())
        .then(pl.lit("no_trace"))
        .when(pl.col("collective").is_null())
        .then(pl.lit("no_call"))
        .when(pl.col("seq").is_not_null())
        .then(pl.lit("seq"))
        .when(pl.col("group").is_not_null())
        .then(pl.lit("order"))
        .otherwise(pl.lit("order_any_group"))
    )


def traced_at(finding: HangFinding, members: Sequence[int], traced: pl.DataFrame) -> tuple[TracedSide, ...]:
    """Where each member of `finding`'s group stood in its trace (module docstring), ranks that stood at the
    same place together; members without a trace said so. `traced`: `TRACED_SCHEMA`, every trace read."""
    read = traced.select("rank").unique().with_columns(traced=pl.lit(True))
    in_group = (
        traced.filter((pl.col("group") == finding.group) | pl.col("group").is_null())
        .sort("rank", pl.col("group").is_null())
        .unique("rank", keep="first")
    )
    stood = (
        pl.DataFrame({"rank": list(members)}, schema={"rank": pl.Int64})
        .join(read, on="rank", how="left")
        .join(in_group.drop("path"), on="rank", how="left")
        .with_columns(_state().alias("state"))
        .group_by("state", "collective", "seq", "order", "group", maintain_order=True)
        .agg(pl.col("rank").sort())
        .sort(pl.col("rank").list.first())
    )
    return tuple(_side(row, finding.group) for row in stood.iter_rows(named=True))


def _side(row: dict[str, Any], group: str) -> TracedSide:
    ranks = tuple(row["rank"])
    fields = {**row, "ranks": ranks_text(ranks), "group": group}
    return TracedSide(
        ranks=ranks,
        state=row["state"],
        collective=row["collective"],
        seq=row["seq"],
        order=row["order"],
        sentence=TRACED_SENTENCES[row["state"]].format(**fields),
    )
