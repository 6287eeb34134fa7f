"""The options a run is analysed with, built once: `build_options(run, user) -> RunOptions`.

`build_options` is the one constructor: it reads the run's `run.json` (the only place it is read for an
analysis), fills every model input the user left unset from it (source `manifest`), finds the NCCL logs (those
given, those the manifest lists, those of the run folder) and checks the model inputs. The command line and
the API both call it; the map's workers and Ray tasks receive the result and never read `run.json`.

Precedence of a model input: the command line or the API, then the manifest, then the NCCL log, then the
traces, then the hardware table, then a stated default (`traceview.prediction.inputs`).
"""

from __future__ import annotations

import glob
from collections.abc import Sequence
from dataclasses import field, fields, replace
from pathlib import Path
from typing import Any

from traceview.core.boundary import folder_files
from traceview.core.errors import UsageError
from traceview.core.reading import with_compressed
from traceview.core.records import record
from traceview.core.sanitize import printable
from traceview.options.inspector_files import inspector_paths
from traceview.options.manifest import (
    MANIFEST_NAME,
    RunManifest,
    find_manifest,
    load_manifest,
    manifest_dumps,
    manifest_files,
    stated_inputs,
    stated_shape,
    traces_in,
)
from traceview.options.model import MANIFEST, ModelOptions, model_options
from traceview.options.parallel import Layout, ModelShape, model_shape, parse_layout, parse_shape
from traceview.options.user import UserOptions

RunSpec = str | Path | Sequence[str | Path]
"""A trace file, a folder of per-rank traces, a glob, a `run.json`, or several files (a shell's expansion)."""

NCCL_LOG_SUFFIXES, NCCL_LOG_PROBE_BYTES = (".log", ".txt", ".out"), 64 * 1024
LOG_SUFFIXES = with_compressed(NCCL_LOG_SUFFIXES)
COMPRESSED_LOG_SUFFIXES = LOG_SUFFIXES[len(NCCL_LOG_SUFFIXES) :]


@record(kw_only=True)
class Execution:
    """Where and how ranks are read: worker processes, the executor, its address, the largest trace text."""

    workers: int | None = None
    executor: str = "local"
    ray_address: str | None = None
    max_trace_bytes: int | None = None


@record(kw_only=True)
class RunFacts:
    """Who the run is, for a history (`traceview trend`): run.json's job, commit and creation time, and the
    label the user gave (`--label`)."""

    job: str | None = None
    commit: str | None = None
    created: str | None = None  # ISO 8601, UTC
    label: str | None = None
    pytorch_version: str | None = None  # run.json's versions.torch
    world_size: int | None = None  # run.json's world_size


@record(kw_only=True)
class RunOptions:
    """What one run is analysed with; every field has the default a plain `traceview report RUN` uses."""

    source: str = ""  # the run as the user named it
    manifest: Path | None = None  # the run.json read (docs/run-manifest.md), None without one
    listed_traces: tuple[Path, ...] | None = None  # the traces of the manifest; None: the run spec names them
    nccl_logs: tuple[Path, ...] = ()  # NCCL_DEBUG logs to join (docs/metrics.md, "NCCL log")
    inspector_files: tuple[Path, ...] = ()  # NCCL Inspector JSON outputs (docs/metrics.md, "NCCL Inspector")
    flight_recorder: tuple[Path, ...] = ()  # Flight Recorder dumps (docs/metrics.md, "Hang forensics")
    comm_patterns: tuple[str, ...] = ()  # --comm-pattern (docs/metrics.md section 2)
    compute_patterns: tuple[str, ...] = ()  # --compute-pattern: names that are compute
    ranks_per_host: int | None = None  # hosts for clock alignment when traces name none
    ranks_per_host_source: str = "--ranks-per-host"  # where ranks_per_host came from (or "run.json")
    rank_hosts: tuple[tuple[int, str], ...] = ()  # rank -> host as stated; before ranks_per_host
    virtual_stages: int = 1  # V of the pipeline-bubble theory (P-1)/(M*V+P-1)
    model: ModelOptions = field(default_factory=ModelOptions)  # the alpha-beta model's stated inputs
    execution: Execution = field(default_factory=Execution)
    layout: Layout = field(default_factory=Layout)  # --dims or run.json `parallelism`
    shape: ModelShape = field(default_factory=ModelShape)  # --shape or run.json `model.hidden`, ...
    links: str = "table"  # --links: the prediction's B and alpha from the table or measured in the run
    levers: tuple[str, ...] = ()  # --lever: the replay's levers (docs/metrics.md, "Replay"); (): the default
    facts: RunFacts = field(default_factory=RunFacts)  # job, commit, time, label (docs/run-manifest.md)


