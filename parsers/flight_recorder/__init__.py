"""Parse one rank's PyTorch Flight Recorder dump into a `traceview.model.flight_recorder.FlightRecorderDump`.

A dump is a pickle (`_dump_fr_trace`, the watchdog's `TORCH_FR_DUMP_TEMP_FILE` / older
`TORCH_NCCL_DEBUG_INFO_TEMP_FILE` files) or JSON (`_dump_fr_trace_json`), plain or compressed. The pickle
is read as data only (`_pickle.load_data`: no standard unpickler, no torch, no global but the TorchScript
list builders, nothing run), which reads it or refuses it in one line. The dump names no rank:
the rank is the dump's `rank` key when a version states one, else the number the file's name ends with
(PyTorch writes `<prefix><rank>`). Entries of every version are brought to one frame (`_fields`); each
group keeps its last `KEEP_PER_GROUP` entries.
"""

from __future__ import annotations

import gc
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import polars as pl
from traceview.parsers.flight_recorder._fields import DUMP_TIME_KEYS, STATUS_KEYS, entry_columns
from traceview.parsers.flight_recorder._pickle import load_data
from traceview.parsers.flight_recorder._pickle_values import RefusedPickle

from traceview.core.errors import InputError
from traceview.core.location import Location, Url
from traceview.core.reading import ReadLimits, open_bytes
from traceview.model.flight_recorder import (
    ENTRY_SCHEMA,
    STATUS_SCHEMA,
    FlightRecorderDump,
    ProcessGroupConfig,
)

KEEP_PER_GROUP = 128
"""Entries kept per process group of a rank: the newest (the analysis reads the last few of each)."""
DUMP_LIMITS = ReadLimits(max_bytes=2 << 30, size_hint="a Flight Recorder dump is at most a few hundred MB")
_DUMP_SUFFIXES = (".gz", ".zst", ".pickle", ".pkl", ".json", ".bin", ".txt")
DUMP_NAME_ENDINGS = (*"0123456789", *_DUMP_SUFFIXES)
"""How the name of a file that may be a dump ends (a rank number, or a dump suffix after one)."""
_TRAILING_NUMBER = re.compile(r"(\d+)$")
_PICKLE_START, _JSON_START = b"\x80", b"{"
CONFIG_NAMES: dict[str, str] = {"": "0"}
"""pg_config names that stand for another group's name: gloo in torch 2.13 writes the default group's
config under an empty name while its entries and pg_status name it `0`."""


def rank_of_name(name: str) -> int | None:
    """The number a dump's file name ends with, its suffixes (`.pickle`, `.json`, `.gz`) left out."""
    stem = name
    while stem.endswith(_DUMP_SUFFIXES):
        stem = stem.rsplit(".", 1)[0]
    found = _TRAILING_NUMBER.search(stem)
    return int(found.group(1)) if found else None


def _read(path: Location) -> bytes:
    stream, inflating = open_bytes(path, DUMP_LIMITS)
    with stream:
        try:
            data = stream.read()
            if inflating is not None and not data:
                raise InputError(path, "compressed, and nothing came out of it (cut short?)")
            return data
        except OSError as exc:
            raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
        except EOFError:
            raise InputError(path, "compressed stream cut short (truncated)") from None


def _decoded(path: Location, data: bytes) -> dict[str, Any]:
    head = data.lstrip()[:1]
    if not data:
        raise InputError(path, "empty file (not a Flight Recorder dump)")
    try:
        if data[:1] == _PICKLE_START:
            value = load_data(data)
        elif head == _JSON_START:
            value = json.loads(data)
        else:
            raise InputError(path, "not a Flight Recorder dump (neither a pickle nor JSON)")
    except RefusedPickle as refused:
        raise InputError(path, f"pickle refused: {refused}") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise InputError(path, f"not a whole JSON document ({str(error)[:80]})") from None
    if not isinstance(value, dict) or ("entries" not in value and "pg_config" not in value):
        raise InputError(path, "not a Flight Recorder dump (no `entries` and no `pg_config`)")
    return value


def _ranks(value: Any) -> tuple[int, ...]:
    if isinstance(value, str):
        value = json.loads(value) if value.strip().startswith("[") else []
    return tuple(int(rank) for rank in value) if isinstance(value, list | tuple) else ()


def _groups(path: Location, dump: dict[str, Any]) -> tuple[ProcessGroupConfig, ...]:
    config = dump.get("pg_config") or {}
    if not isinstance(config, dict):
        raise InputError(path, "pg_config is not a mapping")
    try:
        return tuple(
            ProcessGroupConfig(
                CONFIG_NAMES.get(str(name), str(name)),
                str(spec.get("desc", "")),
                _ranks(spec.get("ranks", ())),
            )
            for name, spec in config.items()
            if isinstance(spec, dict)
        )
    except (ValueError, TypeError):
        raise InputError(path, "pg_config: ranks that are not a list of numbers") from None


def _status(dump: dict[str, Any], rank: int, names: dict[str, str]) -> pl.DataFrame:
    """pg_status keyed by group id (2.10) or name, as rows under the group's name."""
    status = dump.get("pg_status") or {}
    rows = [
        {
            "rank": rank,
            "group": names.get(str(key), str(key)),
            **{column: _int_or(value.get(source), -1) for column, source in STATUS_KEYS.items()},
        }
        for key, value in (status.items() if isinstance(status, dict) else ())
        if isinstance(value, dict)
    ]
    return pl.DataFrame(rows, schema=STATUS_SCHEMA)


