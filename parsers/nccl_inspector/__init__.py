"""Read NCCL Inspector's per-collective JSON output (docs/metrics.md, "NCCL Inspector").

NCCL Inspector (NCCL's profiler plugin `plugins/profiler/inspector`) writes, per process, a stream of JSON
objects, one per completed collective per communicator: `header` (`id`: the communicator's hash,
`comm_name`, `rank` within the communicator, `n_ranks`, `nnodes`), `metadata`
(`inspector_output_format_version`, `dump_timestamp_us`, `hostname`, `pid`, ...) and `coll_perf` (`coll`,
`coll_sn`, `coll_msg_size_bytes`, `coll_exec_time_us`, `coll_timing_source`, `coll_algobw_gbs`,
`coll_busbw_gbs`; with `NCCL_INSPECTOR_DUMP_VERBOSE=1` also `event_trace_sn`/`event_trace_ts`, not read).
Only output format `INSPECTOR_FORMAT` is read: a record of another version refuses the file in one line. Its
Prometheus mode (`NCCL_INSPECTOR_PROM_DUMP=1`: bucketed gauges, no per-collective record) is not read.
The objects may be written one per line or pretty-printed; they are read one after another.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from traceview.core.errors import InputError
from traceview.core.reading import ReadLimits, open_bytes
from traceview.core.vocab import canonical_collective_expr

INSPECTOR_FORMAT = "v4.0"
"""The one `metadata.inspector_output_format_version` read."""

INSPECTOR_LIMITS = ReadLimits(max_bytes=4 << 30, size_hint="an NCCL Inspector file over 4 GiB is not read")

RECORD_SCHEMA: dict[str, pl.DataType] = {
    "file": pl.Utf8(),
    "comm_id": pl.Utf8(),
    "comm_name": pl.Utf8(),
    "comm_rank": pl.Int64(),
    "n_ranks": pl.Int64(),
    "nnodes": pl.Int64(),
    "hostname": pl.Utf8(),
    "pid": pl.Int64(),
    "dump_timestamp_us": pl.Int64(),
    "coll": pl.Utf8(),
    "collective": pl.Utf8(),
    "coll_sn": pl.Int64(),
    "msg_size_bytes": pl.Int64(),
    "exec_time_us": pl.Float64(),
    "timing_source": pl.Utf8(),
    "algbw_Bps": pl.Float64(),
    "busbw_Bps": pl.Float64(),
}
"""One row per collective record: where it came from, its communicator, the collective (as written, and
canonical), its sequence number, message size, execution time, timing source, algbw and busbw (B/s)."""

_GB = 1e9  # the Inspector's `*_gbs` are GB/s (10^9 bytes per second)


def _objects(text: str, path: Path) -> list[dict[str, Any]]:
    """The JSON objects of `text`, one after another (whitespace between them ignored)."""
    decoder, at = json.JSONDecoder(), 0
    found: list[dict[str, Any]] = []
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at >= len(text):
            return found
        try:
            value, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError as exc:
            raise InputError(
                path, f"not NCCL Inspector JSON output ({exc.msg})", f"line {exc.lineno}"
            ) from None
        if not isinstance(value, dict):
            raise InputError(path, "not NCCL Inspector JSON output (a value that is not an object)")
        found.append(value)


def _row(record: dict[str, Any], path: Path, index: int) -> dict[str, Any] | None:
    """The record's row (None for a record without `coll_perf`: a P2P record); raises `InputError` for a
    record of another format version."""
    header, meta, perf = (record.get(k) or {} for k in ("header", "metadata", "coll_perf"))
    version = meta.get("inspector_output_format_version") if isinstance(meta, dict) else None
    if version != INSPECTOR_FORMAT:
        raise InputError(
            path,
            f"NCCL Inspector output format {version!r} is not read (only {INSPECTOR_FORMAT}; the Prometheus "
            "mode is not read either)",
            f"record {index + 1}",
        )
    if not isinstance(perf, dict) or not perf:
        return None
    gbs = {key: perf.get(key) for key in ("coll_algobw_gbs", "coll_busbw_gbs")}
    return {
        "file": str(path),
        "comm_id": header.get("id"),
        "comm_name": header.get("comm_name"),
        "comm_rank": header.get("rank"),
        "n_ranks": header.get("n_ranks"),
        "nnodes": header.get("nnodes"),
        "hostname": meta.get("hostname"),
        "pid": meta.get("pid"),
        "dump_timestamp_us": meta.get("dump_timestamp_us"),
        "coll": perf.get("coll"),
        "coll_sn": perf.get("coll_sn"),
        "msg_size_bytes": perf.get("coll_msg_size_bytes"),
        "exec_time_us": perf.get("coll_exec_time_us"),
        "timing_source": perf.get("coll_timing_source"),
        "algbw_Bps": None if gbs["coll_algobw_gbs"] is None else float(gbs["coll_algobw_gbs"]) * _GB,
        "busbw_Bps": None if gbs["coll_busbw_gbs"] is None else float(gbs["coll_busbw_gbs"]) * _GB,
    }


def read_inspector(path: Path) -> pl.DataFrame:
    """The collective records of one NCCL Inspector output file (`RECORD_SCHEMA`), in file order. Raises
    `InputError` (one line, naming the file) for a file that is not Inspector JSON output or holds a record of
    a format version other than `INSPECTOR_FORMAT`."""
    stream, _ = open_bytes(path, INSPECTOR_LIMITS)
    with stream:
        raw = stream.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(path, "not NCCL Inspector JSON output (not UTF-8 text)") from None
    objects = _objects(text, path)
    if not objects:
        raise InputError(path, "not NCCL Inspector JSON output (no record)")
    rows = [row for index, obj in enumerate(objects) if (row := _row(obj, path, index)) is not None]
    frame = pl.DataFrame(rows, schema={c: t for c, t in RECORD_SCHEMA.items() if c != "collective"})
    if (
        frame.height
        and frame.select(pl.col("comm_id").is_null().any() | pl.col("coll_sn").is_null().any()).item()
    ):
        raise InputError(path, "an NCCL Inspector record without header.id or coll_perf.coll_sn")
    return frame.with_columns(canonical_collective_expr(pl.col("coll")).alias("collective")).select(
        list(RECORD_SCHEMA)
    )


__all__ = ["INSPECTOR_FORMAT", "RECORD_SCHEMA", "read_inspector"]
