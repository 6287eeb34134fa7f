"""Bytes in, a decoded Kineto document out: gzip (python-isal when installed), truncation recovery, and a one-line
explanation when a file is some other kind of trace.

The fast path keeps each event as its JSON text (`msgspec.Raw`, a view into the bytes) and decodes the events in
batches (`complete_event_batches`), so that only one batch of Python objects lives at a time. Whatever the fast
path refuses is read again by the tolerant decoder of the whole document, which gives the same events or the
same error as before batching existed.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
from traceview.parsers.kineto_schema import (
    DOCUMENT_DECODER,
    EVENTS_DECODER,
    RAW_DOCUMENT_DECODER,
    RAW_EVENTS_DECODER,
    TAGGED_EVENTS_DECODER,
    Complete,
    Document,
    Event,
    Header,
    Probe,
    RawDocument,
)

from traceview.errors import InputError, NotKinetoError, ParseWarning

_zlib: ModuleType
try:  # python-isal decompresses gzip several times faster than zlib
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover - the standard library is the fallback
    _zlib = zlib
DECOMPRESS_ERRORS: tuple[type[Exception], ...] = (zlib.error, getattr(_zlib, "error", zlib.error))

GZIP_MAGIC = b"\x1f\x8b"
LEADING_SPACE = re.compile(rb"[ \t\n\r\x0b\x0c]*")
MAX_RECOVERY_TRIES = 64
BATCH_EVENTS = 10_000
"""Events decoded at a time: small enough that one batch's objects are a few MiB, large enough that the per-batch
costs (a join, a decoder call, small polars frames) stay negligible."""
CompleteEvent = Complete | Event


@dataclass(frozen=True)
class Decoded:
    """A document's header and its events: JSON texts (fast path) or decoded `Event`s (recovered or tolerant)."""

    header: Header
    events: Sequence[msgspec.Raw] | Sequence[Event]
    warnings: tuple[ParseWarning, ...] = ()
    truncated_at_byte: int | None = None


def read_bytes(path: Path) -> tuple[bytes, list[ParseWarning]]:
    """The file's JSON bytes, gunzipped if needed; a gzip stream cut short yields what it held, with a warning."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from exc
    if not raw.startswith(GZIP_MAGIC):
        return raw, []
    decompressor = _zlib.decompressobj(31)
    try:
        data = decompressor.decompress(raw) + decompressor.flush()
    except DECOMPRESS_ERRORS as exc:
        raise InputError(path, f"gzip data is corrupt ({exc})") from exc
    if not decompressor.eof:
        note = f"gzip stream ends early at compressed byte {len(raw)}; reading the {len(data)} bytes it held"
        return data, [ParseWarning(str(path), note)]
    return data, []


def decode(path: Path, data: bytes) -> Decoded:
    """The header and each event's JSON text, or for a document that is not well-formed `decode_tolerant`'s."""
    head = _head(path, data)
    decoder = RAW_DOCUMENT_DECODER if head == b"{" else RAW_EVENTS_DECODER
    try:
        decoded = decoder.decode(data)
    except msgspec.DecodeError:  # truncated, malformed, or a wrong type: as the whole-document decoder says
        return decode_tolerant(path, data)
    if not isinstance(decoded, RawDocument):
        return Decoded(Header(), decoded)
    if decoded.traceEvents is None:
        _refuse_other_json(path, data)
        raise NotKinetoError(path, "JSON object without a traceEvents array: not a Kineto trace")
    return Decoded(header_of(decoded), decoded.traceEvents)


def decode_tolerant(path: Path, data: bytes) -> Decoded:
    """Decode the whole document at once with `Event`, which takes any event object; refuse other formats."""
    head = _head(path, data)
    decoder = DOCUMENT_DECODER if head == b"{" else EVENTS_DECODER
    try:
        decoded = decoder.decode(data)
    except msgspec.ValidationError as exc:
        _refuse_other_json(path, data)
        raise InputError(path, f"unexpected value in a Kineto trace: {exc}") from exc
    except msgspec.DecodeError as exc:
        return _recover(path, data, head, exc)
    if isinstance(decoded, Document):
        return Decoded(header_of(decoded), decoded.traceEvents or [])
    return Decoded(Header(), decoded)


def complete_event_batches(path: Path, data: bytes, events: Sequence[Any]) -> Iterator[list[CompleteEvent]]:
    """The complete (`X`) events, `BATCH_EVENTS` at a time, in trace order."""
    for start in range(0, len(events), BATCH_EVENTS):
        batch = events[start : start + BATCH_EVENTS]
        if isinstance(batch[0], Event):
            yield [event for event in batch if event.ph == "X"]
        else:
            yield _decode_batch(path, data, b"[" + b",".join(batch) + b"]")


def _decode_batch(path: Path, data: bytes, text: bytes) -> list[CompleteEvent]:
    """Decode by phase; a batch with a missing or unknown phase goes through `Event`; else the whole file's error."""
    try:
        return list(filter(Complete.__instancecheck__, TAGGED_EVENTS_DECODER.decode(text)))
    except msgspec.ValidationError:
        pass
    try:
        return [event for event in EVENTS_DECODER.decode(text) if event.ph == "X"]
    except msgspec.ValidationError as exc:
        decode_tolerant(path, data)  # raises the error (and any other format's name) for the whole document
        raise InputError(path, f"unexpected value in a Kineto trace: {exc}") from exc


