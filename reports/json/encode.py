"""JSON text of a document: UTF-8, indented, keys in the document's order; a string holding a name that is not
UTF-8 (its bytes as lone surrogates) is written with those bytes as `\\xNN`
(`traceview.core.sanitize.shown`)."""

from __future__ import annotations

from typing import Any

import msgspec

from traceview.core.sanitize import shown


def _shown(value: Any) -> Any:
    """`value` with every string (keys included) passed through `shown`."""
    if isinstance(value, str):
        return shown(value)
    if isinstance(value, dict):
        return {_shown(key): _shown(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_shown(item) for item in value]
    return value


def json_bytes(document: Any) -> bytes:
    """The document as compact JSON bytes; strings that are not valid UTF-8 are shown as escapes (the whole
    document is walked only when encoding it as it is fails)."""
    try:
        return msgspec.json.encode(document)
    except UnicodeEncodeError:
        return msgspec.json.encode(_shown(msgspec.to_builtins(document, str_keys=True, enc_hook=str)))


def json_text(document: Any) -> str:
    """The document as indented JSON text (`json_bytes`)."""
    return msgspec.json.format(json_bytes(document), indent=2).decode()
