"""A trace's JSON bytes in, its header and its events' JSON texts out: truncation and malformation recovery,
one line for what cannot be read, and a one-line explanation when a file is some other kind of trace.

Each event is kept as its JSON text (`msgspec.Raw`, a view into the bytes) and the events are decoded in
batches (`complete_event_batches`), so that only one batch of Python objects lives at a time. A batch the
typed decoders refuse is decoded event by event: an event of the wrong type is dropped and counted, invalid
UTF-8 inside an event is replaced, and the rest of the file is kept (docs/metrics.md, "Input limits").
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Sequence
from itertools import compress
from operator import attrgetter
from typing import TYPE_CHECKING

import msgspec
from traceview.parsers.kineto._header import decode_object
from traceview.parsers.kineto._other_formats import describe_text, first_byte, not_kineto, refuse_other_json
from traceview.parsers.kineto._schema import (
    CATEGORY_DECODER,
    EVENT_DECODER,
    EVENTS_DECODER,
    RAW_EVENTS_DECODER,
    TAGGED_EVENT_DECODER,
    TAGGED_EVENTS_DECODER,
    CategoryProbe,
    Complete,
    Event,
    Header,
    RawDocument,
)

from traceview.core.errors import InputError, NotKinetoError, ParseWarning
from traceview.core.records import record

if TYPE_CHECKING:
    from traceview.core.location import Location

UTF8_BOM = b"\xef\xbb\xbf"
BYTE_IN_MESSAGE = re.compile(r"\s*\(byte (\d+)\)")
DEEP_NESTING = re.compile(rb'(?:[\[{]\s*(?:"[^"\\]{0,64}"\s*:\s*)?){128,}')
"""A run of openers (`[`, or `{` and a key) that no trace has: where a document too deeply nested starts."""
MAX_RECOVERY_TRIES = 64
BATCH_EVENTS = 10_000
"""Events decoded at a time: small enough that one batch's objects are a few MiB, large enough that the
per-batch costs (a join, a decoder call, small polars frames) stay negligible."""
BATCH_ERRORS = (msgspec.DecodeError, UnicodeDecodeError)
"""What decoding a batch of well-formed events can raise: a field of another type, or invalid UTF-8 in a
string (msgspec before 0.23 raises `UnicodeDecodeError` for it, from 0.23 a `DecodeError`)."""
WRONG_TYPE = "dropped {count} events of the wrong type (not an object, or a field of another type)"
REPAIRED_UTF8 = "replaced invalid UTF-8 by U+FFFD in {count} events"
CompleteEvent = Complete | Event


@record
class Origin:
    """Where a document decoded on its own sits in the file: what decoding says of its byte `n` is said of the
    file's byte `n + offset`, and `events_before` complete events came before it (a streamed trace's tail)."""

    offset: int = 0
    events_before: int = 0

    def byte(self, at: int) -> int:
        """The file's byte number of the document's byte `at`."""
        return at + self.offset

    def events(self, kept: int) -> int:
        """The file's count of events kept, `kept` of them in the document."""
        return kept + self.events_before


WHOLE_FILE = Origin()


@record
class Decoded:
    """A document's header and its events' JSON texts, with what decoding noticed."""

    header: Header
    events: Sequence[msgspec.Raw]
    warnings: tuple[ParseWarning, ...] = ()
    truncated_at_byte: int | None = None


PHASE = attrgetter("ph")


def decode(path: Location, data: bytes, origin: Origin = WHOLE_FILE) -> Decoded:
    """The header and each event's JSON text; a truncated document's complete events. Raises `InputError` in
    one line for a document that cannot be read, `NotKinetoError` for another format. Byte numbers and
    counts in what it says are the file's, by `origin`."""
    if data.startswith(UTF8_BOM):
        data = data[len(UTF8_BOM) :]
    head = _head(path, data)
    try:
        return _decode_document(path, data, head, origin)
    except RecursionError:
        deep = DEEP_NESTING.search(data)
        where = f"byte {origin.byte(deep.start())}" if deep else ""
        raise InputError(path, "JSON nested too deeply (about 1,000 levels of [ or {)", where=where) from None
    except UnicodeDecodeError:  # in a header string: the events' strings are decoded batch by batch
        return _decode_repaired(path, data, origin)


def invalid_utf8(error: Exception) -> bool:
    """Whether decoding failed on invalid UTF-8 in a string, in any msgspec release (a `UnicodeDecodeError`
    before 0.23, a `DecodeError` naming UTF-8 from 0.23 on)."""
    if isinstance(error, UnicodeDecodeError):
        return True
    return isinstance(error, msgspec.DecodeError) and "UTF-8" in str(error)


