"""Parse an NCCL_DEBUG=INFO log into a `traceview.model.nccl_log.NcclLog`, streaming (memory independent of
file size).

One pass over the physical lines. A line is cut at every record start (`host:pid:tid [dev] NCCL INFO|WARN`,
`parsers.nccl_log_patterns.RECORD_START`): text before the first start is a foreign prefix (launchers,
timestamps, markdown quoting) and is ignored, and several starts on one line are interleaved writes of several
processes. Each record body is matched against the pattern table; matched groups are appended to raw rows that
are turned into typed polars frames every `BATCH_ROWS` rows. Lines with no record start are tried against the
foreign table (PyTorch ProcessGroupNCCL lines, bare `NCCL version`), as the continuation of a record cut by a
terminal wrap (leading whitespace, joined to the unmatched record before it), or as the body of an earlier
record whose prefix was written alone (interleaving); anything else is counted in `lines_skipped`.
"""

from __future__ import annotations

import collections
import io
import zlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple, TextIO

import polars as pl
from traceview.parsers.nccl_log._frames import LineCounts, build_log
from traceview.parsers.nccl_log._patterns import (
    BODY_PATTERNS,
    COLL_LINE,
    FOREIGN_PATTERNS,
    HOST_TAIL,
    LAUNCHER_PID,
    LINE_START,
    RECORD_ANCHOR,
    Pattern,
)
from traceview.parsers.nccl_log._raw import BATCH_ROWS, RawRows
from traceview.parsers.nccl_log._totals import REDUCERS, WARNING_SOURCES, CallTally

from traceview.core.errors import InputError
from traceview.core.reading import BoundedReader, ReadLimits, open_bytes
from traceview.model.nccl_log import NcclLog

MAX_CALL_ROWS = 100_000
"""COLL lines kept as rows (`NcclLog.collectives`), the first of the log; `NcclLog.call_totals` counts them
all."""
MAX_TUNING_ROWS = 100_000
"""TUNING lines kept as rows (`NcclLog.tuning`); `NcclLog.tuning_totals` counts them all."""
MAX_WARNING_ROWS = 10_000
"""Warnings kept as rows (`NcclLog.warnings`) of each origin (`nccl_log_totals.WARNING_SOURCES`);
`NcclLog.warning_totals` counts them all."""
MAX_LINE_CHARS = 65_536
"""Longest physical line matched against the patterns; a longer one is drained unread and counted as skipped
(`NcclLog.lines_too_long`): NCCL's own lines are a few hundred characters, so it is not NCCL's."""
_DRAIN_CHARS = 1 << 20
_REPLACED = "\ufffd"
_COLL = next(pattern for pattern in BODY_PATTERNS if pattern.name == "coll")
_MAX_OPEN_HEADERS = 64
_WHITESPACE = (" ", "\t")

# Who wrote a record: (host, pid, tid, cuda_dev) as printed (None where absent).
Writer = tuple[str | None, str | None, str | None, str | None]
# Identity of one record: (line, host, pid, tid, cuda_dev), all text as printed (None where absent).
Identity = tuple[int, str | None, str | None, str | None, str | None]


class _Sink:
    """Raw rows per pattern, typed into polars frames every BATCH_ROWS rows; `limits`: rows kept
    per family."""

    def __init__(self, limits: dict[str, int]) -> None:
        self.rows: dict[Pattern, list[tuple[object, ...]]] = collections.defaultdict(list)
        self.raw = RawRows(limits, REDUCERS)

    def add(self, pattern: Pattern, row: tuple[object, ...]) -> None:
        rows = self.rows[pattern]
        rows.append(row)
        if len(rows) >= BATCH_ROWS:
            self.flush(pattern)

    def flush(self, pattern: Pattern) -> None:
        rows = self.rows.pop(pattern, [])
        if rows:
            self.raw.add(pattern, rows)

    def finish(self) -> RawRows:
        for pattern in list(self.rows):
            self.flush(pattern)
        return self.raw


class _Start(NamedTuple):
    """One record start: where it begins (host included) and ends, its writer, level and source."""

    begin: int
    end: int
    writer: Writer
    level: str
    src: str | None


def _record_starts(line: str) -> list[_Start]:
    """Every record start in `line`, left to right (several: interleaved writes)."""
    first = LINE_START.match(line)
    if first is not None and line.find("NCCL ", first.end()) < 0:
        return [
            _Start(
                0,
                first.end(),
                (first["host"], first["pid"], first["tid"], first["dev"]),
                first["level"],
                first["src"],
            )
        ]
    starts: list[_Start] = []
    low = 0
    for anchor in RECORD_ANCHOR.finditer(line):
        word_end = low + len(line[low : anchor.start()].rstrip(" "))  # from `low`: linear in the line
        word_begin = max(line.rfind(" ", low, word_end) + 1, low)
        host = HOST_TAIL.search(line, word_begin, word_end) if word_end > word_begin else None
        begin = host.start() if host is not None else anchor.start()
        writer: Writer = (None, None, None, anchor["dev"])
        if host is not None:
            writer = (host["host"], host["pid"], host["tid"], anchor["dev"])
        starts.append(_Start(begin, anchor.end(), writer, anchor["level"], anchor["src"]))
        low = anchor.end()
    return starts


