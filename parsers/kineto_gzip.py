"""A trace file's bytes, gunzipped a slice at a time so that a decompression bomb is refused before it fills
memory (docs/metrics.md, "Input limits"): python-isal when installed, else zlib."""

from __future__ import annotations

import zlib
from pathlib import Path
from types import ModuleType
from typing import Any

from traceview.parsers.kineto_limits import ParseLimits

from traceview.core.errors import InputError, ParseWarning

_zlib: ModuleType
try:  # python-isal decompresses gzip several times faster than zlib
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover - the standard library is the fallback
    _zlib = zlib
DECOMPRESS_ERRORS: tuple[type[Exception], ...] = (zlib.error, getattr(_zlib, "error", zlib.error))

GZIP_MAGIC = b"\x1f\x8b"
COMPRESSED_SLICE = 1 << 20
INFLATED_SLICE = 16 << 20
"""Past the size the gzip trailer states, at most this much text comes out of one call."""


def read_bytes(path: Path, limits: ParseLimits) -> tuple[bytes, list[ParseWarning]]:
    """The file's JSON bytes, gunzipped if needed; a gzip stream cut short yields what it held, with a warning.

    Raises `InputError` when the file, or its inflated text, is larger than `limits` allow.
    """
    try:
        if path.stat().st_size > limits.max_inflated_bytes:
            raise InputError(path, _too_large(path.stat().st_size, limits))
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from exc
    if not raw.startswith(GZIP_MAGIC):
        return raw, []
    return _gunzip(path, raw, limits)


def _gunzip(path: Path, raw: bytes, limits: ParseLimits) -> tuple[bytes, list[ParseWarning]]:
    """Inflate in one call up to the size the gzip trailer states (an honest file: no copy of the text), then,
    if the stream goes on, a slice at a time; refused as soon as the text passes `inflation_cap`."""
    cap = inflation_cap(len(raw), limits)
    stated = int.from_bytes(raw[-4:], "little")  # ISIZE: the inflated size modulo 2^32, if the file is whole
    decompressor = _zlib.decompressobj(31)
    try:
        parts = [decompressor.decompress(raw, min(stated, cap) + 1)]
        consumed = len(raw) - len(decompressor.unconsumed_tail)
        _check_inflated(path, len(parts[0]), len(raw), limits, consumed)
        if not decompressor.eof:
            parts += _inflate_rest(path, decompressor, len(parts[0]), len(raw), limits)
    except DECOMPRESS_ERRORS as exc:
        raise InputError(path, f"gzip data is corrupt ({exc})") from exc
    parts = [part for part in parts if part]
    data = parts[0] if len(parts) == 1 else b"".join(parts)
    del parts
    if not decompressor.eof:
        note = f"gzip stream ends early at compressed byte {len(raw)}; reading the {len(data)} bytes it held"
        return data, [ParseWarning(str(path), note)]
    return data, []


def _inflate_rest(
    path: Path, decompressor: Any, inflated: int, compressed: int, limits: ParseLimits
) -> list[bytes]:
    """What follows the first call, `COMPRESSED_SLICE` bytes in and at most `INFLATED_SLICE` out at a time."""
    rest = memoryview(decompressor.unconsumed_tail)
    offset = compressed - len(rest)
    parts: list[bytes] = []
    for start in range(0, len(rest), COMPRESSED_SLICE):
        pending: bytes | memoryview = rest[start : start + COMPRESSED_SLICE]
        end = offset + start + len(pending)
        while pending and not decompressor.eof:
            parts.append(decompressor.decompress(pending, INFLATED_SLICE))
            inflated += len(parts[-1])
            pending = decompressor.unconsumed_tail
            _check_inflated(path, inflated, compressed, limits, end - len(pending))
        if decompressor.eof:
            break
    parts.append(decompressor.flush())
    _check_inflated(path, inflated + len(parts[-1]), compressed, limits, compressed)
    return parts


def inflation_cap(compressed: int, limits: ParseLimits) -> int:
    """The most text a gzip file of `compressed` bytes may inflate to: `max_inflated_bytes`, and past
    `ratio_checked_after_bytes` no more than `max_inflation_ratio` times `compressed`."""
    by_ratio = max(limits.ratio_checked_after_bytes, int(limits.max_inflation_ratio * compressed))
    return min(limits.max_inflated_bytes, by_ratio)


def _check_inflated(path: Path, inflated: int, compressed: int, limits: ParseLimits, consumed: int) -> None:
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
