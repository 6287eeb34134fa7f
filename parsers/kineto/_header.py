"""A Kineto document's top level, read leniently: a header value of the wrong type (a rank written as a
string, a `distributedInfo` that is a list) is ignored with a warning instead of refusing the whole file."""

from __future__ import annotations

import re
from typing import Any, TypeVar, get_args

import msgspec
from traceview.parsers.kineto._schema import RAW_DOCUMENT_DECODER, RawDocument

from traceview.core.errors import InputError, ParseWarning
from traceview.core.location import Location
from traceview.core.sanitize import printable

StructT = TypeVar("StructT", bound=msgspec.Struct)
FIELDS_DECODER = msgspec.json.Decoder(dict[str, msgspec.Raw])


def decode_object(path: Location, data: bytes) -> tuple[RawDocument, list[ParseWarning]]:
    """The document, each event kept as its JSON text. Raises `msgspec.DecodeError` when it is not
    well-formed, `InputError` when `traceEvents` is not an array or a top-level key is given twice."""
    try:
        document = RAW_DOCUMENT_DECODER.decode(data)
    except msgspec.ValidationError:
        document = None
    twice = repeated_key(data)
    if twice is not None:
        raise InputError(
            path, f"the top-level key {printable(twice, 200)!r} is given twice: two readings of one document"
        )
    if document is not None:
        return document, []
    ignored: list[str] = []
    document = lenient(RawDocument, data, ignored, "")
    if "traceEvents" in ignored:
        raise InputError(path, "traceEvents is not an array of events")
    note = f"ignored header values of the wrong type: {', '.join(ignored[:8])}"
    return document, [ParseWarning(str(path), note)]


_KEY = re.compile(rb'[ \t\r\n]*("(?:[^"\\]|\\.)*")[ \t\r\n]*:[ \t\r\n]*')
_AFTER_VALUE = re.compile(rb"[ \t\r\n]*([,}])")


def repeated_key(data: bytes) -> str | None:
    """The first top-level key of the JSON object `data` (well-formed) given twice, else None.

    JSON readers keep one of two values of a key (msgspec the last), so a document with a repeated key reads
    one way whole and may read another way streamed: both readers refuse it. The members are walked in
    order, each value skipped by the length of the one kept for its key (`dict[str, Raw]`): a value that is
    not the one kept belongs to a key given again later."""
    members = FIELDS_DECODER.decode(data)
    at, seen = data.index(b"{") + 1, set()
    for _ in range(len(members) + 1):
        key = _KEY.match(data, at)
        if key is None:
            return None  # an empty object
        name = msgspec.json.decode(key.group(1), type=str)
        value = members.get(name)
        start = key.end()
        if name in seen or value is None or not data.startswith(memoryview(value), start):  # one memcmp
            return name
        seen.add(name)
        after = _AFTER_VALUE.match(data, start + len(value))
        if after is None or after.group(1) == b"}":
            return None
        at = after.end()
    return None


def lenient(kind: type[StructT], text: bytes | msgspec.Raw, ignored: list[str], prefix: str) -> StructT:
    """`kind` decoded from `text`, each field that has the wrong type left at its default and named in
    `ignored`; a nested struct is read the same way."""
    try:
        return msgspec.json.decode(text, type=kind)
    except msgspec.ValidationError:
        pass
    try:
        given = FIELDS_DECODER.decode(text)
    except msgspec.ValidationError:  # not an object at all
        ignored.append(prefix.rstrip(".") or "the document")
        return kind()
    values: dict[str, Any] = {}
    for field in msgspec.structs.fields(kind):
        if field.encode_name in given:
            values[field.name] = _value(
                field.type, given[field.encode_name], ignored, prefix + field.encode_name
            )
    return kind(**{name: value for name, value in values.items() if value is not None})


def _value(kind: Any, text: msgspec.Raw, ignored: list[str], name: str) -> Any:
    try:
        return msgspec.json.decode(text, type=kind)
    except msgspec.ValidationError:
        pass
    nested = [t for t in get_args(kind) if isinstance(t, type) and issubclass(t, msgspec.Struct)]
    if nested:
        return lenient(nested[0], text, ignored, name + ".")
    ignored.append(name)
    return None
