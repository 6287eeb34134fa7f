"""PyTorch profiler (Kineto) traces, PyTorch 1.8 to today, plain or gzip: `parse(path) -> RankTrace`.

Decoding is typed and selective (see `kineto_schema`) and goes batch by batch (see `kineto_io`): each batch of
complete events becomes small polars frames column by column (`_columns`), its Python objects are freed, and
the frames are joined once the file's bytes are gone. Columns are taken with `map` and `operator.attrgetter`
(loops in C), and the collective-call columns only for the rows that carry such arguments. What one file may
cost and hold is bounded (`kineto_limits`, docs/metrics.md "Input limits"): an unusable event is dropped and
counted, never the file.

A parse is the file read (`opened`), then the few queries of its `Opened.plans` (the frames' extremes for the
sanity limits, the step candidates, the local device), then the trace made from their answers (`finished`);
the map's batches of small files answer their plans together (`traceview.parsers.kineto.batch.parse_many`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import compress
from operator import add, attrgetter
from pathlib import Path

import polars as pl
from traceview.parsers.kineto._columns import Table, concat, cpu_columns, frame_of, gpu_columns
from traceview.parsers.kineto._gzip import read_text
from traceview.parsers.kineto._io import (
    CompleteEvent,
    any_known_category,
    complete_event_batches,
    decode,
    refuse_without_kineto_events,
)
from traceview.parsers.kineto._meta import (
    annotation_rows,
    first_source,
    local_device,
    rank_meta,
    step_candidates,
    sync_rows,
)
from traceview.parsers.kineto._other_formats import not_kineto, refuse_unless_json
from traceview.parsers.kineto._schema import Header
from traceview.parsers.kineto._stream import StreamedEvents, head_events, stream_events
from traceview.parsers.kineto.limits import (
    DEFAULT_LIMITS,
    ParseLimits,
    counted_warnings,
    frame_extremes,
    is_sane_interval,
    sane_frame,
)

from traceview.core.engine import in_memory
from traceview.core.errors import InputError, ParseWarning
from traceview.core.location import Location, Url, location
from traceview.core.records import record
from traceview.model.trace import (
    CPU_SCHEMA,
    GPU_SCHEMA,
    NO_SYNCS,
    RankTrace,
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
SYNC_CATEGORY = "cuda_sync"
"""The profiler's CUDA sync events (`enable_cuda_sync_events`): kept in `RankTrace.syncs`."""
KINETO_CATEGORIES = (
    frozenset(GPU_KINDS)
    | frozenset(CPU_KINDS)
    | GPU_ANNOTATION_CATEGORIES
    | {"python_function", SYNC_CATEGORY}
)
HEAD_KEPT = 1 << 20
"""Of a streamed file, the first bytes kept to say what it looks like, should it be refused."""

CATEGORY, START, DURATION = (attrgetter(name) for name in ("cat", "ts", "dur"))


@dataclass
class _Frames:
    """What the batches of one file have given so far, and the problems met (warning notes, counted)."""

    limits: ParseLimits
    gpu: list[pl.DataFrame] = field(default_factory=list)
    cpu: list[pl.DataFrame] = field(default_factory=list)
    gpu_annotations: list[CompleteEvent] = field(default_factory=list)
    syncs: list[CompleteEvent] = field(default_factory=list)
    any_kineto_category: bool = False
    notes: Counter[str] = field(default_factory=Counter)

    def coalesce(self, gpu_from: int, cpu_from: int) -> None:
        """The frames added since the `gpu_from`-th and `cpu_from`-th as one each: a streamed file holds one
        frame per chunk rather than many small ones, whose memory the allocators would keep scattered."""
        for parts, start in ((self.gpu, gpu_from), (self.cpu, cpu_from)):
            if len(parts) - start > 1:
                parts[start:] = [pl.concat(parts[start:], how="diagonal", rechunk=True)]


@record
class _Read:
    """A file read: the header, the frames in batches, and what the reading noticed."""

    header: Header
    frames: _Frames
    events_total: int
    warnings: tuple[ParseWarning, ...]
    truncated_at_byte: int | None


