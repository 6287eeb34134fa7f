"""The dumps a `traceview hang` names, and reading them rank by rank.

`dump_paths` is the one function that turns what the user named into files: a file as it is, a folder's dump
files (not its sub-folders), a glob's matches, a URL; nothing else is read. `read_dumps` parses each, keeping
those that read and naming those that did not.
"""

from __future__ import annotations

import glob
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from traceview.core.boundary import folder_files, special_kind
from traceview.core.errors import InputError, UsageError
from traceview.core.location import Location, is_url, location
from traceview.core.sanitize import printable
from traceview.model.flight_recorder import FlightRecorderDump
from traceview.parsers import flight_recorder

DUMP_PROBE_BYTES = 4096
"""Bytes read from a folder's file to tell a dump (a pickle, or JSON naming `pg_config` or `entries`)."""
_DUMP_HEADS = (b"\x80", b"{", b"\x1f\x8b", b"\x28\xb5\x2f\xfd")
POOL_MIN_DUMPS, MAX_WORKERS = 64, 8
"""Dumps per worker process before a pool reads them (fewer: this process reads them); the most workers."""
_JSON_KEYS = (b'"pg_config"', b'"entries"', b'"version"')
_KINETO_KEYS = (b'"traceEvents"', b'"schemaVersion"', b'"deviceProperties"')
_COMPRESSED = (".gz", ".zst", ".bz2", ".xz")


@dataclass(frozen=True)
class UnreadDump:
    """A named file that could not be read as a dump, and why (one line)."""

    path: str
    reason: str
    rank: int | None  # the rank its file name states, when it states one


def _looks_like_dump(path: Path) -> bool:
    """A folder's file is read when its name ends with a rank number and its first bytes are a pickle's,
    compressed data, or JSON naming a dump's keys."""
    if flight_recorder.rank_of_name(path.name) is None:
        return False
    try:
        with path.open("rb") as handle:
            head = handle.read(DUMP_PROBE_BYTES)
    except OSError:
        return True  # named as unreadable when it is read
    if head[:1] == b"{":
        return any(key in head for key in _JSON_KEYS)
    return head.startswith(_DUMP_HEADS)


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
            found.append(location(spec))
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
    """(how many named folders were looked in, the Kineto trace files in them that are not dumps); None when
    no folder was named (then nothing is said of traces)."""
    from traceview.options.manifest import traces_in

    folders = [Path(spec) for spec in specs if not is_url(spec) and Path(spec).is_dir()]
    if not folders:
        return None
    named = {str(path) for path in dumps}
    found = [
        str(p)
        for folder in folders
        for p in traces_in(folder)
        if str(p) not in named and (p.name.endswith(_COMPRESSED) or _says_kineto(p))
    ]
    return len(folders), tuple(found)


def _says_kineto(path: Path) -> bool:
    """Whether a JSON file's first bytes name Kineto's keys."""
    try:
        with path.open("rb") as handle:
            head = handle.read(DUMP_PROBE_BYTES)
    except OSError:
        return False
    return any(key in head for key in _KINETO_KEYS)