def header_of(document: Header) -> Header:
    """The header alone: a document's events (and through them its bytes) are not kept alive by it."""
    return Header(**{name: getattr(document, name) for name in Header.__struct_fields__})


def _head(path: Path, data: bytes) -> bytes:
    head = first_byte(data)
    if head not in (b"{", b"["):
        raise NotKinetoError(path, _describe_text(data))
    return head


def first_byte(data: bytes) -> bytes:
    """The first byte that is not ASCII whitespace (`bytes.lstrip` would copy the whole document)."""
    start = LEADING_SPACE.match(data).end()  # type: ignore[union-attr]  # the pattern matches ""
    return data[start : start + 1]


def _recover(path: Path, data: bytes, head: bytes, error: msgspec.DecodeError) -> Decoded:
    """Keep every complete event before the cut of a truncated document."""
    if "truncated" not in str(error):
        raise InputError(path, f"malformed JSON: {error}")
    array_start = data.find(b"[", data.find(b'"traceEvents"')) if head == b"{" else 0
    if array_start < 0:
        raise InputError(path, f"JSON ends at byte {len(data)} before any traceEvents")
    closing = b"]}" if head == b"{" else b"]"
    end = len(data)
    for _ in range(MAX_RECOVERY_TRIES):
        end = data.rfind(b"}", array_start, end)
        if end < 0:
            break
        try:
            decoded = (DOCUMENT_DECODER if head == b"{" else EVENTS_DECODER).decode(data[: end + 1] + closing)
        except msgspec.DecodeError:
            continue
        header, events = (
            (header_of(decoded), decoded.traceEvents or [])
            if isinstance(decoded, Document)
            else (Header(), decoded)
        )
        note = f"JSON truncated at byte {len(data)}; kept the {len(events)} complete events before byte {end + 1}"
        return Decoded(header, events, (ParseWarning(str(path), note),), truncated_at_byte=len(data))
    raise InputError(path, "JSON truncated before the first complete event", where=f"byte {len(data)}")


def _describe_text(data: bytes) -> str:
    sample = data[:65536].decode("utf-8", errors="replace")
    if "NCCL INFO" in sample or "NCCL WARN" in sample:
        return "looks like an NCCL_DEBUG log, not a Kineto trace (pass it with --nccl-log)"
    if not sample.strip():
        return "file is empty"
    first = sample.strip().splitlines()[0][:40]
    return f"not JSON (starts with {first!r}): not a Kineto trace"


def _refuse_other_json(path: Path, data: bytes) -> None:
    """Raise `NotKinetoError` saying what the JSON looks like, when it is recognisably another format."""
    if first_byte(data) == b"[":
        try:
            items: list[Any] = msgspec.json.decode(data[:1_000_000] if len(data) < 1_000_000 else data)
        except msgspec.DecodeError:
            return
        raise NotKinetoError(path, _describe_array(items))
    try:
        probe = msgspec.json.decode(data, type=Probe)
    except msgspec.DecodeError:
        return
    if probe.nodes and probe.schema is not None:
        raise NotKinetoError(
            path, 'a PyTorch Execution Trace ("nodes" and "schema" keys), not a Kineto profiler trace'
        )


def _describe_array(items: list[Any]) -> str:
    if items and all(isinstance(item, list) for item in items[:100]):
        return "a JSON array of arrays (looks like a torch memory timeline export), not a Kineto trace"
    phases = {item.get("ph") for item in items[:5000] if isinstance(item, dict)}
    if {"B", "E"} & phases:
        return "a Chrome-trace event array with B/E events and no PyTorch profiler categories (a Horovod timeline?)"
    return "a JSON array that is not a list of Kineto events"


def refuse_without_kineto_events(path: Path, data: bytes, known_categories: frozenset[str]) -> None:
    """A Chrome trace whose events carry none of the PyTorch profiler categories is some other profiler's.

    Called when no complete event had a known category: events of the other phases are looked at too.
    """
    events = decode_tolerant(path, data).events
    if not events or any(isinstance(e, Event) and e.cat in known_categories for e in events):
        return
    if first_byte(data) == b"[":
        raise NotKinetoError(path, _describe_array(msgspec.json.decode(data)))
    device_like = b'"/device:' in data[:1_000_000]
    producer = " (process names like /device:GPU:0: a TensorFlow profiler trace?)" if device_like else ""
    raise NotKinetoError(
        path, f"a Chrome trace with no PyTorch profiler events{producer}, not a Kineto trace"
    )
