"""How large a trace the command line reads (`--max-trace-bytes`), and the one place every rank file is parsed.

`load_run(spec, workers, progress, limits)` and the pipeline's map take `limits`: any object with a
`max_inflated_bytes` (the parser's own `ParseLimits` fits, and so does `TraceSizeLimit`, what the option
builds). A file whose JSON text (after gunzip) passes it is refused in one line naming the file, the size and
the option: with several files it is skipped and named, the run goes on (docs/metrics.md, "Errors and exit
codes").
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from traceview.errors import InputError
from traceview.model import RankTrace
from traceview.parsers import kineto

CHUNK_BYTES = 1 << 20


class TraceLimits(Protocol):
    """What bounds one trace file: the largest JSON text (bytes, after gunzip) read."""

    @property
    def max_inflated_bytes(self) -> int:
        """Files whose text passes this many bytes are refused."""
        ...


@dataclass(frozen=True)
class TraceSizeLimit:
    """The limit `--max-trace-bytes N` sets."""

    max_inflated_bytes: int


def text_bytes_past(path: Path, limit: int) -> int | None:
    """The size of `path`'s text when it passes `limit` (a gzip file inflated as a stream, never held), else
    None. A gzip stream that ends early is counted as far as it goes (the parser says where it ends)."""
    if not path.name.endswith(".gz"):
        size = path.stat().st_size
        return size if size > limit else None
    inflated = 0
    try:
        with gzip.open(path, "rb") as stream:
            while chunk := stream.read(CHUNK_BYTES):
                inflated += len(chunk)
                if inflated > limit:
                    return inflated
    except (OSError, EOFError, zlib.error):
        return None  # not gzip after all, or cut short: the parser names the problem
    return None


def parse_rank(path: str | Path, limits: TraceLimits | None = None) -> RankTrace:
    """Parse one rank file, refusing it first when its text passes `limits`. Raises `InputError`."""
    if limits is not None:
        try:
            size = text_bytes_past(Path(path), limits.max_inflated_bytes)
        except OSError as exc:
            raise InputError(path, f"cannot be read: {exc.strerror or exc}") from exc
        if size is not None:
            raise InputError(
                path,
                f"its text passes {limits.max_inflated_bytes} bytes ({size} read so far): refused "
                "(raise --max-trace-bytes to read it)",
            )
    return kineto.parse(path)
