"""Bounded memory for huge NCCL_DEBUG logs: record families that grow with the log are kept as rows only up to
a cap, and counted in full by streaming totals whose size is the number of distinct keys, not of records.

- COLL lines (one per collective call, the bulk of a big log): `CallTally` keeps the first `max_rows` calls as
  rows (the call-sequence matching of `traceview.nccl.join` needs the first calls of each communicator, which
  are the ones that identify it) and counts every call per `CALL_KEY` in a dict, folded into a compact polars
  frame every `FLUSH_KEYS` distinct keys.
- TUNING lines (one per call when NCCL_DEBUG_SUBSYS includes TUNING) and the warnings (NCCL WARN records,
  `x.cc:N -> r` error lines, ProcessGroupNCCL errors, `NCCL error` lines): `RawRows` keeps the first rows of
  each pattern up to its limit and hands every overflow batch to the pattern's `Reducer` (polars group-by),
  whose partial totals are merged as they accumulate.

Init-time families (communicators, transports, rings, trees, channel counts, events, network) are printed once
per communicator and rank, so they are kept whole.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import NamedTuple

import polars as pl

from traceview.model.nccl_log import RESULTS, WARNING_KINDS, first_match

FLUSH_KEYS = 65_536
"""Distinct call keys held in the Python dict before they are folded into a polars frame."""
MERGE_FRAMES = 8
"""Partial totals accumulated before they are merged into one frame."""

CALL_KEY = ("host", "pid", "comm", "op", "datatype", "count", "root", "nranks")
"""What a call is counted by: its process, communicator, collective, element type, element count, root and
nranks. Bytes follow from it (count x element size per call)."""
# COLL row (the writer's host, pid, tid, dev, then the "coll" body groups) -> its CALL_KEY, in that order.
_CALL_KEY_OF_GROUPS = operator.itemgetter(0, 1, 10, 4, 7, 6, 9, 11)
_CALL_KEY_TYPES: dict[str, pl.DataType] = {
    "host": pl.Categorical(),
    "pid": pl.Int64(),
    "comm": pl.Categorical(),
    "op": pl.Categorical(),
    "datatype": pl.Int64(),
    "count": pl.Int64(),
    "root": pl.Int64(),
    "nranks": pl.Int64(),
}

TUNING_KEY = ("host", "pid", "comm", "op", "bytes", "algo", "proto")
"""What a TUNING choice is counted by."""
WARNING_SOURCES = ("warn", "error_trace", "pg_error", "nccl_error")
"""The raw families that make the warnings frame (NCCL WARN records first)."""


class CallTally:
    """Every COLL call counted per `CALL_KEY`; the first `max_rows` handed to `keep` as rows.

    A call is `groups`: the writer's (host, pid, tid, cuda_dev) then the groups of the "coll" body pattern,
    all as printed; `keep` receives `(line, *groups)`.
    """

    def __init__(self, keep: Callable[[tuple[object, ...]], None], max_rows: int) -> None:
        self.keep = keep
        self.max_rows = max_rows
        self.seen = 0
        self.counts: dict[tuple[str | None, ...], int] = {}
        self.frames: list[pl.DataFrame] = []

    def add(self, line: int, groups: tuple[str | None, ...]) -> None:
        """Count one call (and keep it while fewer than `max_rows` are kept)."""
        if self.seen < self.max_rows:
            self.keep((line, *groups))
        self.seen += 1
        key = _CALL_KEY_OF_GROUPS(groups)
        counts = self.counts
        counts[key] = counts.get(key, 0) + 1
        if len(counts) >= FLUSH_KEYS:
            self.flush()

    def flush(self) -> None:
        """Fold the dict into a typed polars frame (Categorical text, integer numbers)."""
        if not self.counts:
            return
        schema = {name: pl.String() for name in CALL_KEY} | {"calls": pl.Int64()}
        rows = [(*key, calls) for key, calls in self.counts.items()]
        self.counts = {}
        frame = pl.DataFrame(rows, schema=schema, orient="row")
        self.frames.append(
            frame.with_columns(pl.col(n).cast(t, strict=False) for n, t in _CALL_KEY_TYPES.items())
        )
        if len(self.frames) >= MERGE_FRAMES:
            self.frames = [_sum_calls(self.frames)]

    def totals(self) -> pl.DataFrame:
        """Calls per `CALL_KEY` over every call added (text columns as String)."""
        self.flush()
        if not self.frames:
            return pl.DataFrame(schema={**_CALL_KEY_TYPES, "calls": pl.Int64()}).cast(
                {"host": pl.String(), "comm": pl.String(), "op": pl.String()}
            )
        merged = _sum_calls(self.frames)  # in no particular order: sorting a million keys costs more memory
        return merged.cast({"host": pl.String(), "comm": pl.String(), "op": pl.String()})


def _sum_calls(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """Partial call counts summed per key, by polars' streaming engine (in-memory group-by of a million keys
    takes several times their size)."""
    merged = pl.concat([frame.lazy() for frame in frames]).group_by(CALL_KEY).agg(pl.col("calls").sum())
    return merged.collect(engine="streaming")


class Reducer(NamedTuple):
    """How a capped family is counted: `reduce` turns overflow rows (typed raw columns) of the named family
    into partial totals; `merge` turns concatenated partial totals into totals of the same shape."""

    reduce: Callable[[str, pl.DataFrame], pl.DataFrame]
    merge: Callable[[pl.DataFrame], pl.DataFrame]


def _reduce_tuning(_name: str, frame: pl.DataFrame) -> pl.DataFrame:
    return frame.group_by(TUNING_KEY, maintain_order=True).agg(choices=pl.len().cast(pl.Int64()))


def _merge_tuning(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.group_by(TUNING_KEY, maintain_order=True).agg(pl.col("choices").sum())


def warning_rows(name: str, frame: pl.DataFrame) -> pl.DataFrame:
    """Raw rows of warning family `name` (`WARNING_SOURCES`) with `text`, `source` and `origin_kind`."""
    if name == "error_trace":
        result = pl.col("code").replace_strict(RESULTS, default="unknown result", return_dtype=pl.String())
        return frame.with_columns(
            text=pl.format("{} -> {} ({})", "source", "code", result), origin_kind=pl.lit("error")
        )
    if name == "pg_error":
        severity = pl.when(pl.col("severity") == "E").then(pl.lit("error")).otherwise(pl.lit("warn"))
        return frame.with_columns(source=pl.lit("ProcessGroupNCCL"), origin_kind=severity)
    return frame.with_columns(origin_kind=pl.lit("warn" if name == "warn" else "error"))


def classify_warnings(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` (rows of `warning_rows`) with `kind` by `traceview.model.nccl_log.WARNING_KINDS`."""
    return frame.with_columns(kind=first_match("text", WARNING_KINDS, pl.col("origin_kind")))


def count_warnings(frame: pl.DataFrame) -> pl.DataFrame:
    """Classified warning rows per kind: count, first line, example (the text of the first line)."""
    return frame.group_by("kind").agg(
        count=pl.len().cast(pl.Int64()),
        line=pl.col("line").min(),
        example=pl.col("text").sort_by("line").first(),
    )


def _merge_warnings(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.group_by("kind").agg(
        pl.col("count").sum(), pl.col("line").min(), example=pl.col("example").sort_by("line").first()
    )


REDUCERS: dict[str, Reducer] = {
    "tuning": Reducer(_reduce_tuning, _merge_tuning),
    **{
        name: Reducer(lambda n, f: count_warnings(classify_warnings(warning_rows(n, f))), _merge_warnings)
        for name in WARNING_SOURCES
    },
}
"""The capped raw families and how their overflow is counted."""