@record
class Opened:
    """A file read: its frames whole but not yet made sane, its GPU annotations' rows (`annotation_rows`),
    and what the reading noticed. `plans` are the queries `finished` reads; a batch's files answer them
    together (`traceview.parsers.kineto.batch.parse_many`)."""

    path: Location
    read: _Read
    gpu: pl.DataFrame
    cpu: pl.DataFrame
    gpu_steps: pl.DataFrame | None
    syncs: pl.DataFrame

    def plans(self) -> list[pl.LazyFrame]:
        """The frames' extremes (device, host), the step candidates and the local device."""
        gpu, cpu = self.gpu, self.cpu
        return [
            frame_extremes(gpu),
            frame_extremes(cpu),
            step_candidates(self.gpu_steps, cpu),
            local_device(gpu),
        ]


@in_memory
def parse(path: str | Path | Url, limits: ParseLimits = DEFAULT_LIMITS) -> RankTrace:
    """Read one rank's Kineto trace. Raises `InputError` (`NotKinetoError` for other formats) in one line for
    a file that cannot be read; drops and counts (in `RankTrace.warnings`) the events that cannot be used."""
    file = opened(location(path), limits)
    return finished(file, pl.collect_all(file.plans()), limits)


def opened(path: Location, limits: ParseLimits) -> Opened:
    """The file read (`parse` up to its queries); its bytes and decoded objects are freed when it returns."""
    try:
        read = _read(path, limits)
    except MemoryError:
        raise InputError(path, "not enough memory to read this trace (see ParseLimits)") from None
    frames = read.frames
    gpu, cpu = concat(frames.gpu, GPU_SCHEMA), concat(frames.cpu, CPU_SCHEMA)
    syncs = sync_rows(frames.syncs) if frames.syncs else NO_SYNCS
    frames.syncs = []
    return Opened(path, read, gpu, cpu, annotation_rows(frames.gpu_annotations), syncs)


def finished(file: Opened, found: Sequence[pl.DataFrame], limits: ParseLimits) -> RankTrace:
    """The rank's trace from its file read and the answers to its `plans`: the frames made sane
    (`sane_frame`; the step candidates and the local device found again from the sane frames when events
    were dropped or changed), its header read (`rank_meta`)."""
    read, notes = file.read, file.read.frames.notes
    gpu, cpu = (
        sane_frame(f, found[i], limits.max_name_chars, notes) for i, f in enumerate((file.gpu, file.cpu))
    )
    steps, device = found[2], found[3]
    if gpu is not file.gpu or cpu is not file.cpu:  # events dropped or changed
        steps, device = pl.collect_all([step_candidates(file.gpu_steps, cpu), local_device(gpu)])
    meta, meta_warnings = rank_meta(
        file.path, read.header, read.events_total, limits, notes, truncated=read.truncated_at_byte is not None
    )
    local = device.item()
    return RankTrace(
        path=str(file.path),
        meta=replace(meta, local_device=None if local is None else int(local)),
        gpu=gpu,
        cpu=cpu,
        steps=steps,
        step_source=first_source(steps),
        warnings=(*read.warnings, *meta_warnings, *counted_warnings(str(file.path), notes)),
        truncated_at_byte=read.truncated_at_byte,
        syncs=file.syncs,
    )


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
                parts.append(frame_of(events, start, end, table, frames.limits, frames.notes))
    for category, kept in (
        (GPU_ANNOTATION_CATEGORIES, frames.gpu_annotations),
        ({SYNC_CATEGORY}, frames.syncs),
    ):
        if not present.isdisjoint(category):
            kept += [
                e
                for e in compress(complete, map(category.__contains__, categories))
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


GPU_TABLE = Table(GPU_KINDS, GPU_SCHEMA, gpu_columns)
CPU_TABLE = Table(CPU_KINDS, CPU_SCHEMA, cpu_columns, splits=True)
