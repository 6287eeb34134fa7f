"""What a file that is not a Kineto trace is, said in one line and never quoting it: an NCCL log, text,
binary data, a PyTorch Execution Trace, a memory timeline, another profiler's Chrome trace."""

from __future__ import annotations

import codecs
import re
from typing import TYPE_CHECKING, Any

import msgspec
from traceview.parsers.kineto._schema import Probe

from traceview.core.errors import NotKinetoError

if TYPE_CHECKING:
    from traceview.core.location import Location

LEADING_SPACE = re.compile(rb"[ \t\n\r\x0b\x0c]*")


def refuse_unless_json(path: Location, head: bytes) -> None:
    """Refuse a text whose first bytes `head` do not start a JSON object or array (only whitespace, NUL bytes,
    other text): said before the rest of the file is read."""
    start = first_byte(head)
    if not start:
        raise NotKinetoError(
            path, f"no JSON in its first {len(head)} bytes (only whitespace): not a Kineto trace"
        )
    if start not in (b"{", b"["):
        raise NotKinetoError(path, describe_text(head))


def first_byte(data: bytes) -> bytes:
    """The first byte that is not ASCII whitespace (`bytes.lstrip` would copy the whole document)."""
    start = LEADING_SPACE.match(data).end()  # type: ignore[union-attr]  # the pattern matches ""
    return data[start : start + 1]


def describe_text(data: bytes) -> str:
    sample = data[:65536].decode("utf-8", errors="replace")
    if "NCCL INFO" in sample or "NCCL WARN" in sample:
        return "looks like an NCCL_DEBUG log, not a Kineto trace (pass it with --nccl-log)"
    if not sample.strip():
        return "file is empty"
    return f"not JSON ({_kind_of_text(data[:65536])}): not a Kineto trace"


def _kind_of_text(head: bytes) -> str:
    """What a file that is not JSON holds, in words, never quoting it (it may be anyone's file)."""
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return "binary data"
    return "binary data" if "\x00" in text else "text"


def refuse_other_json(path: Location, data: bytes) -> None:
    """Raise `NotKinetoError` saying what the JSON looks like, when it is recognisably another format."""
    if first_byte(data) == b"[":
        items = _decode_untyped(data[:1_000_000] if len(data) < 1_000_000 else data)
        if items is not None:
            raise NotKinetoError(path, _describe_array(items))
        return
    try:
        probe = msgspec.json.decode(data, type=Probe)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return
    if probe.nodes and probe.schema is not None:
        raise NotKinetoError(
            path, 'a PyTorch Execution Trace ("nodes" and "schema" keys), not a Kineto profiler trace'
        )


def _decode_untyped(data: bytes) -> Any:
    """The JSON value, or None when it cannot be read (only used to say what a refused file looks like)."""
    try:
        return msgspec.json.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None


def _describe_array(items: Any) -> str:
    if not isinstance(items, list):
        return "a JSON array that is not a list of Kineto events"
    if items and all(isinstance(item, list) for item in items[:100]):
        return "a JSON array of arrays (looks like a torch memory timeline export), not a Kineto trace"
    phases = {item.get("ph") for item in items[:5000] if isinstance(item, dict)}
    if {"B", "E"} & phases:
        return (
            "a Chrome-trace event array with B/E events and no PyTorch profiler categories (a Horovod "
            "timeline?)"
        )
    return "a JSON array that is not a list of Kineto events"


def not_kineto(path: Location, data: bytes) -> NotKinetoError:
    """The refusal of a Chrome trace without PyTorch profiler events, saying what `data` (the document, or its
    first bytes) looks like."""
    if first_byte(data) == b"[":
        return NotKinetoError(path, _describe_array(_decode_untyped(data)))
    device_like = b'"/device:' in data[:1_000_000]
    producer = " (process names like /device:GPU:0: a TensorFlow profiler trace?)" if device_like else ""
    return NotKinetoError(
        path, f"a Chrome trace with no PyTorch profiler events{producer}, not a Kineto trace"
    )
