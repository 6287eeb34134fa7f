"""PyTorch profiler (Kineto) traces, PyTorch 1.8 to today, plain or gzip: `parse(path) -> RankTrace`.

Decoding is typed and selective (see `kineto_schema`) and goes batch by batch (see `kineto_io`): each batch of
complete events becomes small polars frames column by column, its Python objects are freed, and the frames are
joined once the file's bytes are gone. Columns are taken with `map` and `operator.attrgetter` (loops in C),
and the collective-call columns only for the rows that carry such arguments. What one file may cost and hold
is bounded (`kineto_limits`, docs/metrics.md "Input limits"): an unusable event is dropped and counted, never
the file.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import compress
from operator import add, attrgetter
from pathlib import Path
from typing import Any

import msgspec
import polars as pl
from traceview.parsers.kineto._gzip import read_text
from traceview.parsers.kineto._io import (
    CompleteEvent,
    any_known_category,
    complete_event_batches,
    decode,
    not_kineto,
    refuse_unless_json,
    refuse_without_kineto_events,
)
from traceview.parsers.kineto._meta import first_source, local_device, rank_meta, step_candidates
from traceview.parsers.kineto._schema import COMM_ARG_FIELDS, NO_ARGS, Args, Header
from traceview.parsers.kineto._splits import ALLTOALL_BASE, alltoall_splits
from traceview.parsers.kineto._stream import StreamedEvents, head_events, stream_events
from traceview.parsers.kineto.limits import (
    DEFAULT_LIMITS,
    ParseLimits,
    counted_warnings,
    cut_texts,
    frame_extremes,
    int64_or_none,
    is_sane_interval,
    sane_frame,
)

from traceview.core.engine import in_memory
from traceview.core.errors import InputError, ParseWarning
from traceview.core.location import Location, Url, location
from traceview.model.trace import (
    CPU_SCHEMA,
    GPU_SCHEMA,
    RankTrace,
    empty_frame,
)

GPU_KINDS: Mapping[str, str] = {
    "kernel": "kernel",
    "Kernel": "kernel",
    "mtia_ccp_events": "kernel",
    "gpu_memcpy": "memcpy",
    "Memcpy": "memcpy",
    "gpu_memset": "memset",
    "Memset": "memset",
}
"""Device activity categories, across PyTorch versions and vendors (docs/metrics.md section 2)."""

CPU_KINDS: Mapping[str, str] = {
    "cpu_op": "op",
    "Operator": "op",
    "operator": "op",
    "user_annotation": "annotation",
    "cuda_runtime": "runtime",
    "Runtime": "runtime",
    "cuda_driver": "runtime",
    "mtia_runtime": "runtime",
}
"""Host categories kept: operators, annotations and the runtime calls that launch device work."""

GPU_ANNOTATION_CATEGORIES = frozenset({"gpu_user_annotation"})
KINETO_CATEGORIES = (
    frozenset(GPU_KINDS) | frozenset(CPU_KINDS) | GPU_ANNOTATION_CATEGORIES | {"python_function"}
)
HEAD_KEPT = 1 << 20
"""Of a streamed file, the first bytes kept to say what it looks like, should it be refused."""
INTERN_FROM = 256
"""A batch's text columns of at least this many rows are interned (`_interned`)."""

CATEGORY, NAME, START, DURATION, ARGS = (attrgetter(name) for name in ("cat", "name", "ts", "dur", "args"))
COMM_ARGS = attrgetter(*COMM_ARG_FIELDS)
NO_COMM_ARGS = COMM_ARGS(NO_ARGS)


Column = list[Any] | pl.Series
ColumnBuilder = Callable[[list[CompleteEvent], list[Args]], dict[str, Column]]


@dataclass(frozen=True)
class _Table:
    """A frame the events become: the categories it takes (to its `kind`), its schema, its own columns."""

    kinds: Mapping[str, str]
    schema: Mapping[str, pl.DataType]
    columns: ColumnBuilder


@dataclass
class _Frames:
    """What the batches of one file have given so far, and the problems met (warning notes, counted)."""

    limits: ParseLimits
    gpu: list[pl.DataFrame] = field(default_factory=list)
    cpu: list[pl.DataFrame] = field(default_factory=list)
    gpu_annotations: list[CompleteEvent] = field(default_factory=list)
    any_kineto_category: bool = False
    notes: Counter[str] = field(default_factory=Counter)

    def coalesce(self, gpu_from: int, cpu_from: int) -> None:
        """The frames added since the `gpu_from`-th and `cpu_from`-th as one each: a streamed file holds one
        frame per chunk rather than many small ones, whose memory the allocators would keep scattered."""
        for parts, start in ((self.gpu, gpu_from), (self.cpu, cpu_from)):
            if len(parts) - start > 1:
                parts[start:] = [pl.concat(parts[start:], how="diagonal", rechunk=True)]


@dataclass(frozen=True)
class _Read:
    """A file read: the header, the frames in batches, and what the reading noticed."""

    header: Header
    frames: _Frames
    events_total: int
    warnings: tuple[ParseWarning, ...]
    truncated_at_byte: int | None


