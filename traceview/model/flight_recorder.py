"""The model of one rank's PyTorch Flight Recorder dump (docs/metrics.md, "Hang forensics"): what the rank's
process groups are, where each stood (last enqueued, started and completed collective), and the last
entries of each group's ring buffer as one polars frame.

`ENTRY_SCHEMA` is the frame's one definition: a rank's entries from any dump version are brought to it by
the parser (`traceview.parsers.flight_recorder`), fields a version did not write left null.
"""

from __future__ import annotations

import polars as pl

from traceview.core.records import record

ENTRY_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "rank": pl.Int64,
    "group": pl.String,  # the process group's name (pg_config's key; `process_group[0]` of an entry)
    "group_desc": pl.String,  # its description (`default_pg`, `undefined`, a user's label)
    "record_id": pl.Int64,
    "collective_seq": pl.Int64,  # the group's collective sequence number (1-based); null for a p2p op
    "p2p_seq": pl.Int64,  # the group's point-to-point sequence number; null for a collective
    "is_p2p": pl.Boolean,
    "op": pl.String,  # the op without the backend (`all_reduce`, `send`)
    "profiling_name": pl.String,  # as written (`gloo:all_reduce`, `nccl:send 0->1`)
    "peer": pl.Int64,  # a p2p op's peer (global rank) when the profiling name states it
    "input_sizes": pl.String,  # the tensors' shapes as text, `[[64]]`
    "input_dtypes": pl.String,
    "output_sizes": pl.String,
    "output_dtypes": pl.String,
    "state": pl.String,  # scheduled, started, completed
    "retired": pl.Boolean,
    "created_ns": pl.Int64,  # time_created_ns (wall clock, ns since the epoch)
    "started_ns": pl.Int64,  # time_discovered_started_ns; null when 0 or absent
    "completed_ns": pl.Int64,  # time_discovered_completed_ns; null when 0 or absent
    "duration_ms": pl.Float64,  # the op's measured duration when the dump has one
    "timeout_ms": pl.Int64,
    "stack": pl.String,  # the Python stack, innermost frame of the caller first, `name (file:line)`
}
"""Columns of `FlightRecorderDump.entries`, in order."""

STATUS_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "rank": pl.Int64,
    "group": pl.String,
    "last_enqueued": pl.Int64,
    "last_started": pl.Int64,
    "last_completed": pl.Int64,
}
"""Columns of `FlightRecorderDump.status`: pg_status as the dump states it (-1 for none)."""


@record
class ProcessGroupConfig:
    """A process group as one rank's dump describes it: its name, description and member ranks (global)."""

    name: str
    desc: str
    ranks: tuple[int, ...]


@record
class FlightRecorderDump:
    """One rank's dump: where it came from, its format version, when it was taken, its groups, their
    status and its last entries (`ENTRY_SCHEMA`)."""

    path: str
    rank: int
    version: str
    dumped_ns: int  # when the dump was taken: the dump's own time, else the file's modification time
    dumped_from: str  # "dump" or "file": where `dumped_ns` came from
    groups: tuple[ProcessGroupConfig, ...]
    status: pl.DataFrame  # STATUS_SCHEMA; empty when the version wrote no pg_status
    entries: pl.DataFrame  # ENTRY_SCHEMA, the last `KEEP_PER_GROUP` entries of each group
    entries_dropped: int = 0  # older entries not kept
    backend_version: str = ""  # comm_lib_version (NCCL's version; empty for gloo)
