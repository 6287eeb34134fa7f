"""A trace file's bytes, gunzipped a slice at a time so that a decompression bomb is refused before it fills
memory (docs/metrics.md, "Input limits"): python-isal when installed, else zlib."""

from __future__ import annotations

import zlib
from pathlib import Path
from types import ModuleType

from traceview.parsers.kineto_limits import ParseLimits

from traceview.errors import InputError, ParseWarning

_zlib: ModuleType
try:  # python-isal decompresses gzip several times faster than zlib
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover - the standard library is the fallback
    _zlib = zlib
DECOMPRESS_ERRORS: tuple[type[Exception], ...] = (zlib.error, getattr(_zlib, "error", zlib.error))

GZIP_MAGIC = b"\x1f\x8b"
COMPRESSED_SLICE = 1 << 20
INFLATED_SLICE = 16 << 20
"""At most this much text comes out of one decompression call, so a limit is passed by at most this much."""


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
    decompressor = _zlib.decompressobj(31)
    parts: list[bytes] = []
    inflated = 0
    view = memoryview(raw)
    try:
        for start in range(0, len(raw), COMPRESSED_SLICE):
            pending: bytes | memoryview = view[start : start + COMPRESSED_SLICE]
            while pending and not decompressor.eof:
                parts.append(decompressor.decompress(pending, INFLATED_SLICE))
                inflated += len(parts[-1])
                _check_inflated(path, inflated, len(raw), limits, start)
                pending = decompressor.unconsumed_tail
            if decompressor.eof:
                break
        parts.append(decompressor.flush())
    except DECOMPRESS_ERRORS as exc:
        raise InputError(path, f"gzip data is corrupt ({exc})") from exc
    data = b"".join(parts)
    del parts
    if not decompressor.eof:
        note = f"gzip stream ends early at compressed byte {len(raw)}; reading the {len(data)} bytes it held"
        return data, [ParseWarning(str(path), note)]
    return data, []


def _check_inflated(path: Path, inflated: int, compressed: int, limits: ParseLimits, at: int) -> None:
    """Refuse a file whose text passes `max_inflated_bytes`, or the ratio guard past `ratio_checked_after_bytes`."""
    where = f"compressed byte {at}"
    if inflated > limits.max_inflated_bytes:
        raise InputError(path, _too_large(inflated, limits), where=where)
    ratio = inflated / max(compressed, 1)
    if inflated > limits.ratio_checked_after_bytes and ratio > limits.max_inflation_ratio:
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
