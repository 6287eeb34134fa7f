"""A trace file's text, read and decompressed a slice at a time (`traceview.core.reading`: gzip, bzip2, xz,
zstd), so that a decompression bomb is refused before it fills memory and a trace larger than memory can be
decoded as it is read (docs/metrics.md, "Input limits")."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from traceview.parsers.kineto.limits import ParseLimits

from traceview.core.errors import InputError, ParseWarning
from traceview.core.location import Location, Url
from traceview.core.reading import ReadLimits, open_bytes

INFLATED_SLICE = 16 << 20
"""At most this much text comes out of one read."""


@dataclass
class TraceText:
    """A trace file's JSON text, gunzipped if needed: `head`, its first bytes (the whole text when `rest` is
    None), then `rest`, the following slices, read as they are asked for. `warnings` receives a gzip stream
    cut short once it is met. Every slice is checked against `limits` before the next is read."""

    head: bytes
    rest: Iterator[bytes] | None
    warnings: list[ParseWarning] = field(default_factory=list)


def read_text(path: Location, limits: ParseLimits, whole_up_to: int | None = None) -> TraceText:
    """The file's text: whole when it is at most `whole_up_to` bytes (default: any size the limits allow),
    else its first `whole_up_to` bytes and an iterator over the rest. Raises `InputError` when the path is
    not a regular file, when the file, or its inflated text, is larger than `limits` allow, or when it
    cannot be read (`traceview.core.reading`)."""
    whole_up_to = limits.max_inflated_bytes if whole_up_to is None else whole_up_to
    text = TraceText(b"", None)
    slices = _slices(path, limits, text.warnings)
    head: list[bytes] = []
    held = 0
    for piece in slices:
        head.append(piece)
        held += len(piece)
        if held > whole_up_to:
            text.head, text.rest = b"".join(head), slices
            return text
    text.head = head[0] if len(head) == 1 else b"".join(head)
    return text


def read_limits(limits: ParseLimits) -> ReadLimits:
    """The bounds of `traceview.core.reading` that `limits` set."""
    return ReadLimits(
        max_bytes=limits.max_inflated_bytes,
        max_ratio=limits.max_inflation_ratio,
        ratio_after_bytes=limits.ratio_checked_after_bytes,
        bomb_budget_bytes=limits.inflation_budget_bytes,
    )


def _slices(path: Location, limits: ParseLimits, warnings: list[ParseWarning]) -> Iterator[bytes]:
    """The text, `INFLATED_SLICE` bytes at a time; a plain file larger than the limit is refused before it is
    read, a compressed one as it inflates; a compressed stream cut short yields what it held, with a
    warning."""
    stream, inflating = open_bytes(path, read_limits(limits))
    with stream:
        if inflating is None:
            size = path.size() if isinstance(path, Url) else path.stat().st_size
            if size > limits.max_inflated_bytes:
                raise InputError(path, _too_large(size, limits))
        yield from _read_slices(path, stream, INFLATED_SLICE)
        if inflating is not None and inflating.truncated:
            note = (
                f"{inflating.compression.name} stream ends early at compressed byte {inflating.consumed}; "
                f"reading the {inflating.inflated} bytes it held"
            )
            warnings.append(ParseWarning(str(path), note))


def _read_slices(path: Location, file: BinaryIO, slice_bytes: int) -> Iterator[bytes]:
    while True:
        try:
            piece = file.read(slice_bytes)
        except OSError as exc:
            raise InputError(path, f"cannot read: {exc.strerror or exc}") from exc
        if not piece:
            return
        yield piece


def _too_large(size: int, limits: ParseLimits) -> str:
    return (
        f"trace text passes {limits.max_inflated_bytes} bytes ({size} read): refused "
        "(limit max_inflated_bytes; raise it with --max-trace-bytes or ParseLimits)"
    )
