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


def _first(entry: dict[str, Any], keys: tuple[str, ...]) -> Any:
    return next((entry[key] for key in keys if key in entry), None)


def _as_int(value: Any) -> int | None:
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
    shown = [
        f"{frame.get('name', '?')} ({str(frame.get('filename', '?')).rsplit('/', 1)[-1]}:{frame.get('line')})"
        for frame in frames
        if isinstance(frame, dict) and "/torch/" not in str(frame.get("filename", ""))
    ]
    return " < ".join(shown[:STACK_FRAMES]) or None


def _column_value(column: str, raw: Any) -> Any:
    if column in _TEXTS:
        return json.dumps(raw, separators=(",", ":")) if raw is not None else None
    if column in _TIMES:
        value = _as_int(raw)
        return value if value else None
    if column == "duration_ms":
        return _as_float(raw)
    if column in ("profiling_name", "state"):
        return str(raw) if raw is not None else None
    if column in ("is_p2p", "retired"):
        return bool(raw) if raw is not None else None
    return _as_int(raw)


def entry_row(entry: dict[str, Any], rank: int) -> dict[str, Any]:
    """One entry as a row of `ENTRY_SCHEMA` (the group columns filled by the caller)."""
    row = {column: _column_value(column, _first(entry, keys)) for column, keys in ENTRY_KEYS.items()}
    name = row["profiling_name"] or ""
    op = op_of(name)
    is_p2p = row["is_p2p"] if row["is_p2p"] is not None else op in P2P_OPS
    row.update(op=op, is_p2p=is_p2p, peer=peer_of(name, rank) if is_p2p else None)
    if is_p2p and "collective_seq_id" not in entry:  # one shared counter before 2.3: its p2p number
        row["p2p_seq"], row["collective_seq"] = row["p2p_seq"] or row["collective_seq"], None
    elif is_p2p:
        row["collective_seq"] = None
    row["stack"] = stack_text(entry.get("frames"))
    return row
