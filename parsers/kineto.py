"""PyTorch profiler (Kineto) traces, PyTorch 1.8 to today, plain or gzip: `parse(path) -> RankTrace`.

Decoding is typed and selective (see `kineto_schema`); events become polars frames column by column.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec
import polars as pl
from traceview.parsers.kineto_io import decode, read_bytes, refuse_without_kineto_events
from traceview.parsers.kineto_schema import NO_ARGS, Args, Document, Event

from traceview.errors import ParseWarning
from traceview.model import (
    CPU_SCHEMA,
    GPU_SCHEMA,
    STEP_SCHEMA,
    ProcessGroupConfig,
    RankTrace,
    TraceMeta,
    empty_frame,
)

GPU_KINDS: Mapping[str, str] = {
    "kernel": "kernel",
    "Kernel": "kernel",
    "mtia_ccp_events": "kernel",
    "gpu_memcpy": "memcpy",
    "Memcpy": "memcpy",
    "gpu_memset": "memset",
    "Memset": "memset",
}
"""Device activity categories, across PyTorch versions and vendors (SPEC section 2)."""

CPU_KINDS: Mapping[str, str] = {
    "cpu_op": "op",
    "Operator": "op",
    "operator": "op",
    "user_annotation": "annotation",
    "cuda_runtime": "runtime",
    "Runtime": "runtime",
    "cuda_driver": "runtime",
    "mtia_runtime": "runtime",
}
"""Host categories kept: operators, annotations and the runtime calls that launch device work."""

GPU_ANNOTATION_CATEGORIES = frozenset({"gpu_user_annotation"})
KINETO_CATEGORIES = (
    frozenset(GPU_KINDS) | frozenset(CPU_KINDS) | GPU_ANNOTATION_CATEGORIES | {"python_function"}
)
STEP_NAME = r"^ProfilerStep#(\d+)$"
RANK_IN_FILE_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)


def parse(path: str | Path) -> RankTrace:
    """Read one rank's Kineto trace. Raises `InputError` (`NotKinetoError` for other formats)."""
    path = Path(path)
    data, warnings = read_bytes(path)
    decoded = decode(path, data)
    events = decoded.document.traceEvents or []
    refuse_without_kineto_events(path, data, events, KINETO_CATEGORIES)
    gpu_events, cpu_events, gpu_annotations = _split(events)
    cpu = _frame(cpu_events, CPU_KINDS, CPU_SCHEMA, _cpu_columns)
    steps, step_source = _steps(gpu_annotations, cpu)
    meta, meta_warnings = _meta(path, decoded.document, len(events))
    return RankTrace(
        path=str(path),
        meta=meta,
        gpu=_frame(gpu_events, GPU_KINDS, GPU_SCHEMA, _gpu_columns),
        cpu=cpu,
        steps=steps,
        step_source=step_source,
        warnings=(*warnings, *decoded.warnings, *meta_warnings),
        truncated_at_byte=decoded.truncated_at_byte,
    )


def _split(events: list[Event]) -> tuple[list[Event], list[Event], list[Event]]:
    complete = [e for e in events if e.ph == "X" and e.ts is not None and e.dur is not None]
    gpu = [e for e in complete if e.cat in GPU_KINDS]
    cpu = [e for e in complete if e.cat in CPU_KINDS]
    annotations = [e for e in complete if e.cat in GPU_ANNOTATION_CATEGORIES]
    return gpu, cpu, annotations


ColumnBuilder = Callable[[list[Event], list[Args]], dict[str, list[Any]]]


def _frame(
    events: list[Event],
    kinds: Mapping[str, str],
    schema: Mapping[str, pl.DataType],
    columns: ColumnBuilder,
) -> pl.DataFrame:
    if not events:
        return empty_frame(schema)
    args = [e.args or NO_ARGS for e in events]
    data: dict[str, list[Any]] = {
        "kind": [kinds[e.cat or ""] for e in events],
        "name": [e.name or "" for e in events],
        "start_us": [e.ts for e in events],
        "end_us": [(e.ts or 0.0) + (e.dur or 0.0) for e in events],
        "correlation": _ints([a.correlation for a in args]),
        "external_id": _ints(
            [a.external_id if a.external_id is not None else a.external_id_old for a in args]
        ),
        **columns(events, args),
        **_comm_columns(args),
    }
    return pl.DataFrame(data, schema=dict(schema))


def _gpu_columns(events: list[Event], args: list[Args]) -> dict[str, list[Any]]:
    return {"device": _ints([a.device for a in args]), "stream": _ints([a.stream for a in args])}


