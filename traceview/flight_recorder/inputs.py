"""The dumps a `traceview hang` names, and reading them rank by rank.

`dump_paths` is the one function that turns what the user named into files: a file as it is, a folder's dump
files (not its sub-folders), a glob's matches, and the same at a URL (an object, a prefix, a glob: listed as
the other commands list URLs, `traceview.core.location.url_files`); nothing else is read. `read_dumps`
parses each, keeping those that read and naming those that did not.
"""

from __future__ import annotations

import glob
import zlib
from collections.abc import Sequence
from pathlib import Path

from traceview.core.boundary import folder_files, special_kind
from traceview.core.errors import InputError, RunError, UsageError
from traceview.core.location import Location, Url, filesystem, is_url, url_files
from traceview.core.records import record
from traceview.core.sanitize import printable
from traceview.model.flight_recorder import FlightRecorderDump
from traceview.parsers import flight_recorder

DUMP_PROBE_BYTES = 4096
"""Bytes read from a folder's file to tell a dump (a pickle, or JSON naming `pg_config` or `entries`)."""
_GZIP = b"\x1f\x8b"
_DUMP_HEADS = (b"\x80", b"{", _GZIP, b"\x28\xb5\x2f\xfd")
POOL_MIN_DUMPS, MAX_WORKERS = 64, 8
"""Dumps per worker process before a pool reads them (fewer: this process reads them); the most workers."""
_JSON_KEYS = (b'"pg_config"', b'"entries"', b'"version"')
_KINETO_KEYS = (b'"traceEvents"', b'"schemaVersion"', b'"deviceProperties"')
_COMPRESSED = (".gz", ".zst", ".bz2", ".xz")


@record
class UnreadDump:
    """A named file that could not be read as a dump, and why (one line)."""

    path: str
    reason: str
    rank: int | None  # the rank its file name states, when it states one


def _head_says_dump(head: bytes) -> bool:
    """Whether a file's first bytes are a pickle's, or JSON naming a dump's keys and not a Kineto trace's; a
    gzip file's are inflated first (a compressed trace named `rank0.json.gz` is not a dump), other
    compressed data is taken as a dump."""
    if head.startswith(_GZIP):
        try:
            head = zlib.decompressobj(wbits=31).decompress(head, DUMP_PROBE_BYTES)
        except zlib.error:
            return True  # named as unreadable when it is read
        if not head:
            return True  # too little to tell: read, and named when it is not a dump
    if head[:1] == b"{":
        return any(key in head for key in _JSON_KEYS) and not _says_kineto(head)
    return head.startswith(_DUMP_HEADS)


def _looks_like_dump(path: Path) -> bool:
    """A folder's file is read when its name ends with a rank number and its first bytes say a dump."""
    if flight_recorder.rank_of_name(path.name) is None:
        return False
    return _dump_or_unread(_head(path))


def _url_heads(files: Sequence[Url]) -> list[bytes | None]:
    """The first `DUMP_PROBE_BYTES` of each file at a URL, fetched together (fsspec's `cat_ranges`: one
    request each, concurrent on object stores); None for one that could not be read."""
    if not files:
        return []
    system, _ = filesystem(files[0].url)
    where = [filesystem(file.url)[1] for file in files]
    heads = system.cat_ranges(where, [0] * len(files), [DUMP_PROBE_BYTES] * len(files), on_error="return")
    return [head if isinstance(head, bytes) else None for head in heads]


def _url_dumps(spec: str) -> list[Location]:
    """The dumps a URL names as `dump_paths` names local ones: the object itself, a glob's matches, or the
    files under a prefix (a "folder") whose names end with a rank number and whose first bytes say a dump.
    Raises `UsageError` when it names none."""
    try:
        files = url_files(spec, flight_recorder.DUMP_NAME_ENDINGS, "Flight Recorder dumps")
    except RunError as error:
        raise UsageError(str(error)) from None
    if _is_glob(spec) or [file.url for file in files] == [spec]:
        return list(files)
    named = [file for file in files if flight_recorder.rank_of_name(file.name) is not None]
    found = [file for file, head in zip(named, _url_heads(named), strict=True) if _dump_or_unread(head)]
    if not found:
        raise UsageError(f"{printable(spec)}: a folder without Flight Recorder dumps in it")
    return list(found)


def _is_glob(spec: str) -> bool:
    return any(char in spec for char in "*?[")


def _dump_or_unread(head: bytes | None) -> bool:
    """Whether a probed file is listed: its head says a dump, or it could not be read (then it is named as
    unreadable when it is read)."""
    return head is None or _head_says_dump(head)


def _regular_file(path: Path) -> Path:
    """`path`, unless it is a system or special file (`traceview.core.boundary`): refused, never opened."""
    kind = special_kind(path)
    if kind is not None:
        raise InputError(path, f"is {kind}, not a Flight Recorder dump: refused, not read")
    return path


