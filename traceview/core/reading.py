"""Input files opened safely: what kind of file a path is, checked before it is opened, and its bytes
decompressed within bounds (docs/metrics.md, "Input limits"). Every reader of an input (traces, NCCL logs,
run.json, saved summaries, thresholds files) goes through here.

- `check_kind(path)`: a system file (under `/proc`, `/sys`, `/dev`: `traceview.core.boundary`) and anything
  but a regular file is refused before it is opened (a folder, a FIFO, whose open
  waits for a writer that may never come, a socket, a device such as `/dev/zero`, which never ends), and so is
  a sparse file whose holes make up most of it (it would read as gigabytes of zeros it does not hold).
- `COMPRESSIONS`: the compressed formats, told by their magic bytes (else their suffix): gzip, bzip2 and xz
  are read; zstd when the `zstandard` package is installed (`pip install 'traceview[zstd]'`); lz4, zip, 7z,
  brotli and compress are named and refused.
- `open_bytes(path, limits)`: the file's bytes, decompressed, as a binary stream that raises `InputError` once
  the text passes `limits.max_bytes`, or, past `limits.ratio_after_bytes`, once it is more than
  `limits.max_ratio` times the compressed bytes read so far and the whole file would produce more than
  `limits.bomb_budget_bytes` at that ratio (a decompression bomb: real traces and logs inflate 5 to 30 times,
  a bomb about 1,000 times; a 10 MB line that compresses 1,000 times is no bomb, it stays within the budget).
"""

from __future__ import annotations

import bz2
import errno
import io
import lzma
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, BinaryIO

from traceview.core.boundary import kind_of, system_tree
from traceview.core.errors import InputError
from traceview.core.location import Location, Url, size_of
from traceview.core.records import record

GIB, MIB = 2**30, 2**20
SPARSE_MIN_BYTES = 64 * MIB
"""Files at least this large are checked for holes (smaller ones cost little to read whatever they hold)."""
SPARSE_STORED_SHARE = 1 / 64
"""A file whose data extents hold less than this share of its size is refused as sparse."""
MAX_EXTENTS = 4096
"""Data extents counted at most when a file is checked for holes (past them it is taken as dense)."""
MAGIC_BYTES = 6
"""Bytes read to tell a compressed format (the longest magic number)."""


@record
class ReadLimits:
    """How much one input may inflate to (docs/metrics.md, "Input limits"); `size_hint` says how to raise
    `max_bytes` (named in the refusal)."""

    max_bytes: int = 16 * GIB
    max_ratio: float = 200.0
    ratio_after_bytes: int = 4 * MIB
    bomb_budget_bytes: int = 512 * MIB
    size_hint: str = "limit max_inflated_bytes; raise it with --max-trace-bytes or ParseLimits"
    ratio_hint: str = (
        "limits max_inflation_ratio, ratio_checked_after_bytes and inflation_budget_bytes; raise them with "
        "ParseLimits"
    )


RAW_CHUNK = 64 << 10
"""Compressed bytes read at a time (what the ratio is measured against runs ahead by at most this much)."""


class Inflating:
    """The decompressed bytes of a stream of one or more members (gzip, bzip2, xz), `size` bytes at most per
    `read`: a decompressor object (`zlib.decompressobj`, `bz2.BZ2Decompressor`, `lzma.LZMADecompressor`)
    fed `RAW_CHUNK` bytes at a time. A stream that ends before its end-of-stream marker raises `EOFError`
    once every byte it held has been returned; bytes after the last member that do not start another are
    ignored."""

    def __init__(self, raw: BinaryIO, new: Callable[[], Any], magic: bytes) -> None:
        self.raw, self.new, self.magic = raw, new, magic
        self.decompressor = new()
        self.pending = b""
        self.consumed = 0
        """Compressed bytes the decompressors have taken (zlib: exactly; bzip2, xz: every byte fed)."""

    def _next_member(self) -> bool:
        tail = self.decompressor.unused_data + self.pending or self.raw.read(RAW_CHUNK)
        if not tail.startswith(self.magic):
            return False
        self.decompressor, self.pending = self.new(), tail
        return True

    def read(self, size: int = -1) -> bytes:
        """Up to `size` decompressed bytes; b"" at the end."""
        size = size if size > 0 else RAW_CHUNK
        out = b""
        while not out:
            decompressor = self.decompressor
            if decompressor.eof:
                if not self._next_member():
                    return b""
                continue
            if not self.pending and getattr(decompressor, "needs_input", True):
                self.pending = self.raw.read(RAW_CHUNK)
                if not self.pending:
                    raise EOFError("the compressed stream ends before its end-of-stream marker")
            given = len(self.pending)
            out = decompressor.decompress(self.pending, size)
            self.pending = getattr(decompressor, "unconsumed_tail", b"")
            self.consumed += given - len(self.pending)
        return out

    def close(self) -> None:
        """Nothing of its own to close (the raw file is closed by its owner)."""