def _decode_repaired(path: Location, data: bytes, origin: Origin) -> Decoded:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        first_bad = exc.start
    else:  # pragma: no cover - msgspec found invalid UTF-8 that Python does not
        raise InputError(path, "invalid UTF-8")
    decoded = decode(path, data.decode("utf-8", "replace").encode(), origin)
    note = ParseWarning(str(path), f"invalid UTF-8 from byte {origin.byte(first_bad)} replaced by U+FFFD")
    return Decoded(decoded.header, decoded.events, (note, *decoded.warnings), decoded.truncated_at_byte)


def _decode_document(path: Location, data: bytes, head: bytes, origin: Origin) -> Decoded:
    try:
        decoded, notes = _decode_any(path, data, head)
    except msgspec.DecodeError as exc:
        return _decode_malformed(path, data, head, exc, origin)
    return _decoded(path, data, decoded, notes)


def _decode_any(
    path: Location, data: bytes, head: bytes
) -> tuple[RawDocument | list[msgspec.Raw], list[ParseWarning]]:
    """The document (object or bare event array); raises `msgspec.DecodeError` when it is not well-formed."""
    if head == b"{":
        return decode_object(path, data)
    return RAW_EVENTS_DECODER.decode(data), []


def _decoded(
    path: Location,
    data: bytes,
    document: RawDocument | list[msgspec.Raw],
    notes: Sequence[ParseWarning],
    truncated_at_byte: int | None = None,
) -> Decoded:
    if not isinstance(document, RawDocument):
        return Decoded(Header(), document, tuple(notes), truncated_at_byte)
    if document.traceEvents is None:
        refuse_other_json(path, data)
        raise NotKinetoError(path, "JSON object without a traceEvents array: not a Kineto trace")
    return Decoded(header_of(document), document.traceEvents, tuple(notes), truncated_at_byte)


def _decode_malformed(
    path: Location, data: bytes, head: bytes, error: msgspec.DecodeError, origin: Origin
) -> Decoded:
    """A truncated document's complete events (a cut inside a number reads as an invalid number at the end), a
    complete document followed by other bytes, the complete events before the first malformed byte, or a
    one-line refusal naming the byte."""
    if invalid_utf8(error):
        return _decode_repaired(path, data, origin)
    message = str(error)
    found = BYTE_IN_MESSAGE.search(message)
    at = int(found[1]) if found else None
    if "truncated" in message or at == len(data):
        return _recover(path, data, head, origin)
    problem = BYTE_IN_MESSAGE.sub("", message).removeprefix("JSON is malformed: ")
    where = f"byte {origin.byte(at)}" if at is not None else ""
    refusal = InputError(path, f"malformed JSON: {problem}", where=where)
    if at is None:
        raise refusal
    if "trailing characters" not in message:
        return _salvage_before(path, data, head, at, refusal, origin)
    end = max(data.rfind(b"}", 0, at), data.rfind(b"]", 0, at)) + 1  # the document's last byte
    try:
        document, notes = _decode_any(path, data[:end], head)
    except msgspec.DecodeError:
        raise refusal from None
    note = ParseWarning(
        str(path), f"ignored {len(data) - end} bytes after the JSON document (from byte {origin.byte(end)})"
    )
    return _decoded(path, data, document, [*notes, note])


def _salvage_before(
    path: Location, data: bytes, head: bytes, at: int, refusal: InputError, origin: Origin
) -> Decoded:
    """The complete events before the byte `at` where the JSON stops being well-formed, read as a document cut
    there, with a warning naming the byte; `refusal` when no event is complete before it."""
    try:
        decoded = _recover(path, data[:at], head, origin)
    except InputError:
        raise refusal from None
    note = ParseWarning(
        str(path),
        f"{refusal.problem} at byte {origin.byte(at)}: kept the {origin.events(len(decoded.events))} "
        f"complete "
        "events before it, "
        f"not the {len(data) - at} bytes from there on",
    )
    cut = [w for w in decoded.warnings if not w.message.startswith("JSON truncated at byte")]
    return Decoded(decoded.header, decoded.events, (*cut, note), decoded.truncated_at_byte)


def complete_event_batches(
    events: Sequence[msgspec.Raw], notes: Counter[str]
) -> Iterator[list[CompleteEvent]]:
    """The complete (`X`) events, `BATCH_EVENTS` at a time, in trace order; events that cannot be read are
    dropped and counted in `notes`."""
    for start in range(0, len(events), BATCH_EVENTS):
        yield _decode_batch(events[start : start + BATCH_EVENTS], notes)


def _decode_batch(batch: Sequence[msgspec.Raw], notes: Counter[str]) -> list[CompleteEvent]:
    """Decode by phase; a batch with a missing or unknown phase through `Event`; else event by event."""
    text = array_text(batch)
    try:
        return list(filter(Complete.__instancecheck__, TAGGED_EVENTS_DECODER.decode(text)))
    except BATCH_ERRORS:
        pass
    try:
        decoded = EVENTS_DECODER.decode(text)
        return list(compress(decoded, map("X".__eq__, map(PHASE, decoded))))  # loops in C
    except BATCH_ERRORS:
        del text
    events = [_decode_event(raw, notes) for raw in batch]
    return [event for event in events if event is not None]