def dump_paths(specs: Sequence[str | Path]) -> list[Location]:
    """The dump files `specs` name (the run boundary: only these are read), each once, in order. Raises
    `UsageError` for a spec that names none."""
    found: list[Location] = []
    for spec in specs:
        path = Path(spec)
        if is_url(spec):
            found += _url_dumps(str(spec))
        elif path.is_dir():
            inside = [p for p in folder_files(path, lambda _name: True) if _looks_like_dump(p)]
            if not inside:
                raise UsageError(f"{printable(path)}: a folder without Flight Recorder dumps in it")
            found += inside
        elif path.exists():
            found.append(_regular_file(path))
        else:
            matches = sorted(Path(p) for p in glob.glob(str(spec)) if Path(p).is_file())
            if not matches:
                raise UsageError(f"{printable(spec)}: no such file, folder or glob match")
            found += matches
    return list(dict.fromkeys(found))


def _parse_one(path: Location) -> FlightRecorderDump | UnreadDump:
    """One dump parsed, or why it could not be (in a worker process: only data crosses back)."""
    try:
        return flight_recorder.parse(path)
    except InputError as error:
        return UnreadDump(str(path), error.reason, flight_recorder.rank_of_name(path.name))


def _parsed(paths: Sequence[Location], workers: int | None) -> list[FlightRecorderDump | UnreadDump]:
    """Every path parsed: in this process for a few dumps, else by a pool of `workers` processes (default:
    the usable cores), in order."""
    from traceview.core.cores import usable_cores

    count = min(workers or usable_cores(), MAX_WORKERS, len(paths) // POOL_MIN_DUMPS + 1)
    if count <= 1:
        return [_parse_one(path) for path in paths]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(count) as pool:
        return list(pool.map(_parse_one, paths, chunksize=16))


def read_dumps(
    paths: Sequence[Location], workers: int | None = None
) -> tuple[list[FlightRecorderDump], list[UnreadDump]]:
    """Each path parsed, rank by rank: the dumps read, and those that could not be (named, with the rank
    their name states); a second dump of a rank (the JSON beside the pickle) is named, not read."""
    read: dict[int, FlightRecorderDump] = {}
    unread: list[UnreadDump] = []
    for path, dump in zip(paths, _parsed(paths, workers), strict=True):
        if isinstance(dump, UnreadDump):
            unread.append(dump)
        elif dump.rank in read:
            reason = f"a second dump of rank {dump.rank} (read: {read[dump.rank].path})"
            unread.append(UnreadDump(str(path), reason, dump.rank))
        else:
            read[dump.rank] = dump
    return list(read.values()), unread


def traces_beside(
    specs: Sequence[str | Path], dumps: Sequence[Location]
) -> tuple[int, tuple[str, ...]] | None:
    """(how many named folders, local or at a URL, were looked in; the Kineto trace files in them that are
    not dumps); None when no folder was named (then nothing is said of traces)."""
    from traceview.options.manifest import traces_in

    named = {str(path) for path in dumps}
    local = [Path(spec) for spec in specs if not is_url(spec) and Path(spec).is_dir()]
    found = [
        str(p)
        for folder in local
        for p in traces_in(folder)
        if str(p) not in named and (p.name.endswith(_COMPRESSED) or _says_kineto(_head(p)))
    ]
    remote = [_url_traces(str(spec)) for spec in specs if is_url(spec) and not _is_glob(str(spec))]
    folders = [listed for listed in remote if listed is not None]
    found += [str(url) for listed in folders for url in listed if str(url) not in named]
    return (len(local) + len(folders), tuple(found)) if local or folders else None


def _url_traces(spec: str) -> list[Url] | None:
    """The Kineto traces under a URL prefix (named like traces; an uncompressed one whose first bytes name
    Kineto's keys); None when `spec` is one object, not a prefix."""
    from traceview.options.manifest import TRACE_SUFFIXES

    try:
        files = url_files(spec, TRACE_SUFFIXES, "Kineto traces")
    except RunError:
        return []
    if [file.url for file in files] == [spec]:
        return None
    plain = [file for file in files if not file.name.endswith(_COMPRESSED)]
    kineto = {file.url for file, head in zip(plain, _url_heads(plain), strict=True) if _says_kineto(head)}
    return [file for file in files if file.name.endswith(_COMPRESSED) or file.url in kineto]


def _head(path: Path) -> bytes | None:
    """A local file's first `DUMP_PROBE_BYTES` (None when it cannot be read)."""
    try:
        with path.open("rb") as handle:
            return handle.read(DUMP_PROBE_BYTES)
    except OSError:
        return None


def _says_kineto(head: bytes | None) -> bool:
    """Whether a JSON file's first bytes name Kineto's keys."""
    return head is not None and any(key in head for key in _KINETO_KEYS)
