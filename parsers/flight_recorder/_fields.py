"""The fields of a Flight Recorder entry across the dump versions PyTorch 2.x wrote, as data: for each column
of `traceview.model.flight_recorder.ENTRY_SCHEMA`, the keys that hold it, newest first.

Versions modelled (docs/metrics.md, "Hang forensics"): before 2.3 an entry had one `seq_id` (collectives
and point-to-point ops counted together) and no pg_status; 2.3 split it into `collective_seq_id` and
`p2p_seq_id`; 2.4 added pg_status and the sizes of all-to-all; later versions added `is_p2p`,
`thread_name`, `timeout_ms`; 2.10 is what torch 2.13 writes. A key a version did not write leaves the
column null.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

ENTRY_KEYS: dict[str, tuple[str, ...]] = {
    "record_id": ("record_id",),
    "collective_seq": ("collective_seq_id", "seq_id"),
    "p2p_seq": ("p2p_seq_id",),
    "is_p2p": ("is_p2p",),
    "profiling_name": ("profiling_name",),
    "input_sizes": ("input_sizes",),
    "input_dtypes": ("input_dtypes",),
    "output_sizes": ("output_sizes",),
    "output_dtypes": ("output_dtypes",),
    "state": ("state",),
    "retired": ("retired",),
    "created_ns": ("time_created_ns",),
    "started_ns": ("time_discovered_started_ns",),
    "completed_ns": ("time_discovered_completed_ns",),
    "duration_ms": ("duration_ms",),
    "timeout_ms": ("timeout_ms",),
}
"""Column -> the entry keys that hold it, newest first."""

STATUS_KEYS: dict[str, str] = {
    "last_enqueued": "last_enqueued_collective",
    "last_started": "last_started_collective",
    "last_completed": "last_completed_collective",
}
"""pg_status column -> its key."""

P2P_OPS = frozenset({"send", "recv", "isend", "irecv", "recv_anysource"})
"""Ops that are point-to-point (for a version that wrote no `is_p2p`)."""

DUMP_TIME_KEYS: tuple[str, ...] = ("dump_time_ns", "dump_ts", "timestamp_ns")
"""Top-level keys a dump may state its own time in (ns since the epoch); none in 2.10."""

STACK_FRAMES = 4
"""Frames of an entry's Python stack kept: the innermost outside torch itself."""

_PEER = re.compile(r"(\d+)\s*(->|<-)\s*(\d+)")
_TIMES = frozenset({"started_ns", "completed_ns"})
_TEXTS = frozenset({"input_sizes", "input_dtypes", "output_sizes", "output_dtypes"})


def _as_int(value: Any) -> int | None:
    if type(value) is int:
        return value
    if isinstance(value, bool) or value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _as_float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def op_of(profiling_name: str) -> str:
    """`nccl:send 0->1` -> `send`; `gloo:all_reduce` -> `all_reduce`."""
    return profiling_name.partition(":")[2].split(" ")[0] if ":" in profiling_name else profiling_name


def peer_of(profiling_name: str, rank: int) -> int | None:
    """The peer of a p2p op whose name states `a->b` or `a<-b` (the rank that is not `rank`)."""
    found = _PEER.search(profiling_name)
    if found is None:
        return None
    first, second = int(found.group(1)), int(found.group(3))
    return second if first == rank else first


def stack_text(frames: Any) -> str | None:
    """The innermost `STACK_FRAMES` frames outside torch, `name (file:line)`, joined by ` < `."""
    if not isinstance(frames, list):
        return None
    shown: list[str] = []
    for frame in frames:
        if isinstance(frame, dict) and "/torch/" not in str(frame.get("filename", "")):
            file = str(frame.get("filename", "?")).rsplit("/", 1)[-1]
            shown.append(f"{frame.get('name', '?')} ({file}:{frame.get('line')})")
            if len(shown) == STACK_FRAMES:
                break
    return " < ".join(shown) or None


_AS_TEXT = json.JSONEncoder(separators=(",", ":")).encode


def _as_json(values: list[Any]) -> list[str | None]:
    """Sizes and dtypes as JSON text; a value's text computed once per distinct value (its `repr`: the
    loader builds only lists, tuples, dicts, strings and numbers, whose reprs tell them apart)."""
    texts: dict[str, str] = {}
    out: list[str | None] = []
    for value in values:
        if value is None:
            out.append(None)
            continue
        key = repr(value)
        text = texts.get(key)
        if text is None:
            text = texts[key] = _AS_TEXT(value)
        out.append(text)
    return out


def _as_ints(values: list[Any]) -> list[int | None]:
    return [value if type(value) is int else _as_int(value) for value in values]


def _as_times(values: list[Any]) -> list[int | None]:
    return [(value if type(value) is int else _as_int(value)) or None for value in values]


def _as_floats(values: list[Any]) -> list[float | None]:
    return [_as_float(value) for value in values]


def _as_strs(values: list[Any]) -> list[str | None]:
    return [str(value) if value is not None else None for value in values]


def _as_bools(values: list[Any]) -> list[bool | None]:
    return [bool(value) if value is not None else None for value in values]


_CONVERTERS: dict[str, Callable[[list[Any]], list[Any]]] = {
    **dict.fromkeys(_TEXTS, _as_json),
    **dict.fromkeys(_TIMES, _as_times),
    "duration_ms": _as_floats,
    **dict.fromkeys(("profiling_name", "state"), _as_strs),
    **dict.fromkeys(("is_p2p", "retired"), _as_bools),
}
"""Column -> how the entries' values become the column's (numbers by default)."""


def _converted(column: str, values: list[Any]) -> list[Any]:
    convert: Callable[[list[Any]], list[Any]] = _CONVERTERS.get(column, _as_ints)
    return convert(values)


def _raw(entries: list[dict[str, Any]], keys: tuple[str, ...]) -> list[Any]:
    """Each entry's value of the first of `keys` it holds (None when it holds none)."""
    if len(keys) == 1:
        return [entry.get(keys[0]) for entry in entries]
    return [next((entry[key] for key in keys if key in entry), None) for entry in entries]


def entry_columns(entries: list[dict[str, Any]], rank: int) -> dict[str, list[Any]]:
    """The entries as the columns of `ENTRY_SCHEMA` (the group columns filled by the caller), built column
    by column: each value converted as `_CONVERTERS` says, then the op, whether it is p2p, its peer, the
    sequence numbers of a p2p op and the stack."""
    columns = {column: _converted(column, _raw(entries, keys)) for column, keys in ENTRY_KEYS.items()}
    names = [name or "" for name in columns["profiling_name"]]
    ops_of = {name: op_of(name) for name in set(names)}
    columns["op"] = [ops_of[name] for name in names]
    columns["is_p2p"] = [
        stated if stated is not None else op in P2P_OPS
        for stated, op in zip(columns["is_p2p"], columns["op"], strict=True)
    ]
    columns["peer"] = [
        peer_of(name, rank) if p2p else None for name, p2p in zip(names, columns["is_p2p"], strict=True)
    ]
    for index in (i for i, p2p in enumerate(columns["is_p2p"]) if p2p):
        collective, p2p_seq = columns["collective_seq"], columns["p2p_seq"]
        if "collective_seq_id" not in entries[index]:  # one shared counter before 2.3: its p2p number
            p2p_seq[index] = p2p_seq[index] or collective[index]
        collective[index] = None
    columns["stack"] = [stack_text(entry.get("frames")) for entry in entries]
    return columns