def _source(run: RunSpec) -> str:
    return str(run) if isinstance(run, str | Path) else " ".join(map(str, run))


def _manifest(run: RunSpec) -> tuple[Path, RunManifest] | None:
    """The manifest `run` names (a `run.json`, or a folder holding one) and its contents, read once."""
    if not isinstance(run, str | Path):
        return None
    path = find_manifest(run)
    return None if path is None else (path, load_manifest(path))


def _listed_traces(path: Path, manifest: RunManifest, run_root: str | None) -> tuple[Path, ...]:
    """The trace files of a manifest: those it lists (each inside the run), else the traces of its folder
    (manifests left out)."""
    listed, _ = manifest_files(path, manifest, run_root)
    return tuple(listed or traces_in(path.parent))


def _with_manifest(model: ModelOptions, manifest: RunManifest) -> ModelOptions:
    """`model` with every input the manifest states and the user left unset, each marked `manifest`."""
    given = {f.name for f in fields(ModelOptions) if getattr(model, f.name) not in (None, ())}
    filled = {name: value for name, value in stated_inputs(manifest).items() if name not in given}
    sources = (*model.sources, *((name, MANIFEST) for name in filled))
    return replace(model, **filled, sources=sources)


def _hosts(user: UserOptions, manifest: RunManifest | None) -> dict[str, Any]:
    """Ranks per host: `--ranks-per-host` (or `--gpus-per-node`), else the manifest's."""
    stated = user.ranks_per_host or user.gpus_per_node
    per_host = None if manifest is None else manifest.ranks_per_host or manifest.hardware.gpus_per_node
    if stated is not None or per_host is None:
        return {"ranks_per_host": stated}
    return {"ranks_per_host": per_host, "ranks_per_host_source": "run.json"}


def build_options(run: RunSpec, user: UserOptions | None = None) -> RunOptions:
    """The options `run` is analysed with: what the user stated, completed by the run's `run.json`. Raises
    `UsageError` for a bad option, `InputError` for a manifest that breaks its rules."""
    user = user or UserOptions()
    found = _manifest(run)
    path, manifest = found if found is not None else (None, None)
    model = model_options(user)
    hosts = _hosts(user, manifest)
    if manifest is not None:
        model = _with_manifest(model, manifest)
    if "ranks_per_host_source" in hosts:
        model = replace(model, sources=(*model.sources, ("ranks_per_host", MANIFEST)))
    layout, shape = _parallelism(user, manifest, path)
    model = replace(model, model_shards=layout.model_shards())
    facts = RunFacts(
        job=manifest.job if manifest else None,
        commit=manifest.commit if manifest else None,
        created=manifest.created if manifest else None,
        label=user.run_label,
        pytorch_version=manifest.versions.torch if manifest else None,
        world_size=manifest.world_size if manifest else None,
    )
    return RunOptions(
        source=_source(run),
        facts=facts,
        manifest=path,
        listed_traces=None if found is None else _listed_traces(*found, user.run_root),
        nccl_logs=tuple(nccl_log_paths(run, user.nccl_logs, found, user.run_root)),
        inspector_files=inspector_paths(user.inspector, found, user.run_root),
        flight_recorder=flight_recorder_paths(user.flight_recorder, found, user.run_root),
        comm_patterns=user.comm_patterns,
        compute_patterns=user.compute_patterns,
        virtual_stages=user.virtual_stages,
        model=model,
        execution=Execution(
            workers=user.workers,
            executor=user.executor,
            ray_address=user.ray_address,
            max_trace_bytes=user.max_trace_bytes,
        ),
        layout=layout,
        shape=shape,
        links=user.links,
        levers=user.levers,
        **hosts,
    )