def array_text(items: Sequence[msgspec.Raw]) -> bytes:
    """The JSON array of `items`, joined in one copy (`b"[" + b",".join(...) + b"]"` makes three)."""
    parts: list[bytes | msgspec.Raw] = [b","] * (2 * len(items) + 1)
    parts[0], parts[-1] = b"[", b"]"
    parts[1::2] = items
    return b"".join(parts)


def _decode_event(raw: msgspec.Raw | bytes, notes: Counter[str]) -> CompleteEvent | None:
    """One event, or None when it is not a complete event (counted when it is of the wrong type)."""
    try:
        return _complete_or_none(raw, notes)
    except (msgspec.DecodeError, UnicodeDecodeError) as error:
        if not invalid_utf8(error):
            raise
        notes[REPAIRED_UTF8] += 1
        return _complete_or_none(bytes(raw).decode("utf-8", "replace").encode(), notes)


def _complete_or_none(raw: msgspec.Raw | bytes, notes: Counter[str]) -> CompleteEvent | None:
    try:
        tagged = TAGGED_EVENT_DECODER.decode(raw)
        return tagged if isinstance(tagged, Complete) else None
    except msgspec.ValidationError:
        pass
    try:
        event = EVENT_DECODER.decode(raw)
    except msgspec.ValidationError:
        notes[WRONG_TYPE] += 1
        return None
    return event if event.ph == "X" else None


def header_of(document: Header) -> Header:
    """The header alone: a document's events (and through them its bytes) are not kept alive by it."""
    return Header(**{name: getattr(document, name) for name in Header.__struct_fields__})


def _head(path: Location, data: bytes) -> bytes:
    head = first_byte(data)
    if head not in (b"{", b"["):
        raise NotKinetoError(path, describe_text(data))
    return head


def _recover(path: Location, data: bytes, head: bytes, origin: Origin) -> Decoded:
    """Keep every complete event before the cut of a truncated document: the document is closed after the last
    `}` that ends an event (one followed by `,`, `]` or the cut)."""
    array_start = data.find(b"[", data.find(b'"traceEvents"')) if head == b"{" else 0
    if array_start < 0:
        raise InputError(path, "JSON ends before any traceEvents", where=f"byte {origin.byte(len(data))}")
    closing = b"]}" if head == b"{" else b"]"
    end = len(data)
    for _ in range(MAX_RECOVERY_TRIES):
        end = data.rfind(b"}", array_start, end)
        if end < 0:
            break
        if not _ends_an_event(data, end):
            continue
        try:
            document, notes = _decode_any(path, data[: end + 1] + closing, head)
        except msgspec.DecodeError:
            continue
        cut = origin.byte(len(data))
        decoded = _decoded(path, data, document, notes, truncated_at_byte=cut)
        note = (
            f"JSON truncated at byte {cut}; kept the {origin.events(len(decoded.events))} complete events "
            f"before byte {origin.byte(end + 1)}"
        )
        return Decoded(
            decoded.header, decoded.events, (*decoded.warnings, ParseWarning(str(path), note)), cut
        )
    raise InputError(
        path, "JSON truncated before the first complete event", where=f"byte {origin.byte(len(data))}"
    )


def _ends_an_event(data: bytes, end: int) -> bool:
    follows = data[end + 1 : end + 257].lstrip()
    return follows[:1] in (b",", b"]") or (not follows and end + 257 >= len(data))


def refuse_without_kineto_events(
    path: Location, data: bytes, events: Sequence[msgspec.Raw], known_categories: frozenset[str]
) -> None:
    """A Chrome trace whose events carry none of the PyTorch profiler categories is some other profiler's.

    Called when no complete event had a known category: events of the other phases are looked at too."""
    if events and not any_known_category(events, known_categories):
        raise not_kineto(path, data)


def any_known_category(events: Sequence[msgspec.Raw], known_categories: frozenset[str]) -> bool:
    """Whether any event, of any phase, carries one of `known_categories`; True too when a batch's categories
    cannot be read (a file is refused only when it is certain to be another profiler's)."""
    known = {msgspec.json.encode(category) for category in known_categories}
    for start in range(0, len(events), BATCH_EVENTS):
        text = array_text(events[start : start + BATCH_EVENTS])
        try:
            probes = CATEGORY_DECODER.decode(text)
        except (*BATCH_ERRORS, RecursionError):
            return True
        if any(isinstance(probe, CategoryProbe) and bytes(probe.cat) in known for probe in probes):
            return True
    return False