@in_memory
def parse(path: str | Path | Url, limits: ParseLimits = DEFAULT_LIMITS) -> RankTrace:
    """Read one rank's Kineto trace. Raises `InputError` (`NotKinetoError` for other formats) in one line for
    a file that cannot be read; drops and counts (in `RankTrace.warnings`) the events that cannot be used."""
    path = location(path)
    try:
        read = _read(path, limits)  # the file's bytes and decoded objects are freed when it returns
    except MemoryError:
        raise InputError(path, "not enough memory to read this trace (see ParseLimits)") from None
    notes = read.frames.notes
    gpu, cpu, steps, device = _frames(read.frames, limits)
    meta, meta_warnings = rank_meta(
        path, read.header, read.events_total, limits, notes, truncated=read.truncated_at_byte is not None
    )
    return RankTrace(
        path=str(path),
        meta=replace(meta, local_device=device),
        gpu=gpu,
        cpu=cpu,
        steps=steps,
        step_source=first_source(steps),
        warnings=(*read.warnings, *meta_warnings, *counted_warnings(str(path), notes)),
        truncated_at_byte=read.truncated_at_byte,
    )


_Sane = tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, int | None]


def _frames(frames: _Frames, limits: ParseLimits) -> _Sane:
    """The device and host frames made sane (`sane_frame`), the step candidates and the local device: one
    query for all when the frames are sane (else the steps and the device again, from the sane frames)."""
    gpu, cpu = _concat(frames.gpu, GPU_SCHEMA), _concat(frames.cpu, CPU_SCHEMA)
    plans = [frame_extremes(gpu), frame_extremes(cpu)]
    found = pl.collect_all([*plans, step_candidates(frames.gpu_annotations, cpu), local_device(gpu)])
    sane = [sane_frame(f, found[i], limits.max_name_chars, frames.notes) for i, f in enumerate((gpu, cpu))]
    if sane[0] is not gpu or sane[1] is not cpu:  # events dropped or changed
        found[2:] = pl.collect_all([step_candidates(frames.gpu_annotations, sane[1]), local_device(sane[0])])
    device = found[3].item()
    return sane[0], sane[1], found[2], None if device is None else int(device)


def _read(path: Location, limits: ParseLimits) -> _Read:
    text = read_text(path, limits, whole_up_to=limits.stream_above_bytes)
    streamed = stream_events(path, text, limits.stream_chunk_bytes) if text.rest is not None else None
    if streamed is None:
        if text.rest is not None:  # a large text is refused on its first bytes, before the rest is read
            refuse_unless_json(path, text.head)
        data = text.head if text.rest is None else b"".join((text.head, *text.rest))
        text.head = b""
        return _read_whole(path, data, limits, text.warnings)
    head, text.head = text.head[:HEAD_KEPT], b""  # the streamed events hold the rest until their first chunk
    return _read_streamed(path, head, streamed, limits, text.warnings)


def _read_whole(path: Location, data: bytes, limits: ParseLimits, warnings: list[ParseWarning]) -> _Read:
    decoded = decode(path, data)
    frames = _Frames(limits)
    for batch in complete_event_batches(decoded.events, frames.notes):
        _add_batch(frames, batch)
    frames.coalesce(0, 0)
    if decoded.events and not frames.any_kineto_category:
        refuse_without_kineto_events(path, data, decoded.events, KINETO_CATEGORIES)
    return _Read(
        decoded.header,
        frames,
        len(decoded.events),
        (*warnings, *decoded.warnings),
        decoded.truncated_at_byte,
    )


def _read_streamed(
    path: Location, head: bytes, streamed: StreamedEvents, limits: ParseLimits, warnings: list[ParseWarning]
) -> _Read:
    """As `_read_whole`, a chunk at a time: the file is refused as another profiler's only once every chunk
    has been seen without a PyTorch profiler category."""
    frames = _Frames(limits)
    known_category = False
    for events in streamed.chunks():
        held = len(frames.gpu), len(frames.cpu)
        for batch in complete_event_batches(events, frames.notes):
            _add_batch(frames, batch)
        frames.coalesce(*held)
        known_category = known_category or frames.any_kineto_category
        known_category = known_category or any_known_category(events, KINETO_CATEGORIES)
        del events  # the chunk's text is freed before the next is read
    if streamed.events_total and not known_category:
        raise not_kineto(path, head_events(head))
    return _Read(
        streamed.header,
        frames,
        streamed.events_total,
        (*warnings, *streamed.warnings),
        streamed.truncated_at_byte,
    )