def _cpu_columns(events: list[Event], args: list[Args]) -> dict[str, list[Any]]:
    return {
        "pid": [None if e.pid is None else str(e.pid) for e in events],
        "tid": [None if e.tid is None else str(e.tid) for e in events],
        "flops": [None if a.flops is None else float(a.flops) for a in args],
        "input_dims": [_raw_text(a.input_dims or a.input_dims_old) for a in args],
        "input_types": [_raw_text(a.input_type) for a in args],
    }


def _comm_columns(args: list[Args]) -> dict[str, list[Any]]:
    return {
        "collective_name": [a.collective_name for a in args],
        "in_nelems": _ints([a.in_nelems for a in args]),
        "out_nelems": _ints([a.out_nelems for a in args]),
        "dtype": [a.dtype for a in args],
        "group_size": _ints([a.group_size for a in args]),
        "pg_name": [_text(a.pg_name if a.pg_name is not None else a.pg_id) for a in args],
        "pg_desc": [a.pg_desc for a in args],
        "pg_ranks": [_text(a.pg_ranks) for a in args],
        "seq": _ints([a.seq if a.seq is not None else a.seq_lower for a in args]),
        "in_split": [_text(a.in_split) for a in args],
        "out_split": [_text(a.out_split) for a in args],
    }


def _ints(values: list[int | str | None]) -> list[int | None]:
    """Integers as written; numeric strings (some ROCm traces) converted, other strings dropped."""
    if not any(isinstance(v, str) for v in values):
        return values  # type: ignore[return-value]
    return [int(v) if isinstance(v, int) or (v and v.lstrip("-").isdigit()) else None for v in values]


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _raw_text(raw: msgspec.Raw) -> str | None:
    return bytes(raw).decode() if raw else None


def _steps(gpu_annotations: list[Event], cpu: pl.DataFrame) -> tuple[pl.DataFrame, str]:
    """ProfilerStep windows: the GPU annotations when the trace has them, else the CPU ones, else none."""
    gpu_steps = pl.DataFrame(
        {
            "name": [e.name or "" for e in gpu_annotations],
            "start_us": [e.ts for e in gpu_annotations],
            "end_us": [(e.ts or 0.0) + (e.dur or 0.0) for e in gpu_annotations],
        },
        schema={"name": pl.Utf8, "start_us": pl.Float64, "end_us": pl.Float64},
    )
    on_gpu = _step_windows(gpu_steps)
    on_cpu = _step_windows(cpu.select("name", "start_us", "end_us"))
    if on_gpu.height and on_gpu.height >= on_cpu.height:
        return on_gpu, "gpu"
    if on_cpu.height:
        return on_cpu, "cpu"
    return empty_frame(STEP_SCHEMA), "none"


def _step_windows(candidates: pl.DataFrame) -> pl.DataFrame:
    return (
        candidates.with_columns(step=pl.col("name").str.extract(STEP_NAME, 1).cast(pl.Int64))
        .drop_nulls("step")
        .group_by("step")
        .agg(pl.col("start_us").min(), pl.col("end_us").max())
        .sort("step")
        .select(list(STEP_SCHEMA))
    )


def _meta(path: Path, document: Document, events_total: int) -> tuple[TraceMeta, list[ParseWarning]]:
    info = document.distributedInfo
    rank, rank_source, warnings = _rank(path, info.rank if info else None)
    devices = document.deviceProperties or document.computeProperties or []
    meta = TraceMeta(
        rank=rank,
        rank_source=rank_source,
        world_size=info.world_size if info else None,
        backend=(info.backend or "") if info else "",
        hostname=document.host_name or document.hostname or "",
        nccl_version=(info.nccl_version or "") if info else "",
        pytorch_version=document.torch_version or "",
        devices=tuple(sorted({d.name for d in devices if d.name})),
        base_time_ns=document.baseTimeNanoseconds or 0,
        process_groups=_process_groups(info.pg_config if info else None),
        events_total=events_total,
    )
    return meta, warnings


def _rank(path: Path, declared: int | None) -> tuple[int, str, list[ParseWarning]]:
    if declared is not None:
        return declared, "distributedInfo", []
    found = RANK_IN_FILE_NAME.findall(path.name)
    if found:
        return int(found[-1]), "file name", []
    note = "no rank in distributedInfo or the file name; taken as rank 0"
    return 0, "assumed", [ParseWarning(str(path), note)]


def _process_groups(configs: Sequence[Any] | None) -> tuple[ProcessGroupConfig, ...]:
    return tuple(
        ProcessGroupConfig(
            name=str(c.pg_name) if c.pg_name is not None else "",
            description=c.pg_desc or "",
            size=c.pg_size if c.pg_size is not None else len(c.ranks or []),
            ranks=tuple(c.ranks or ()),
            backend=c.backend_config or "",
        )
        for c in configs or ()
    )
