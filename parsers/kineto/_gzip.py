"""A trace file's text, read and gunzipped a slice at a time, so that a decompression bomb is refused before it
fills memory and a trace larger than memory can be decoded as it is read (docs/metrics.md, "Input limits"):
python-isal when installed, else zlib."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import BinaryIO

from traceview.parsers.kineto.limits import ParseLimits

from traceview.core.errors import InputError, ParseWarning
from traceview.core.location import Location, Url

_zlib: ModuleType
try:  # python-isal decompresses gzip several times faster than zlib
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover - the standard library is the fallback
    _zlib = zlib
DECOMPRESS_ERRORS: tuple[type[Exception], ...] = (zlib.error, getattr(_zlib, "error", zlib.error))

GZIP_MAGIC = b"\x1f\x8b"
COMPRESSED_SLICE = 4 << 20
INFLATED_SLICE = 16 << 20
"""At most this much text comes out of one call (and one read of a plain file)."""


@dataclass
class TraceText:
    """A trace file's JSON text, gunzipped if needed: `head`, its first bytes (the whole text when `rest` is None),
    then `rest`, the following slices, read as they are asked for. `warnings` receives a gzip stream cut short
    once it is met. Every slice is checked against `limits` before the next is read."""

    head: bytes
    rest: Iterator[bytes] | None
    warnings: list[ParseWarning] = field(default_factory=list)


def read_text(path: Location, limits: ParseLimits, whole_up_to: int | None = None) -> TraceText:
    """The file's text: whole when it is at most `whole_up_to` bytes (default: any size the limits allow), else
    its first `whole_up_to` bytes and an iterator over the rest. Raises `InputError` when the file, or its
    inflated text, is larger than `limits` allow, or when it cannot be read."""
    whole_up_to = limits.max_inflated_bytes if whole_up_to is None else whole_up_to
    size, file = _opened(path, limits)
    text = TraceText(b"", None)
    slices = _slices(path, file, size, limits, text.warnings)
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


def _opened(path: Location, limits: ParseLimits) -> tuple[int, BinaryIO]:
    """The file's size and the file opened (a local path, or a URL through fsspec); refused past the limits."""
    try:
        size = path.size() if isinstance(path, Url) else path.stat().st_size
        if size > limits.max_inflated_bytes:
            raise InputError(path, _too_large(size, limits))
        return size, path.open() if isinstance(path, Url) else path.open("rb")  # type: ignore[return-value]
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from exc


def _slices(
    path: Location, file: BinaryIO, size: int, limits: ParseLimits, warnings: list[ParseWarning]
) -> Iterator[bytes]:
    with file:
        magic = file.read(len(GZIP_MAGIC))
        file.seek(0)
        if magic != GZIP_MAGIC:
            yield from _read_slices(path, file, INFLATED_SLICE)
        else:
            yield from _inflated_slices(path, file, size, limits, warnings)


def _read_slices(path: Location, file: BinaryIO, slice_bytes: int) -> Iterator[bytes]:
    while True:
        try:
            piece = file.read(slice_bytes)
        except OSError as exc:
            raise InputError(path, f"cannot read: {exc.strerror or exc}") from exc
        if not piece:
            return
        yield piece


def _inflated_slices(
    path: Location, file: BinaryIO, compressed: int, limits: ParseLimits, warnings: list[ParseWarning]
) -> Iterator[bytes]:
    """The inflated text, `COMPRESSED_SLICE` bytes in and at most `INFLATED_SLICE` out at a time; refused as soon
    as it passes `inflation_cap`; a stream cut short yields what it held, with a warning."""
    decompressor = _zlib.decompressobj(31)
    inflated = consumed = 0
    try:
        for compressed_slice in _read_slices(path, file, COMPRESSED_SLICE):
            consumed += len(compressed_slice)
            pending = compressed_slice
            while pending and not decompressor.eof:
                out = decompressor.decompress(pending, INFLATED_SLICE)
                pending = decompressor.unconsumed_tail
                inflated += len(out)
                _check_inflated(path, inflated, compressed, limits, consumed - len(pending))
                if out:
                    yield out
            if decompressor.eof:
                break
        out = decompressor.flush()
    except DECOMPRESS_ERRORS as exc:
        raise InputError(path, f"gzip data is corrupt ({exc})") from exc
    _check_inflated(path, inflated + len(out), compressed, limits, compressed)
    if out:
        yield out
    if not decompressor.eof:
        note = f"gzip stream ends early at compressed byte {compressed}; reading the {inflated + len(out)} bytes it held"
        warnings.append(ParseWarning(str(path), note))


def inflation_cap(compressed: int, limits: ParseLimits) -> int:
    """The most text a gzip file of `compressed` bytes may inflate to: `max_inflated_bytes`, and past
    `ratio_checked_after_bytes` no more than `max_inflation_ratio` times `compressed`."""
    by_ratio = max(limits.ratio_checked_after_bytes, int(limits.max_inflation_ratio * compressed))
    return min(limits.max_inflated_bytes, by_ratio)


def _check_inflated(
    path: Location, inflated: int, compressed: int, limits: ParseLimits, consumed: int
) -> None:
    """Refuse a file whose text passes `inflation_cap`, naming the limit it passed."""
    if inflated <= inflation_cap(compressed, limits):
        return
    where = f"compressed byte {consumed}"
    if inflated > limits.max_inflated_bytes:
        raise InputError(path, _too_large(inflated, limits), where=where)
    problem = (
        f"gzip inflates more than {limits.max_inflation_ratio:g} times past "
        f"{limits.ratio_checked_after_bytes} bytes ({inflated} bytes from {compressed}): a decompression bomb? "
        "(limits max_inflation_ratio and ratio_checked_after_bytes; raise them with ParseLimits)"
    )
    raise InputError(path, problem, where=where)


def _too_large(size: int, limits: ParseLimits) -> str:
    return (
        f"trace text passes {limits.max_inflated_bytes} bytes ({size} read): refused "
        "(limit max_inflated_bytes; raise it with --max-trace-bytes or ParseLimits)"
    )