def _add_batch(frames: _Frames, complete: list[CompleteEvent]) -> None:
    categories = list(map(CATEGORY, complete))
    present = set(categories)
    frames.any_kineto_category |= not KINETO_CATEGORIES.isdisjoint(present)
    for parts, table in ((frames.gpu, GPU_TABLE), (frames.cpu, CPU_TABLE)):
        if not present.isdisjoint(table.kinds):
            events, start, end = _intervals(
                list(compress(complete, map(table.kinds.__contains__, categories)))
            )
            if events:
                parts.append(_frame(events, start, end, table, frames))
    if not present.isdisjoint(GPU_ANNOTATION_CATEGORIES):
        annotations = compress(complete, map(GPU_ANNOTATION_CATEGORIES.__contains__, categories))
        frames.gpu_annotations += [
            e
            for e in annotations
            if e.ts is not None and e.dur is not None and is_sane_interval(e.ts, e.dur, frames.notes)
        ]


def _intervals(events: list[CompleteEvent]) -> tuple[list[CompleteEvent], list[float], list[float]]:
    """The events with both `ts` and `dur` (the others have no interval), their starts and their ends."""
    start = list(map(START, events))
    try:
        return events, start, list(map(add, start, map(DURATION, events)))
    except TypeError:  # a `ts` or a `dur` is missing
        timed = [e for e in events if e.ts is not None and e.dur is not None]
        return timed, list(map(START, timed)), list(map(add, map(START, timed), map(DURATION, timed)))


def _concat(frames: list[pl.DataFrame], schema: Mapping[str, pl.DataType]) -> pl.DataFrame:
    """The chunks' frames as one (not copied: a frame per chunk), in `schema`: a column no batch has is all
    null, cut in the others' chunks (a query over columns chunked apart would first copy them together). No
    polars query: the columns are put together as they are."""
    if not frames:
        return empty_frame(schema)
    joined = pl.concat(frames, how="diagonal", rechunk=False)
    lengths = joined.to_series(0).chunk_lengths() if joined.height else [0]
    return pl.DataFrame(
        [
            joined.get_column(name) if name in joined.columns else _nulls(name, dtype, lengths)
            for name, dtype in schema.items()
        ]
    )


def _nulls(name: str, dtype: pl.DataType, lengths: Sequence[int]) -> pl.Series:
    """A column of nulls in chunks of `lengths` rows."""
    parts = [pl.Series(name, [None], dtype).new_from_index(0, length) for length in lengths]
    return pl.concat(parts, rechunk=False)


def _frame(
    events: list[CompleteEvent], start: list[float], end: list[float], table: _Table, frames: _Frames
) -> pl.DataFrame:
    """A frame of some of the columns of `table.schema`, a row per event; a column without a value is left out
    (`_concat` makes it), as polars would scan it in Python for a first value. A name longer than
    `max_name_chars` is cut here, before polars copies it; an integer beyond 64 bits is set to null
    (counted)."""
    args = list(map(ARGS, events))
    if None in args:
        args = [a or NO_ARGS for a in args]
    names = cut_texts(_or_empty(list(map(NAME, events))), frames.limits.max_name_chars, frames.notes)
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
    if table is CPU_TABLE and ALLTOALL_BASE in names:
        data.update(alltoall_splits(data, args))
    given = {name: values for name, values in data.items() if _has_value(values)}
    schema = {name: table.schema[name] for name in given}
    try:
        return pl.DataFrame(given, schema=schema)
    except (TypeError, OverflowError):  # an integer beyond 64 bits
        fitted = {name: int64_or_none(values, schema[name], frames.notes) for name, values in given.items()}
        return pl.DataFrame(fitted, schema=schema)


def _has_value(values: Column) -> bool:
    if isinstance(values, pl.Series):
        return values.null_count() < values.len()
    return values[0] is not None or values.count(None) < len(values)


def _gpu_columns(events: list[CompleteEvent], args: list[Args]) -> dict[str, Column]:
    return {"device": _ints(_field(args, "device")), "stream": _ints(_field(args, "stream"))}


def _cpu_columns(events: list[CompleteEvent], args: list[Args]) -> dict[str, Column]:
    return {
        "pid": _texts(_field(events, "pid")),
        "tid": _texts(_field(events, "tid")),
        "flops": _field(args, "flops"),
        "input_dims": _raw_texts(_either(args, "input_dims", "input_dims_old")),
        "input_types": _raw_texts(_field(args, "input_type")),
        "concrete_inputs": _raw_texts(_field(args, "concrete_inputs")),
    }


GPU_TABLE = _Table(GPU_KINDS, GPU_SCHEMA, _gpu_columns)
CPU_TABLE = _Table(CPU_KINDS, CPU_SCHEMA, _cpu_columns)


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
    """Field `name` of each item, or field `fallback` where `name` is empty."""
    values = _field(items, name)
    if all(values):
        return values
    return [value or getattr(item, fallback) for item, value in zip(items, values, strict=True)]


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
    """`str` of each value (None kept); integers alone are written by polars, which is faster."""
    if set(map(type, values)) == {int}:
        try:
            return pl.Series(values, dtype=pl.Int64).cast(pl.Utf8)
        except (TypeError, OverflowError):  # beyond 64 bits
            pass
    return list(map(_text, values))


def _raw_texts(raws: list[msgspec.Raw]) -> Column:
    if not any(raws):
        return [None] * len(raws)
    return _interned([str(raw, "utf-8", "replace") if raw else None for raw in raws])
