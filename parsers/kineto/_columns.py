"""The polars frames of a batch of decoded Kineto events (`traceview.parsers.kineto`): a frame per batch and
table (device, host), built column by column with `map` and `operator.attrgetter` (loops in C), the
collective-call columns only for the rows that carry such arguments; and the batches' frames joined into one.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from itertools import compress
from operator import attrgetter
from typing import Any

import msgspec
import polars as pl
from traceview.parsers.kineto._io import CompleteEvent
from traceview.parsers.kineto._schema import COMM_ARG_FIELDS, NO_ARGS, Args
from traceview.parsers.kineto._splits import ALLTOALL_BASE, alltoall_splits
from traceview.parsers.kineto.limits import ParseLimits, cut_texts, int64_or_none

from traceview.core.records import record
from traceview.model.trace import empty_frame

INTERN_FROM = 256
"""A batch's text columns of at least this many rows are interned (`_interned`)."""

CATEGORY, NAME, ARGS = (attrgetter(name) for name in ("cat", "name", "args"))
COMM_ARGS = attrgetter(*COMM_ARG_FIELDS)
NO_COMM_ARGS = COMM_ARGS(NO_ARGS)

Column = list[Any] | pl.Series
ColumnBuilder = Callable[[list[CompleteEvent], list[Args]], dict[str, Column]]


@record
class Table:
    """A frame the events become: the categories it takes (to its `kind`), its schema, its own columns, and
    whether its all-to-all calls carry split sizes (the host's)."""

    kinds: Mapping[str, str]
    schema: Mapping[str, pl.DataType]
    columns: ColumnBuilder
    splits: bool = False


def concat(frames: list[pl.DataFrame], schema: Mapping[str, pl.DataType]) -> pl.DataFrame:
    """The chunks' frames as one frame of one chunk, in `schema`. A column null in every row (one no batch
    has, or one none of whose rows carries a value) is a scalar null: it takes no memory per row, neither
    here nor in a query that gathers, sorts or joins the rows, where a column of nulls would be written out
    (16 bytes a row for text). The chunks are joined here, once, not by each query that reads the frame."""
    joined = pl.concat(frames, how="diagonal", rechunk=False) if frames else None
    if joined is None or joined.height == 0:
        return empty_frame(schema)
    held = [joined.get_column(name) for name in schema if name in joined.columns]  # `kind` in every batch
    valued = pl.DataFrame([c for c in held if c.null_count() < joined.height] or held[:1]).rechunk()
    if valued.width == len(schema):
        return valued
    return valued.select(
        pl.col(name) if name in valued.columns else pl.lit(None, dtype).alias(name)
        for name, dtype in schema.items()
    )


def frame_of(
    events: list[CompleteEvent],
    start: list[float],
    end: list[float],
    table: Table,
    limits: ParseLimits,
    notes: Counter[str],
) -> pl.DataFrame:
    """A frame of some of the columns of `table.schema`, a row per event; a column without a value is left out
    (`concat` makes it), as polars would scan it in Python for a first value. A name longer than
    `max_name_chars` is cut here, before polars copies it; an integer beyond 64 bits is set to null
    (counted)."""
    args = list(map(ARGS, events))
    if None in args:
        args = [a or NO_ARGS for a in args]
    names = cut_texts(_or_empty(list(map(NAME, events))), limits.max_name_chars, notes)
    data: dict[str, Column] = {
        "kind": list(map(table.kinds.__getitem__, map(CATEGORY, events))),
        "name": _interned(names),
        "start_us": start,
        "end_us": end,
        "correlation": _ints(_field(args, "correlation")),
        "external_id": _ints(_present(args, "external_id", "external_id_old")),
        **table.columns(events, args),
        **_comm_columns(args),
    }
    if table.splits and ALLTOALL_BASE in names:
        data.update(alltoall_splits(data, args))
    given = {name: values for name, values in data.items() if _has_value(values)}
    schema = {name: table.schema[name] for name in given}
    try:
        return pl.DataFrame(given, schema=schema)
    except (TypeError, OverflowError):  # an integer beyond 64 bits
        fitted = {name: int64_or_none(values, schema[name], notes) for name, values in given.items()}
        return pl.DataFrame(fitted, schema=schema)


def _has_value(values: Column) -> bool:
    if isinstance(values, pl.Series):
        return values.null_count() < values.len()
    return values[0] is not None or values.count(None) < len(values)


def gpu_columns(events: list[CompleteEvent], args: list[Args]) -> dict[str, Column]:
    return {"device": _ints(_field(args, "device")), "stream": _ints(_field(args, "stream"))}


def cpu_columns(events: list[CompleteEvent], args: list[Args]) -> dict[str, Column]:
    return {
        "pid": _texts(_field(events, "pid")),
        "tid": _texts(_field(events, "tid")),
        "flops": _field(args, "flops"),
        "input_dims": _raw_texts(_either(args, "input_dims", "input_dims_old")),
        "input_types": _raw_texts(_field(args, "input_type")),
        "concrete_inputs": _raw_texts(_field(args, "concrete_inputs")),
    }


