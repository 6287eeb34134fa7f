"""The run folder `traceview record` and `traceview.profile()` write (docs/run-manifest.md, "Recording"): the
settings handed to the job's processes through the environment, the per-rank parts of the manifest, and
their merge into `run.json`. Nothing here imports torch.

Each rank writes its own part, `run.rank<N>.json` (a manifest holding that rank's trace, host, devices,
versions, NCCL settings), so no two processes ever write one file; `merge_parts` joins every part present into
`run.json`, written to a temporary name and renamed, so a reader never sees half a file. Rank 0 merges when
its `profile()` ends, and `traceview record` merges again once the command has exited, when every part is
there.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import socket
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import fields
from pathlib import Path

import msgspec

from traceview.core.errors import InputError
from traceview.core.records import record
from traceview.options.manifest import (
    MANIFEST_NAME,
    ManifestLog,
    ManifestTrace,
    RunManifest,
    load_manifest,
    write_manifest,
)

PART_PATTERN = re.compile(r"^run\.rank(\d+)\.json$")
ENV_PREFIX = "TRACEVIEW_"
RUN_DIR_ENV = "TRACEVIEW_RUN_DIR"
MERGED_BY_RECORD_ENV = "TRACEVIEW_RECORD"
"""Set by `traceview record` for its command: the recorder merges the parts, rank 0 need not wait for them."""
DEFAULT_RUN_DIR = "traceview-run"
NCCL_LOG_PATTERN = "nccl.%h.%p.log"
"""`NCCL_DEBUG_FILE` inside the run folder: NCCL writes one log per process (`%h` host, `%p` pid)."""
NCCL_DEBUG_ENV: Mapping[str, str] = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,COLL,TUNING"}


@record
class RecordSettings:
    """How each rank records: the `torch.profiler.schedule` (wait, warmup, active steps), its options, what
    the user knows of the model and machine (each optional; see docs/run-manifest.md), and for the drop-in
    recorder the function whose returns end a step (`MODULE:FUNCTION`; None: optimizer steps)."""

    wait: int = 1
    warmup: int = 1
    active: int = 3
    record_shapes: bool = True
    with_flops: bool = True
    activities: tuple[str, ...] = ("cpu", "cuda")
    local_batch: float | None = None
    params: float | None = None
    flops_per_sample: float | None = None
    nic: str | None = None
    job: str | None = None
    step_on: str | None = None


_ENV_NAMES = {f.name: ENV_PREFIX + f.name.upper() for f in fields(RecordSettings)}
"""RecordSettings field -> environment variable (`wait` -> `TRACEVIEW_WAIT`)."""


def settings_env(settings: RecordSettings) -> dict[str, str]:
    """The environment variables that carry `settings` to the job's processes (unset fields left out)."""
    env: dict[str, str] = {}
    for field in fields(RecordSettings):
        value = getattr(settings, field.name)
        if value is None:
            continue
        if isinstance(value, bool):
            value = int(value)
        env[_ENV_NAMES[field.name]] = ",".join(value) if isinstance(value, tuple) else str(value)
    return env


def _env_value(text: str, default: object, name: str) -> object:
    """`text` as the type of `default` (bool as 0/1, tuple as a comma list); a bad value names its
    variable."""
    try:
        if isinstance(default, bool):
            return text.strip().lower() not in ("0", "false", "no", "")
        if isinstance(default, int):
            return int(text)
        if isinstance(default, tuple):
            return tuple(part.strip() for part in text.split(",") if part.strip())
        if name in ("local_batch", "params", "flops_per_sample"):
            return float(text)
    except ValueError as exc:
        raise InputError(_ENV_NAMES[name], f"{text!r} is not a valid value") from exc
    return text


def settings_from_env(environ: Mapping[str, str] | None = None) -> RecordSettings:
    """The settings the environment carries (`settings_env`), defaults for the others."""
    environ = os.environ if environ is None else environ
    defaults = RecordSettings()
    found = {
        field.name: _env_value(environ[_ENV_NAMES[field.name]], getattr(defaults, field.name), field.name)
        for field in fields(RecordSettings)
        if _ENV_NAMES[field.name] in environ
    }
    return RecordSettings(**found)  # type: ignore[arg-type]


def nccl_env(run_dir: Path) -> dict[str, str]:
    """NCCL_DEBUG=INFO, its subsystems, and one log per process in the run folder."""
    return {**NCCL_DEBUG_ENV, "NCCL_DEBUG_FILE": str(run_dir.resolve() / NCCL_LOG_PATTERN)}


def nccl_log_name(host: str, pid: int) -> str:
    """The file NCCL writes for a process under `NCCL_LOG_PATTERN` (NCCL cuts the host at its first dot)."""
    return NCCL_LOG_PATTERN.replace("%h", host.split(".", maxsplit=1)[0]).replace("%p", str(pid))