class _Reader:
    """The per-line state machine: counts, the last unmatched record, prefixes still waiting for a body."""

    def __init__(self, max_call_rows: int, limits: dict[str, int]) -> None:
        self.sink = _Sink(limits)
        self.calls = CallTally(lambda row: self.sink.add(_COLL, row), max_call_rows)
        self.line_no = 0
        self.skipped = 0
        self.records = 0
        self.unrecognised = 0
        self.joined = 0
        self.tail: tuple[Identity, str] | None = None
        self.open_headers: collections.deque[Identity] = collections.deque(maxlen=_MAX_OPEN_HEADERS)
        self.processes: collections.Counter[tuple[str | None, ...]] = collections.Counter()
        self.too_long = 0
        self.replaced = 0

    def long_line(self) -> None:
        """Count one line too long to match (`MAX_LINE_CHARS`): a skipped line, and the end of any record."""
        self.line_no += 1
        self.too_long += 1
        self.skipped += 1
        self.tail = None

    def feed(self, raw: str) -> None:
        """Consume one physical line."""
        self.line_no += 1
        if "opCount" in raw:
            coll = COLL_LINE.match(raw)
            if coll is not None:  # the fast path: a whole COLL record, as the general path would read it
                self.tail = None
                self.records += 1
                groups = coll.groups()
                self.processes[groups[:4]] += 1
                self.calls.add(self.line_no, groups)
                return
        line = raw.rstrip("\r\n")
        tail, self.tail = self.tail, None
        if "NCCL" in line:
            starts = _record_starts(line)
            if starts:
                self._records(line, starts)
                return
            if self._foreign(line):
                return
        if tail is not None and line[:1] in _WHITESPACE and self._join(tail, line):
            return
        if (self.open_headers or "opCount" in line) and self._orphan(line.strip()):
            return
        self.skipped += 1

    def _records(self, line: str, starts: list[_Start]) -> None:
        bounds = [*(start.begin for start in starts), len(line)]
        for index, start in enumerate(starts):
            ident: Identity = (self.line_no, *start.writer)
            body = line[start.end : bounds[index + 1]].strip()
            self.records += 1
            self.processes[start.writer] += 1
            if start.level == "WARN":
                self.sink.raw.add_warning(ident, start.src, body)
            elif not body:
                self.open_headers.append(ident)
            elif not self._body(ident, body):
                self.unrecognised += 1
                self.tail = (ident, body)

    def _body(self, ident: Identity, body: str) -> bool:
        for pattern in BODY_PATTERNS:
            if pattern.needle in body:
                match = pattern.regex.match(body)
                if match is None:
                    continue
                if pattern is _COLL:
                    self.calls.add(ident[0], ident[1:] + match.groups())
                else:
                    self.sink.add(pattern, ident + match.groups())
                return True
        return False

    def _join(self, tail: tuple[Identity, str], line: str) -> bool:
        ident, body = tail
        if self._body(ident, body + line):
            self.joined += 1
            self.unrecognised -= 1
            return True
        return False

    def _orphan(self, line: str) -> bool:
        ident: Identity = self.open_headers[0] if self.open_headers else (0, None, None, None, None)
        if not self._body((self.line_no, *ident[1:]), line):
            return False
        if self.open_headers:
            self.open_headers.popleft()
        self.records += 1
        return True

    def _foreign(self, line: str) -> bool:
        for pattern in FOREIGN_PATTERNS:
            if pattern.needle in line:
                match = pattern.regex.search(line)
                if match is not None:
                    launcher = LAUNCHER_PID.search(line)
                    pid = launcher["pid"] if launcher else None
                    self.sink.add(pattern, (self.line_no, None, pid, None, None, *match.groups()))
                    self.records += 1
                    return True
        return False


LOG_LIMITS = ReadLimits(
    ratio_after_bytes=1 << 20,
    size_hint="limit of an NCCL log's text",
    ratio_hint="an NCCL log inflates 5 to 30 times",
)
"""How far a compressed NCCL log may inflate (docs/metrics.md, "Input limits"): the ratio is checked from the
first MiB, since a log is read line by line (a bomb of empty lines costs time, not memory)."""