def _zlib_module() -> Any:
    try:  # python-isal decompresses gzip several times faster than zlib
        from isal import isal_zlib

        return isal_zlib
    except ImportError:  # pragma: no cover - the standard library is the fallback
        import zlib

        return zlib


def _gzip_reader(raw: BinaryIO) -> Inflating:
    module = _zlib_module()
    return Inflating(raw, lambda: module.decompressobj(31), b"\x1f\x8b")


def _zstd_reader(raw: BinaryIO) -> IO[bytes]:
    try:
        import zstandard  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        raise ImportError("pip install 'traceview[zstd]'") from None
    reader: IO[bytes] = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
    return reader


@record
class Compression:
    """A compressed format: its name, magic bytes, usual suffixes and how to read it (None: not read)."""

    name: str
    magic: bytes
    suffixes: tuple[str, ...]
    reader: Callable[[BinaryIO], IO[bytes] | Inflating] | None


COMPRESSIONS: tuple[Compression, ...] = (
    Compression("gzip", b"\x1f\x8b", (".gz",), _gzip_reader),
    Compression("bzip2", b"BZh", (".bz2",), lambda raw: Inflating(raw, bz2.BZ2Decompressor, b"BZh")),
    Compression(
        "xz", b"\xfd7zXZ\x00", (".xz",), lambda raw: Inflating(raw, lzma.LZMADecompressor, b"\xfd7zXZ")
    ),
    Compression("zstd", b"\x28\xb5\x2f\xfd", (".zst", ".zstd"), _zstd_reader),
    Compression("lz4", b"\x04\x22\x4d\x18", (".lz4",), None),
    Compression("zip", b"PK\x03\x04", (".zip",), None),
    Compression("7z", b"7z\xbc\xaf\x27\x1c", (".7z",), None),
    Compression("brotli", b"", (".br",), None),
    Compression("compress", b"\x1f\x9d", (".Z",), None),
)
"""Every compressed format met, in the order they are tried."""
COMPRESSED_SUFFIXES: tuple[str, ...] = tuple(s for c in COMPRESSIONS for s in c.suffixes)


def compression_of(head: bytes, name: str) -> Compression | None:
    """The format `head` (the file's first bytes) starts with, else the one its name's suffix says; None for
    an uncompressed file."""
    by_magic = next((c for c in COMPRESSIONS if c.magic and head.startswith(c.magic)), None)
    if by_magic is not None:
        return by_magic
    return next((c for c in COMPRESSIONS if not c.magic and name.endswith(c.suffixes)), None)


def with_compressed(suffixes: tuple[str, ...]) -> tuple[str, ...]:
    """`suffixes`, and each followed by every compressed format's suffix (`.json` -> `.json.zst`, ...)."""
    return (*suffixes, *(s + c for s in suffixes for c in COMPRESSED_SUFFIXES))


def check_kind(path: Location) -> None:
    """Refuse, before it is opened, a path that is not a regular file, or a sparse file that is mostly holes.
    Raises `InputError` naming the file and what it is; a URL is left to its file system."""
    if isinstance(path, Url):
        return
    try:
        found = os.stat(path)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    kind = kind_of(found.st_mode)
    if kind is not None:
        raise InputError(path, f"{kind}, not a regular file: not read")
    tree = system_tree(path)
    if tree is not None:  # /proc/self/environ is a regular file
        raise InputError(path, f"a system file (under {tree}), not a run's file: not read")
    if found.st_size >= SPARSE_MIN_BYTES and found.st_blocks * 512 < found.st_size * SPARSE_STORED_SHARE:
        stored = stored_bytes(path, found.st_size)
        if stored < found.st_size * SPARSE_STORED_SHARE:
            raise InputError(
                path,
                f"a sparse file: {found.st_size} bytes of which {stored} are stored (the rest are holes that "
                "read as zeros): not read",
            )


def stored_bytes(path: Path, size: int) -> int:
    """The bytes of `path` held in data extents (`SEEK_DATA`/`SEEK_HOLE`); `size` where the file system does
    not say, or past `MAX_EXTENTS` extents."""
    if not hasattr(os, "SEEK_DATA"):  # pragma: no cover - every Linux has it
        return size
    handle = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        stored, offset = 0, 0
        for _ in range(MAX_EXTENTS):
            try:
                start = os.lseek(handle, offset, os.SEEK_DATA)
            except OSError as exc:
                return stored if exc.errno == errno.ENXIO else size  # ENXIO: no data past `offset`
            offset = os.lseek(handle, start, os.SEEK_HOLE)
            stored += offset - start
            if offset >= size:
                return stored
        return size
    finally:
        os.close(handle)