def _parallelism(
    user: UserOptions, manifest: RunManifest | None, path: Path | None
) -> tuple[Layout, ModelShape]:
    """The layout (`--dims`, else the manifest's `parallelism`) and the model's shape (`--shape` over the
    manifest's `model.hidden`, ...); a manifest's bad layout is a usage error naming the file."""
    if user.dims is not None:
        layout = parse_layout(user.dims)
    elif manifest is not None and manifest.parallelism:
        layout = parse_layout(manifest.parallelism, MANIFEST, f"{printable(path)}: parallelism")
    else:
        layout = Layout()
    stated = parse_shape(user.shape) if user.shape is not None else {}
    return layout, model_shape(stated, stated_shape(manifest) if manifest is not None else {})


def _logs_in(folder: Path) -> list[Path]:
    """Files of `folder` ending .log/.txt/.out whose first 64 KB say `NCCL INFO`, and those ending so then a
    compressed format's suffix (`.log.gz`, `.txt.zst`: read, or named as skipped, when the logs are read)."""
    found = []
    for path in folder_files(folder, lambda name: name.endswith(LOG_SUFFIXES)):
        if path.name.endswith(COMPRESSED_LOG_SUFFIXES):
            found.append(path)
            continue
        try:
            with path.open("rb") as handle:
                head = handle.read(NCCL_LOG_PROBE_BYTES)
        except OSError:
            continue
        if b"NCCL INFO" in head:
            found.append(path)
    return found


def _given_logs(given: Sequence[Path], flag: str = "--nccl-log ") -> list[Path]:
    """The logs named by `--nccl-log`: a file as it is, a folder's logs; a missing path is a usage error."""
    found: list[Path] = []
    for path in given:
        if path.is_dir():
            inside = _logs_in(path)
            if not inside:
                raise UsageError(f"{flag}{printable(path)}: a folder without NCCL_DEBUG logs in it")
            found += inside
        elif not path.exists():
            raise UsageError(f"{flag}{printable(path)}: no such file")
        else:
            found.append(path)
    return found


def nccl_log_files(specs: Sequence[str]) -> list[Path]:
    """The NCCL logs `specs` name (the `nccl` command's arguments): a file as it is, a folder's logs (those
    ending .log/.txt/.out whose first 64 KB say `NCCL INFO`, and their compressed forms), a glob's matches;
    each once, in order. Raises `UsageError` for a spec that names none."""
    found: list[Path] = []
    for spec in specs:
        path = Path(spec)
        if path.is_dir() or path.exists():
            found += _given_logs([path], flag="")
            continue
        matches = sorted(Path(p) for p in glob.glob(spec) if not Path(p).is_dir())
        if not matches:
            raise UsageError(f"{printable(spec)}: no such file, folder or glob match")
        found += matches
    return list(dict.fromkeys(found))


def nccl_log_paths(
    run: RunSpec,
    given: Sequence[Path],
    manifest: tuple[Path, RunManifest] | None,
    run_root: str | None = None,
) -> list[Path]:
    """The logs given, then those the manifest lists, then those of the run folder (ending .log/.txt/.out,
    saying `NCCL INFO`; the manifest's folder for a `run.json`), each once."""
    found = list(dict.fromkeys(_given_logs(given)))
    listed = manifest_files(*manifest, run_root)[1] if manifest is not None else []
    found += [path for path in listed if path not in found]
    folder = Path(run) if isinstance(run, str | Path) else None
    if folder is not None and folder.name == MANIFEST_NAME and folder.is_file():
        folder = folder.parent
    if folder is not None and folder.is_dir():
        found += [path for path in _logs_in(folder) if path not in found]
    return found


def flight_recorder_paths(
    given: Sequence[Path], manifest: tuple[Path, RunManifest] | None, run_root: str | None = None
) -> tuple[Path, ...]:
    """The Flight Recorder dumps given (`--flight-recorder`), then those run.json's `flight_recorder` lists
    (inside the run), each once (files or folders: `traceview.flight_recorder.inputs.dump_paths` reads
    them)."""
    listed = manifest_dumps(*manifest, run_root) if manifest is not None else []
    return tuple(dict.fromkeys([*given, *listed]))
