"""A trace larger than `ParseLimits.stream_above_bytes`, decoded as it is read: the event array a chunk at a
time, so that what one rank costs is its frames and one chunk, never its whole text (docs/metrics.md,
"Input limits").

A chunk ends after an event followed by a comma, and the cut is proven by decoding: a chunk that starts at an
element of the event array and decodes as a list of complete values ends at an element too (the JSON grammar
reads a prefix as it reads the whole; a cut inside a string, an event or a nested array leaves something
open). The last event of each chunk is carried into the next, so the tail, the document's header fields from
its start and its end around the last chunk's events, is decoded as a whole document by `kineto_io.decode`
with its byte numbers moved to the file's (`Origin`): truncation, trailing bytes, malformed JSON after the
last good chunk and a header value of the wrong type read exactly as they read in the whole text. A document
whose event array cannot be found with certainty in its first bytes is read whole.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec
from traceview.parsers.kineto._header import decode_object
from traceview.parsers.kineto._io import UTF8_BOM, Decoded, Origin, decode
from traceview.parsers.kineto._other_formats import first_byte
from traceview.parsers.kineto._schema import RAW_EVENTS_DECODER, Header

from traceview.core.errors import InputError, ParseWarning

if TYPE_CHECKING:
    from traceview.parsers.kineto._gzip import TraceText

    from traceview.core.location import Location

EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
CUT_AFTER = re.compile(rb"[ \t\r\n]*,[ \t\r\n]*\{")
"""What follows an event's closing brace where a chunk may end: a comma and the next event."""
MAX_CUT_TRIES = 16
"""Closing braces tried, from a chunk's end back, before the chunk is read on (an event spans it)."""
EMPTY_EVENTS = b'"traceEvents":[]}'


@dataclass
class StreamedEvents:
    """A streamed document: `chunks()` yields the event texts a chunk at a time, in file order; once it is
    done, `header`, `warnings` and `truncated_at_byte` are those of the whole document."""

    path: Location
    prefix: bytes
    """The object's text before its `"traceEvents"` key; empty for a bare event array."""
    buffer: bytes | memoryview
    """The text from the event array's `[` on, not yet decoded."""
    rest: Iterator[bytes]
    chunk_bytes: int
    position: int
    """The file's byte number of `buffer[0]` (after a byte-order mark)."""
    header: Header = field(default_factory=Header)
    warnings: tuple[ParseWarning, ...] = ()
    truncated_at_byte: int | None = None
    events_total: int = 0

    def chunks(self) -> Iterator[Sequence[msgspec.Raw]]:
        """Each chunk's events; the last chunk is the tail's, decoded as a whole document."""
        parts: list[bytes | bytearray | memoryview] = [self.buffer]
        held, self.buffer = len(self.buffer), b""
        for piece in self.rest:
            parts.append(piece)
            held += len(piece)
            if held >= self.chunk_bytes:
                text = bytearray().join(parts)
                parts = [text]  # the pieces freed: the chunk is their one copy
                chunk = _cut(text)
                del text
                if chunk is None:  # an event spans it: read on, and try again one chunk later
                    held -= self.chunk_bytes
                    continue
                events, carried_from, carried = chunk
                del chunk
                yield self._counted(events)
                del events  # with the consumer's, the last reference to this chunk's text
                self.position += carried_from - 1  # the carried text's `[` stands for the byte before it
                parts, held = [carried], len(carried)
        tail = b"".join(parts)
        del parts
        yield self._counted(self._tail(tail).events)

    def _counted(self, events: Sequence[msgspec.Raw]) -> Sequence[msgspec.Raw]:
        self.events_total += len(events)
        return events

    def _tail(self, rest: bytes) -> Decoded:
        key = b'"traceEvents":' if self.prefix else b""
        origin = Origin(self.position - len(self.prefix) - len(key), self.events_total)
        decoded = decode(self.path, self.prefix + key + rest, origin)
        self.header, self.warnings = decoded.header, decoded.warnings
        self.truncated_at_byte = decoded.truncated_at_byte
        return decoded


def stream_events(path: Location, text: TraceText, chunk_bytes: int) -> StreamedEvents | None:
    """`text` (a `head` and the `rest`) streamed a chunk of about `chunk_bytes` at a time; None when the event
    array cannot be found with certainty in the head (the caller reads the document whole)."""
    head = text.head
    bom = len(UTF8_BOM) if head.startswith(UTF8_BOM) else 0
    found = _array_start(path, head, bom)
    if found is None or text.rest is None:
        return None
    key_at, start = found
    rest = memoryview(head)[start:]  # not a copy: the head is freed with the first chunk
    return StreamedEvents(path, head[bom:key_at], rest, text.rest, chunk_bytes, start - bom)


def _array_start(path: Location, head: bytes, bom: int) -> tuple[int, int] | None:
    """Where the `"traceEvents"` key (the array itself for a bare array) and the event array's `[` are: for an
    object, the first such key whose text before it reads as the object's opening members."""
    first = first_byte(head[bom:])
    if first == b"[":
        start = head.index(b"[", bom)
        return start, start
    if first != b"{":
        return None
    for found in EVENTS_KEY.finditer(head, bom):
        try:
            decode_object(path, head[bom : found.start()] + EMPTY_EVENTS)
        except (msgspec.DecodeError, InputError, UnicodeDecodeError, RecursionError):
            continue
        return found.start(), found.end() - 1
    return None


def _cut(text: bytearray) -> tuple[list[msgspec.Raw], int, bytes] | None:
    """The events of `text` (which starts with `[` at an element of the event array) up to the last event that
    a comma follows, but for that event; where that event starts, and the text from there on, after a `[`;
    None when no such cut is proven within `MAX_CUT_TRIES` closing braces (at least two events are needed,
    so that one is carried)."""
    end = len(text)
    for _ in range(MAX_CUT_TRIES):
        brace = text.rfind(b"}", 1, end)
        if brace < 0:
            return None
        end = brace
        follows = CUT_AFTER.match(text, brace + 1)
        if follows is None:
            continue
        comma = text.index(b",", brace + 1)
        text[comma] = ord("]")
        try:
            events = RAW_EVENTS_DECODER.decode(memoryview(text)[: comma + 1])
        except (msgspec.DecodeError, RecursionError):
            continue
        finally:
            text[comma] = ord(",")
        if len(events) < 2:
            return None
        last = brace + 1 - len(events[-1])
        return events[:-1], last, b"[" + bytes(memoryview(text)[last:])
    return None


def head_events(head: bytes) -> bytes:
    """A streamed bare array's first bytes closed after the last complete element (what a refusal describes);
    `head` itself when it is an object or no such element is found."""
    if first_byte(head) != b"[":
        return head
    end = len(head)
    for _ in range(MAX_CUT_TRIES):
        end = head.rfind(b",", 0, end)
        if end < 0:
            break
        try:
            msgspec.json.decode(head[:end] + b"]")
        except (msgspec.DecodeError, RecursionError):
            continue
        return head[:end] + b"]"
    return head