def _int_or(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _group_of(entry: dict[str, Any]) -> tuple[str, str]:
    group = entry.get("process_group") or ("", "")
    return (str(group[0]), str(group[1])) if len(group) >= 2 else (str(group), "")


def _newest(raw: list[Any]) -> tuple[list[int], dict[str, str]]:
    """The indexes of the newest `KEEP_PER_GROUP` entries of each group, in record order, and each group
    id's name (the entries' `pg_id`)."""
    counts: dict[str, int] = {}
    names: dict[str, str] = {}
    kept: list[int] = []
    for index in range(len(raw) - 1, -1, -1):
        entry = raw[index]
        group = _group_of(entry)[0]
        names.setdefault(str(entry.get("pg_id", group)), group)
        count = counts.get(group, 0)
        if count < KEEP_PER_GROUP:
            counts[group] = count + 1
            kept.append(index)
    kept.reverse()
    return kept, names


def _entries(path: Location, dump: dict[str, Any], rank: int) -> tuple[pl.DataFrame, dict[str, str], int]:
    """The newest `KEEP_PER_GROUP` entries of each group as an `ENTRY_SCHEMA` frame, each group id's name
    (from the entries' `pg_id`), and how many older entries were left out."""
    raw = dump.get("entries") or []
    if not isinstance(raw, list) or not all(type(entry) is dict for entry in raw):
        raise InputError(path, "entries is not a list of mappings")
    try:
        kept, names = _newest(raw)
        entries = [raw[index] for index in kept]
        groups = [_group_of(entry) for entry in entries]
        columns = {
            "rank": [rank] * len(entries),
            "group": [name for name, _ in groups],
            "group_desc": [desc for _, desc in groups],
            **entry_columns(entries, rank),
        }
        frame = pl.DataFrame({column: columns[column] for column in ENTRY_SCHEMA}, schema=ENTRY_SCHEMA)
    except (TypeError, ValueError, OverflowError, RecursionError, pl.exceptions.PolarsError):
        raise InputError(path, "entries with fields of the wrong kind") from None
    return frame, names, len(raw) - len(entries)


URL_TIME_KEYS = ("LastModified", "last_modified", "mtime", "updated", "modified")
"""Keys of an fsspec listing that state when an object at a URL was last written (S3, local, GCS, ...)."""


def _url_time_ns(url: Url) -> int | None:
    """When the object at `url` was last written, as its store's listing states it (ns since the epoch)."""
    from traceview.core.location import filesystem

    system, where = filesystem(url.url)
    try:
        info = system.info(where)
    except (OSError, ValueError):
        return None
    stated = next((info[key] for key in URL_TIME_KEYS if info.get(key) is not None), None)
    try:
        if isinstance(stated, str):
            stated = datetime.fromisoformat(stated)
        if isinstance(stated, datetime):
            return int(stated.timestamp() * 1e9)
        return int(float(stated) * 1e9) if isinstance(stated, int | float) else None
    except (ValueError, OverflowError):
        return None


def _dump_time(path: Location, dump: dict[str, Any]) -> tuple[int, str]:
    """When the dump was taken: the time it states, else its file's modification time (the object's at a
    URL), else none known."""
    stated = next((dump[key] for key in DUMP_TIME_KEYS if isinstance(dump.get(key), int)), None)
    if stated is not None:
        return int(stated), "dump"
    try:
        modified = _url_time_ns(path) if isinstance(path, Url) else path.stat().st_mtime_ns
    except OSError:
        modified = None
    return (int(modified), "file") if modified else (0, "none")


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector paused while one dump is decoded and its entries turned into columns: it
    would traverse the tens of thousands of dicts and lists a dump is made of again and again (a quarter of
    the time), and none of them is in a cycle (reference counting frees them)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _rank(path: Location, dump: dict[str, Any]) -> int:
    rank = _int_or(dump.get("rank"), -1)
    if rank < 0:
        rank = rank_of_name(path.name) if rank_of_name(path.name) is not None else -1  # type: ignore[assignment]
    if rank < 0:
        raise InputError(path, "the dump states no rank and its file name ends with no rank number")
    return rank


def parse(path: Location) -> FlightRecorderDump:
    """One rank's dump (module docstring). Raises `InputError` naming the file for an empty, truncated,
    foreign or refused file, or one whose name states no rank."""
    data = _read(path)
    with _collector_paused():  # the decoded dump is freed before the collector is back
        return _parsed(path, data)


def _parsed(path: Location, data: bytes) -> FlightRecorderDump:
    dump = _decoded(path, data)
    rank = _rank(path, dump)
    entries, names, dropped = _entries(path, dump, rank)
    groups = _groups(path, dump)
    names.update({group.name: group.name for group in groups})
    dumped_ns, dumped_from = _dump_time(path, dump)
    return FlightRecorderDump(
        path=str(path),
        rank=rank,
        version=str(dump.get("version", "")),
        dumped_ns=dumped_ns,
        dumped_from=dumped_from,
        groups=groups,
        status=_status(dump, rank, names),
        entries=entries,
        entries_dropped=dropped,
        backend_version=str(dump.get("comm_lib_version", "") or ""),
    )