def trace_name(rank: int) -> str:
    """A rank's trace in the run folder: the rank in the name, gzip."""
    return f"rank{rank}.pt.trace.json.gz"


def part_name(rank: int) -> str:
    """A rank's part of the manifest."""
    return f"run.rank{rank}.json"


def part_paths(run_dir: Path) -> list[Path]:
    """The parts present in the run folder, in rank order."""
    found = [(int(m[1]), p) for p in run_dir.iterdir() if (m := PART_PATTERN.match(p.name))]
    return [path for _, path in sorted(found)]


def write_part(run_dir: Path, rank: int, part: RunManifest) -> Path:
    """Write one rank's part (atomically: a temporary file renamed)."""
    return write_atomic(run_dir / part_name(rank), part)


def write_atomic(target: Path, manifest: RunManifest) -> Path:
    """Write to a temporary name (host and pid in it: several hosts may share the folder), then rename."""
    temporary = target.with_name(f".{target.name}.{socket.gethostname()}.{os.getpid()}.tmp")
    write_manifest(temporary, manifest)
    os.replace(temporary, target)
    return target


def _first(values: Sequence[object]) -> object:
    """The first value stated (not None, not an empty list)."""
    return next((value for value in values if value is not None and value != []), None)


def _first_struct(parts: Sequence[RunManifest], name: str) -> msgspec.Struct:
    """Field by field, the first value a part states for section `name` (parts in rank order)."""
    sections: list[msgspec.Struct] = [getattr(part, name) for part in parts]
    kind = type(sections[0])
    merged = {f: _first([getattr(s, f) for s in sections]) for f in kind.__struct_fields__}
    return kind(**{k: v for k, v in merged.items() if v is not None})


def _existing_logs(run_dir: Path, parts: Sequence[RunManifest]) -> list[ManifestLog]:
    """The NCCL logs the parts name that NCCL did write (a gloo job writes none)."""
    logs = [log for part in parts for log in part.nccl_logs]
    return [log for log in logs if (run_dir / log.path).is_file()]


def missing_ranks_note(traces: Sequence[ManifestTrace], world_size: int | None) -> list[str]:
    """A note naming the ranks of the world that recorded no trace (none when every rank did)."""
    missing = sorted(set(range(world_size or 0)) - {t.rank for t in traces})
    if not missing:
        return []
    shown = ", ".join(map(str, missing[:16])) + (", ..." if len(missing) > 16 else "")
    return [f"{len(missing)} of {world_size} ranks recorded no trace: {shown}"]


def merge(
    parts: Sequence[RunManifest], run_dir: Path, logs: Sequence[ManifestLog] | None = None
) -> RunManifest:
    """One manifest of every part: the traces, logs, devices and groups of all, the rest (and each field's
    source) from the first part (lowest rank) that states it; `ranks_per_host` is the most ranks on one host.
    `logs`: the NCCL logs to list (default: those the parts name that exist in `run_dir`)."""
    traces = sorted((t for part in parts for t in part.traces), key=lambda t: t.rank)
    hosts = Counter(t.host for t in traces if t.host)
    groups = {g.name: g for part in reversed(parts) for g in part.process_groups}
    world_size: int | None = _first([p.world_size for p in parts])  # type: ignore[assignment]
    notes = {n for part in parts for n in part.notes} | set(missing_ranks_note(traces, world_size))
    return RunManifest(
        job=_first([p.job for p in parts]),  # type: ignore[arg-type]
        created=dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        backend=_first([p.backend for p in parts]),  # type: ignore[arg-type]
        world_size=world_size,
        ranks_per_host=max(hosts.values()) if hosts else None,
        traces=traces,
        nccl_logs=list(logs) if logs is not None else _existing_logs(run_dir, parts),
        process_groups=sorted(groups.values(), key=lambda g: (len(g.name), g.name)),
        devices=sorted({d for part in parts for d in part.devices}),
        versions=_first_struct(parts, "versions"),  # type: ignore[arg-type]
        nccl_env=next((p.nccl_env for p in parts if p.nccl_env), {}),
        model=_first_struct(parts, "model"),  # type: ignore[arg-type]
        hardware=_first_struct(parts, "hardware"),  # type: ignore[arg-type]
        profiler=_first_struct(parts, "profiler"),  # type: ignore[arg-type]
        notes=sorted(notes),
        sources=dict(
            sorted({key: text for part in reversed(parts) for key, text in part.sources.items()}.items())
        ),
    )


def merge_parts(run_dir: str | Path) -> Path | None:
    """Merge every part of the run folder into its `run.json` (atomically); None when it holds no part."""
    folder = Path(run_dir)
    paths = part_paths(folder)
    if not paths:
        return None
    return write_atomic(folder / MANIFEST_NAME, merge([load_manifest(p) for p in paths], folder))


def recorded(run_json: Path) -> RunManifest:
    """The run folder's merged `run.json`, as `traceview record` reports it."""
    return load_manifest(run_json)