def _comm_columns(args: list[Args]) -> dict[str, Column]:
    """The collective-call columns, built from the few rows that carry any of those arguments; none if none
    do."""
    carries = list(map(NO_COMM_ARGS.__ne__, map(COMM_ARGS, args)))
    if True not in carries:
        return {}
    rows = list(compress(range(len(args)), carries))
    columns: dict[str, Column] = {}
    for name, values in _comm_values([args[row] for row in rows]).items():
        column: list[Any] = [None] * len(args)
        for row, value in zip(rows, values, strict=True):
            column[row] = value
        columns[name] = column
    return columns


def _comm_values(args: list[Args]) -> dict[str, list[Any]]:
    return {
        "collective_name": [a.collective_name for a in args],
        "in_nelems": _ints([a.in_nelems for a in args]),
        "out_nelems": _ints([a.out_nelems for a in args]),
        "dtype": [a.dtype for a in args],
        "group_size": _ints([a.group_size for a in args]),
        "pg_name": [_text(a.pg_name if a.pg_name is not None else a.pg_id) for a in args],
        "pg_desc": [a.pg_desc for a in args],
        "pg_ranks": [_text(a.pg_ranks) for a in args],
        "seq": _ints([a.seq if a.seq is not None else a.seq_lower for a in args]),
        "in_split": [_text(a.in_split) for a in args],
        "out_split": [_text(a.out_split) for a in args],
    }


def _field(items: Sequence[Any], name: str) -> list[Any]:
    return list(map(attrgetter(name), items))


def _present(items: list[Args], name: str, fallback: str) -> list[Any]:
    """Field `name` of each item, or field `fallback` where `name` is None (rows found by
    `list.index`, in C)."""
    values = _field(items, name)
    row = -1
    with contextlib.suppress(ValueError):  # no None after `row`
        while True:
            row = values.index(None, row + 1)
            values[row] = getattr(items[row], fallback)
    return values


def _either(items: list[Args], name: str, fallback: str) -> list[msgspec.Raw]:
    """Field `name` of each item, or field `fallback` where `name` is empty (a row by row merge only where
    `fallback` has a value anywhere: traces write one of the two names)."""
    values = _field(items, name)
    if all(values):
        return values
    others = _field(items, fallback)
    if not any(others):
        return values
    return [value or other for value, other in zip(values, others, strict=True)]


def _interned(texts: Sequence[str | None]) -> pl.Series:
    """`texts` as a string column in which equal strings share one copy: the distinct strings, gathered
    (polars' string views then point into one buffer). Event names repeat (a few hundred kernels, thousands
    of times), so this holds a column in about 16 bytes a row instead of 16 plus the name's length. Fewer
    than `INTERN_FROM` texts are taken as they are (the gather is a polars query, which costs more than
    their copies)."""
    if len(texts) < INTERN_FROM:
        return pl.Series(texts, dtype=pl.Utf8)
    distinct = {text: code for code, text in enumerate(dict.fromkeys(texts))}
    return pl.Series(list(distinct), dtype=pl.Utf8).gather(list(map(distinct.__getitem__, texts)))


def _or_empty(names: list[Any]) -> list[str]:
    return [name or "" for name in names] if None in names else names


def _ints(values: list[int | str | None]) -> list[int | None]:
    """Integers as written; numeric strings (some ROCm traces) converted, other strings dropped."""
    if str not in set(map(type, values)):
        return values  # type: ignore[return-value]
    return [int(v) if isinstance(v, int) or (v and v.lstrip("-").isdigit()) else None for v in values]


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _texts(values: list[object]) -> Column:
    """`str` of each value (None kept); integers alone are written by polars, which is faster; without None,
    `str` is mapped in C."""
    if set(map(type, values)) == {int}:
        try:
            return pl.Series(values, dtype=pl.Int64).cast(pl.Utf8)
        except (TypeError, OverflowError):  # beyond 64 bits
            pass
    return list(map(str, values)) if None not in values else list(map(_text, values))


def _raw_texts(raws: list[msgspec.Raw]) -> Column:
    """The raw JSON values as text (None for an absent one), decoded once per distinct value: the values
    (shapes, types) repeat, so each row costs a `bytes` copy and a dictionary look-up, both in C, and the
    column is interned (`_interned`)."""
    if not any(raws):
        return [None] * len(raws)
    keys = list(map(bytes, raws))
    distinct = dict.fromkeys(keys)
    texts = [str(key, "utf-8", "replace") if key else None for key in distinct]
    if len(keys) < INTERN_FROM:
        return pl.Series(list(map(dict(zip(distinct, texts, strict=True)).__getitem__, keys)), dtype=pl.Utf8)
    codes = {key: code for code, key in enumerate(distinct)}
    return pl.Series(texts, dtype=pl.Utf8).gather(list(map(codes.__getitem__, keys)))