class BoundedReader(io.RawIOBase):
    """A decompressed stream that refuses to inflate past `limits`: every read is checked against
    `max_bytes` and, past `ratio_after_bytes`, against `max_ratio` times the compressed bytes read so far.
    A stream cut short ends where its data ends: `truncated` is set (the reader decides what that means)."""

    def __init__(self, path: Location, raw: BinaryIO, compression: Compression, limits: ReadLimits) -> None:
        super().__init__()
        assert compression.reader is not None
        self.path, self.raw, self.limits, self.compression = path, raw, limits, compression
        self.inner = compression.reader(raw)
        self.inflated = 0
        self.truncated = False
        self.compressed_size = size_of(path)
        """The compressed file's size (0: unknown), by which the bytes it would produce are projected."""

    def readable(self) -> bool:
        """Always: a reader."""
        return True

    def readinto(self, buffer: Any) -> int:
        """Fill `buffer` with decompressed bytes (0 at the end), each read checked against the limits."""
        if self.truncated:
            return 0
        try:
            piece = self.inner.read(len(buffer))
        except EOFError:  # the stream ends before its end-of-stream marker
            self.truncated = True
            return 0
        except OSError as exc:
            if exc.errno is None:  # a format error (BadGzipFile and the like), not the system's
                raise self._corrupt(exc) from None
            raise InputError(self.path, f"cannot read: {exc.strerror or exc}") from None
        except Exception as exc:  # each decompressor has its own errors (zlib.error, LZMAError, ZstdError)
            if isinstance(exc, InputError | MemoryError):
                raise
            raise self._corrupt(exc) from None
        size = len(piece)
        buffer[:size] = piece
        self.inflated += size
        self._check()
        return size

    def _corrupt(self, error: Exception) -> InputError:
        problem = f"{self.compression.name} data is corrupt ({error})"
        return InputError(self.path, problem, where=f"compressed byte {self.consumed}")

    @property
    def consumed(self) -> int:
        """Compressed bytes consumed so far: the decompressor's count where it keeps one, else the file's
        position."""
        counted = getattr(self.inner, "consumed", None)
        if isinstance(counted, int):
            return counted
        try:
            return int(self.raw.tell())
        except (OSError, ValueError):
            return 0

    def _check(self) -> None:
        limits, consumed = self.limits, max(self.consumed, 1)
        where = f"compressed byte {consumed}"
        if self.inflated > limits.max_bytes:
            problem = (
                f"text passes {limits.max_bytes} bytes ({self.inflated} read): refused ({limits.size_hint})"
            )
            raise InputError(self.path, problem, where=where)
        if self.inflated > limits.ratio_after_bytes and self.inflated > limits.max_ratio * consumed:
            projected = self.projected_bytes(consumed)
            if projected <= limits.bomb_budget_bytes:
                return  # a text that compresses well but stays within the budget is no bomb
            known = projected < float("inf")
            toward = f"toward about {int(projected)} bytes" if known else "of unknown total size"
            problem = (
                f"{self.compression.name} inflates more than {limits.max_ratio:g} times past "
                f"{limits.ratio_after_bytes} bytes ({self.inflated} bytes from {consumed}, {toward}, "
                f"past the budget of {limits.bomb_budget_bytes}): a decompression bomb? ({limits.ratio_hint})"
            )
            raise InputError(self.path, problem, where=where)

    def projected_bytes(self, consumed: int) -> float:
        """The bytes the whole file would produce at the ratio seen so far (infinite when its compressed size
        is unknown), never less than those produced already."""
        if self.compressed_size <= 0:
            return float("inf")
        return max(self.inflated, self.inflated / consumed * max(self.compressed_size, consumed))

    def close(self) -> None:
        """Close the decompressor and the file."""
        try:
            self.inner.close()
        finally:
            self.raw.close()
            super().close()


def _open_raw(path: Location) -> BinaryIO:
    if isinstance(path, Url):
        return path.open()  # type: ignore[return-value]
    try:
        return path.open("rb")
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None


def open_bytes(path: Location, limits: ReadLimits) -> tuple[BinaryIO, BoundedReader | None]:
    """The file's bytes, decompressed when it is compressed (`COMPRESSIONS`), and the bounded decompressing
    reader (None for a plain file, whose size the caller checks). Raises `InputError` for a path that is not a
    regular file (`check_kind`), a compressed format not read, or a file that cannot be opened."""
    check_kind(path)
    raw = _open_raw(path)
    try:
        head = raw.read(MAGIC_BYTES)
        raw.seek(0)
    except OSError as exc:
        raw.close()
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    found = compression_of(head, str(path.name))
    named = next((c for c in COMPRESSIONS if c.magic and str(path.name).endswith(c.suffixes)), None)
    if named is not None and found is not named:
        raw.close()
        held = f"{found.name} data" if found is not None else "no compressed data (not its magic bytes)"
        raise InputError(path, f"named as {named.name} ({named.suffixes[0]}) but holds {held}: not read")
    if found is None:
        return raw, None
    try:
        if found.reader is None:
            raise ImportError(f"decompress it first ({found.name} is not read)")
        reader = BoundedReader(path, raw, found, limits)
    except ImportError as exc:
        raw.close()
        raise InputError(path, f"{found.name}-compressed: not read: {exc}") from None
    return io.BufferedReader(reader, 1 << 20), reader