def _open(path: Path) -> tuple[TextIO, BoundedReader | None]:
    """The log's text (decompressed, `traceview.core.reading`) and its decompressor (None: a plain file)."""
    stream, inflating = open_bytes(path, LOG_LIMITS)
    return io.TextIOWrapper(stream, encoding="utf-8", errors="replace", newline=None), inflating


def _lines(handle: TextIO, reader: _Reader) -> Iterator[str]:
    """The physical lines of `handle`, each read at most `MAX_LINE_CHARS` at a time: a longer line is drained
    in pieces, never held whole, and counted in `reader.long_lines` (it yields nothing)."""
    while True:
        line = handle.readline(MAX_LINE_CHARS + 1)
        if not line:
            return
        if len(line) > MAX_LINE_CHARS and not line.endswith("\n"):
            while line and not line.endswith("\n"):
                line = handle.readline(_DRAIN_CHARS)
            reader.long_line()
            continue
        if _REPLACED in line:
            reader.replaced += line.count(_REPLACED)
        yield line


def _read(source: Path, reader: _Reader) -> str | None:
    """Feed every line of `source` to `reader`; the warning of a truncated .gz (what was read is kept).

    Raises InputError when the file cannot be opened or read, or a .gz is corrupt.
    """
    handle, inflating = _open(source)
    try:
        with handle:
            for line in _lines(handle, reader):
                reader.feed(line)
    except (OSError, zlib.error) as err:
        raise InputError(source, f"cannot read NCCL log: {err}", f"line {reader.line_no + 1}") from err
    if inflating is not None and inflating.truncated:  # a compressed stream cut short: keep what was read
        return (
            f"truncated {inflating.compression.name} file (its stream ends early: cut short, or damaged): "
            f"kept "
            f"the {reader.line_no} lines read before"
        )
    return None


def parse(
    path: str | Path,
    *,
    max_call_rows: int = MAX_CALL_ROWS,
    max_tuning_rows: int = MAX_TUNING_ROWS,
    max_warning_rows: int = MAX_WARNING_ROWS,
) -> NcclLog:
    """Parse the NCCL_DEBUG log at `path` (plain text or .gz) into a validated `NcclLog`.

    The `max_*_rows` caps bound the rows kept per record family (see `NcclLog`); the totals count every
    record. Lines longer than `MAX_LINE_CHARS` are not matched (counted in `lines_too_long` and
    `lines_skipped`); invalid UTF-8 is replaced by U+FFFD (counted in `chars_replaced`); a truncated .gz keeps
    what was read, with a note in `NcclLog.notes`. Raises InputError when the file cannot be read, a .gz is
    corrupt, or it holds no NCCL record at all.
    """
    source = Path(path)
    limits = {"tuning": max_tuning_rows, **dict.fromkeys(WARNING_SOURCES, max_warning_rows)}
    reader = _Reader(max_call_rows, limits)
    truncated = _read(source, reader)
    if reader.records == 0:
        problem = f"no NCCL_DEBUG records in {reader.line_no} lines (not an NCCL_DEBUG=INFO log?)"
        raise InputError(source, f"{truncated}; {problem}" if truncated else problem)
    counts: LineCounts = {
        "lines_total": reader.line_no,
        "lines_skipped": reader.skipped,
        "lines_too_long": reader.too_long,
        "chars_replaced": reader.replaced,
        "records": reader.records,
        "records_unrecognised": reader.unrecognised,
        "lines_joined": reader.joined,
        "collective_calls_seen": reader.calls.seen,
    }
    processes = _processes_frame(reader.processes)
    raw = reader.sink.finish()
    log = build_log(str(source), raw, processes, counts, reader.calls.totals())
    return replace(log, notes=_notes(log, truncated)).validate()


def _notes(log: NcclLog, truncated: str | None) -> tuple[str, ...]:
    """What the reader had to salvage, one sentence each."""
    notes = [] if truncated is None else [truncated]
    if log.lines_too_long:
        notes.append(
            f"{log.lines_too_long} line(s) longer than {MAX_LINE_CHARS} characters not read (counted as "
            f"skipped)"
        )
    if log.chars_replaced:
        notes.append(f"{log.chars_replaced} invalid UTF-8 byte sequence(s) replaced by U+FFFD")
    return tuple(notes)


def _processes_frame(counter: collections.Counter[tuple[str | None, ...]]) -> pl.DataFrame:
    rows = [(*key, count) for key, count in counter.items()]
    frame = pl.DataFrame(
        rows,
        schema={
            "host": pl.String(),
            "pid": pl.String(),
            "tid": pl.String(),
            "cuda_dev": pl.String(),
            "records": pl.Int64(),
        },
        orient="row",
    )
    return frame.with_columns(pl.col("pid", "tid", "cuda_dev").cast(pl.Int64(), strict=False)).sort(
        "host", "pid", "tid", "cuda_dev", nulls_last=True
    )
