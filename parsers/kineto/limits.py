"""What a Kineto trace may hold before the parser refuses or drops it (docs/metrics.md, "Input limits").

Two kinds of limit. Resource limits (`ParseLimits`) bound what one file may cost: its inflated size and the
length of its strings. Sanity limits (`RANGE_RULES`, `COUNT_BOUNDS`, ...) are the values no profiler writes:
an event outside them is dropped and counted, a header value outside them is read as unknown; each with one
`ParseWarning` per kind, so that no absurd value is printed as a result.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import polars as pl

from traceview.core.errors import ParseWarning
from traceview.core.records import record

GIB = 2**30
MIB = 2**20


@record
class ParseLimits:
    """How much one trace file may cost; raise them for a trace known to be that large.

    - `max_inflated_bytes`: the JSON text's size (after gunzip) above which the file is refused.
    - `max_inflation_ratio` / `ratio_checked_after_bytes`: a compressed file whose inflated text passes
      `ratio_checked_after_bytes` while being more than `max_inflation_ratio` times the compressed bytes read
      so far, and that at this ratio would produce more than `inflation_budget_bytes` in all, is a
      decompression bomb, refused before it fills memory. Real traces inflate 5 to 30 times, bombs about 1,000
      times (`traceview.core.reading`); a small text that compresses well stays within the budget.
    - `max_name_chars`: a string (event name, category, process group description, host or device name) longer
      than this is cut to this many characters followed by `...[cut N chars]`.
    - `stream_above_bytes` / `stream_chunk_bytes`: a text larger than `stream_above_bytes` is decoded as it is
      read, about `stream_chunk_bytes` at a time, so that its whole text is never held
      (`parsers/kineto/_stream.py`).
    """

    max_inflated_bytes: int = 16 * GIB
    max_inflation_ratio: float = 200.0
    ratio_checked_after_bytes: int = 4 * MIB
    inflation_budget_bytes: int = 512 * MIB
    max_name_chars: int = 4096
    stream_above_bytes: int = 8 * MIB
    stream_chunk_bytes: int = 16 * MIB


DEFAULT_LIMITS = ParseLimits()

MAX_TIMESTAMP_US = float(2**53)
"""Above 2^53 a float64 no longer holds every integer microsecond."""
MIN_TIMESTAMP_US = -1e12
MAX_DURATION_US = 1e11
"""About 28 hours: no profiled region lasts longer."""
MAX_ELEMENT_COUNT = 2**50
"""`In msg nelems` / `Out msg nelems` above this overflow a byte total (times an 8-byte element, times ranks).
"""
MAX_WORLD_SIZE = 2**24
COUNT_BOUNDS = {
    "in_nelems": (0, MAX_ELEMENT_COUNT, "element counts outside [0, 2^50]"),
    "out_nelems": (0, MAX_ELEMENT_COUNT, "element counts outside [0, 2^50]"),
    "group_size": (1, MAX_WORLD_SIZE, "group sizes outside [1, 2^24]"),
}
"""The integer arguments of collective calls that have physical bounds: column -> (low, high, what a warning
calls those outside); a value outside is set to null (unknown) and counted."""
INT64_RANGE = (-(2**63), 2**63 - 1)
BASE_TIME_RANGE_NS = (946_684_800 * 10**9, 4_102_444_800 * 10**9)
"""baseTimeNanoseconds from 2000-01-01 to 2100-01-01 (UTC); anything else is not a wall clock."""


@record
class RangeRule:
    """Events whose `quantity` (`ts` or `dur`, microseconds) lies outside [low, high] are dropped, counted
    under `note` (a warning's text, `{count}` the number of events)."""

    quantity: str
    low: float
    high: float
    note: str


RANGE_RULES = (
    RangeRule("dur", 0.0, math.inf, "dropped {count} events with a negative duration"),
    RangeRule(
        "dur", -math.inf, MAX_DURATION_US, "dropped {count} events with a duration above 1e11 us (28 h)"
    ),
    RangeRule(
        "ts",
        MIN_TIMESTAMP_US,
        MAX_TIMESTAMP_US,
        "dropped {count} events with a timestamp outside [-1e12, 2^53] us",
    ),
)
"""Checked in this order: an event is counted under the first rule it breaks."""

QUANTITIES = {"ts": pl.col("start_us"), "dur": pl.col("end_us") - pl.col("start_us")}


def sane_frame(
    frame: pl.DataFrame, extremes: pl.DataFrame, max_chars: int, notes: Counter[str]
) -> pl.DataFrame:
    """`frame` without absurd intervals (dropped), counts outside `COUNT_BOUNDS` (null) or long strings (cut;
    but `name`, cut by `cut_texts` as it is decoded), each counted in `notes`, read from its `extremes` (the
    minima and maxima `frame_extremes` finds): no query when nothing is wrong, as in every real trace."""
    found = extremes.row(0, named=True)
    counts, texts = [name for name in COUNT_BOUNDS if name in frame.columns], _texts(frame)
    if not all(_within(found, rule.quantity, rule.low, rule.high) for rule in RANGE_RULES):
        frame = drop_absurd_intervals(frame, notes)
    if not all(_within(found, name, *COUNT_BOUNDS[name][:2]) for name in counts):
        frame = null_absurd_counts(frame, counts, notes)
    if any((found[f"{name} bytes"] or 0) > max_chars for name in texts):
        frame = cut_long_texts(frame, texts, max_chars, notes)
    return frame


def frame_extremes(frame: pl.DataFrame, keys: tuple[str, ...] = ()) -> pl.LazyFrame:
    """The minima and maxima of `frame` that `sane_frame` reads; with `keys`, per file of a batch stacked (a
    file without rows has none)."""
    counts = tuple(name for name in COUNT_BOUNDS if name in frame.columns)
    extremes = _extreme_exprs(counts, tuple(name for name in _texts(frame) if name not in keys))
    return frame.lazy().group_by(*keys).agg(extremes) if keys else frame.lazy().select(extremes)


@functools.cache
def _extreme_exprs(counts: tuple[str, ...], texts: tuple[str, ...]) -> tuple[pl.Expr, ...]:
    """The expressions of `frame_extremes` for frames with these count and text columns (built once: a
    file's parse builds them for two frames, and a tiny file's parse is a few milliseconds)."""
    return (
        *(q.min().alias(f"{name} min") for name, q in QUANTITIES.items()),
        *(q.max().alias(f"{name} max") for name, q in QUANTITIES.items()),
        *(pl.col(name).min().alias(f"{name} min") for name in counts),
        *(pl.col(name).max().alias(f"{name} max") for name in counts),
        *(pl.col(name).str.len_bytes().max().alias(f"{name} bytes") for name in texts),
    )


def _texts(frame: pl.DataFrame) -> list[str]:
    return [
        name
        for name, dtype in zip(frame.columns, frame.dtypes, strict=True)
        if dtype == pl.Utf8 and name != "name"
    ]


def _within(extremes: dict[str, Any], name: str, low: float, high: float) -> bool:
    smallest, largest = extremes[f"{name} min"], extremes[f"{name} max"]
    return smallest is None or (low <= smallest and largest <= high)


def drop_absurd_intervals(frame: pl.DataFrame, dropped: Counter[str]) -> pl.DataFrame:
    """`frame` without the rows that break a `RANGE_RULES` row; each drop counted under its rule's note."""
    broken = [~QUANTITIES[rule.quantity].is_between(rule.low, rule.high) for rule in RANGE_RULES]
    if not frame.select(pl.any_horizontal(broken).any()).item():
        return frame
    first_broken = pl.coalesce([pl.when(b).then(pl.lit(i)) for i, b in enumerate(broken)]).alias("rule")
    counts = frame.select(first_broken).get_column("rule").drop_nulls().value_counts()
    for index, count in counts.iter_rows():
        dropped[RANGE_RULES[index].note] += count
    return frame.filter(~pl.any_horizontal(broken))


def is_sane_interval(ts: float, dur: float, dropped: Counter[str]) -> bool:
    """`drop_absurd_intervals` for one event (the few GPU annotations that are kept as events)."""
    values = {"ts": ts, "dur": dur}
    for rule in RANGE_RULES:
        if not rule.low <= values[rule.quantity] <= rule.high:
            dropped[rule.note] += 1
            return False
    return True


def null_absurd_counts(frame: pl.DataFrame, columns: Sequence[str], nulled: Counter[str]) -> pl.DataFrame:
    """Values of `columns` outside their `COUNT_BOUNDS` set to null, counted under each bound's note."""
    present = [name for name in columns if name in frame.columns]
    absurd = {name: ~pl.col(name).is_between(*COUNT_BOUNDS[name][:2]) for name in present}
    found = frame.select(*(bad.sum().alias(name) for name, bad in absurd.items())).row(0, named=True)
    if not any(found.values()):
        return frame
    for name, count in found.items():
        nulled[f"set {{count}} {COUNT_BOUNDS[name][2]} to null"] += count
    return frame.with_columns(
        pl.when(bad).then(None).otherwise(pl.col(name)).alias(name) for name, bad in absurd.items()
    )


def cut_long_texts(
    frame: pl.DataFrame, texts: Sequence[str], max_chars: int, cut: Counter[str]
) -> pl.DataFrame:
    """Every string of columns `texts` longer than `max_chars` cut to `max_chars` characters and
    `...[cut N chars]`."""
    cut[f"cut {{count}} strings longer than {max_chars} characters"] += frame.select(
        pl.sum_horizontal(pl.col(texts).str.len_chars() > max_chars).sum()
    ).item()
    return frame.with_columns(
        pl.when(pl.col(name).str.len_chars() > max_chars)
        .then(
            pl.concat_str(
                pl.col(name).str.slice(0, max_chars),
                pl.lit("...[cut "),
                (pl.col(name).str.len_chars() - max_chars).cast(pl.Utf8),
                pl.lit(" chars]"),
            )
        )
        .otherwise(pl.col(name))
        .alias(name)
        for name in texts
    )


def cut_text(text: str, max_chars: int, cut: Counter[str]) -> str:
    """`cut_long_texts` for one string (header values)."""
    if len(text) <= max_chars:
        return text
    cut[f"cut {{count}} strings longer than {max_chars} characters"] += 1
    return f"{text[:max_chars]}...[cut {len(text) - max_chars} chars]"


def cut_texts(texts: list[str], max_chars: int, cut: Counter[str]) -> list[str]:
    """`cut_text` of each string; the list itself when none is too long (checked in C)."""
    if max(map(len, texts), default=0) <= max_chars:
        return texts
    return [cut_text(text, max_chars, cut) for text in texts]


def int64_or_none(values: Any, dtype: pl.DataType, nulled: Counter[str]) -> Any:
    """A list of an integer column with the integers beyond 64 bits (which polars cannot hold) set to None,
    counted; any other column as it is."""
    if dtype != pl.Int64 or not isinstance(values, list):
        return values
    low, high = INT64_RANGE
    kept = [v if v is None or low <= v <= high else None for v in values]
    nulled["set {count} integers beyond 64 bits to null"] += kept.count(None) - values.count(None)
    return kept


def counted_warnings(path: str, notes: Counter[str]) -> list[ParseWarning]:
    """One warning per kind of problem: its note ("dropped {count} events of the wrong type") with
    the count."""
    return [ParseWarning(path, note.format(count=count)) for note, count in notes.items() if count]
