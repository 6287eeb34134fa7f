"""What one recorded process knows of itself, and its part of the manifest (docs/run-manifest.md, "What each
rank writes"): its rank, the process groups (with their DeviceMesh dimension names), its device, the software
versions, its NCCL settings, each with the source `run.json` names. Both recorders use it:
`traceview.profile()` and the drop-in recorder of `traceview record`. PyTorch is passed in (`torch`), never
imported here."""

from __future__ import annotations

import contextlib
import gc
import os
import platform
import socket
import sys
import warnings
from dataclasses import field
from pathlib import Path
from typing import Any

import msgspec

from traceview.core.records import record
from traceview.core.version import __version__
from traceview.options.manifest import (
    ManifestGroup,
    ManifestHardware,
    ManifestLog,
    ManifestModel,
    ManifestProfiler,
    ManifestTrace,
    ManifestVersions,
    RunManifest,
)
from traceview.record.parts import RecordSettings, nccl_log_name, trace_name

RANK_ENV = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
"""Where a launcher states a process's global rank before torch.distributed is up (torchrun, SLURM, Open MPI,
MPICH/PMI), in the order read."""
NCCL_PREFIXES = ("NCCL_", "TORCH_NCCL_")
"""The environment variables `nccl_env` keeps: NCCL's own and PyTorch's settings of its NCCL backend."""
FIXED_SOURCES: dict[str, str] = {
    "backend": "torch.distributed.get_backend()",
    "world_size": "torch.distributed.get_world_size()",
    "traces": "torch.profiler, one trace per rank; host: socket.gethostname(); local rank: $LOCAL_RANK",
    "process_groups": "torch.distributed (the groups this rank belongs to); mesh_dim: the DeviceMesh objects "
    "alive in the process (mesh_dim_names)",
    "devices": "torch.cuda.get_device_name() of the rank's current device (none on a CPU)",
    "versions": "torch.__version__, torch.version.cuda, torch.cuda.nccl.version(), platform.python_version()",
    "nccl_env": "the rank's environment: every NCCL_* and TORCH_NCCL_* variable",
}
"""The source `run.json` names for each field every part states the same way."""


@record
class MeasuredModel:
    """What a recorder measured of the workload (None: not measured), each value's source, and notes."""

    local_batch: float | None = None
    local_batch_unit: str | None = None
    params: float | None = None
    sources: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


@record
class RankRecording:
    """One process's recording, for its part: where, which rank, with which settings and profiler window,
    whether its trace was written, how its steps were found, and what it measured."""

    run_dir: Path
    rank: int
    settings: RecordSettings
    activities: list[str]
    profiler: ManifestProfiler
    traced: bool
    steps_source: str
    measured: MeasuredModel = field(default_factory=MeasuredModel)
    notes: tuple[str, ...] = ()


def alive(kind: type) -> list[Any]:
    """The objects of `kind` the garbage collector tracks (the warnings a deprecated object's check raises
    hidden). No collection is forced: when the job's garbage is freed is the job's own affair (a DDP model
    left to the interpreter's final collection races gloo's threads, which can abort the process)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [o for o in gc.get_objects() if isinstance(o, kind)]


def rank_of(torch: Any) -> int:
    """The global rank: torch.distributed's when initialised, else the launcher's ($RANK, ...), else 0."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    return next((int(os.environ[name]) for name in RANK_ENV if os.environ.get(name, "").isdigit()), 0)


def mesh_dims(torch: Any) -> dict[str, str]:
    """Process group name -> the DeviceMesh dimension it serves, from the meshes alive in this process (none
    when the job built no mesh)."""
    module = sys.modules.get("torch.distributed.device_mesh")
    mesh_type = getattr(module, "DeviceMesh", None)
    if mesh_type is None or not torch.distributed.is_initialized():
        return {}
    found: dict[str, str] = {}
    with contextlib.suppress(Exception):  # a mesh of another rank's groups, a private change: no names
        for mesh in alive(mesh_type):
            names = mesh.mesh_dim_names or tuple(f"dim_{i}" for i in range(mesh.ndim))
            for index, name in enumerate(names):
                found.setdefault(str(mesh.get_group(index).group_name), str(name))
    return found


def process_groups(torch: Any) -> tuple[str | None, int | None, list[ManifestGroup]]:
    """(backend, world size, process groups) of torch.distributed; nothing when it is not initialised."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return None, None, []
    configs: list[dict[str, Any]] = []
    with contextlib.suppress(AttributeError, RuntimeError):  # a private helper (the profiler's own source)
        configs = dist.distributed_c10d._get_all_pg_configs()
    dims = mesh_dims(torch)
    groups = [
        ManifestGroup(
            name=str(c.get("pg_name", "")),
            ranks=[int(r) for r in c.get("ranks", [])],
            desc=c.get("pg_desc"),
            backend=c.get("backend_config"),
            mesh_dim=dims.get(str(c.get("pg_name", ""))),
        )
        for c in configs
    ]
    return str(dist.get_backend()), int(dist.get_world_size()), groups


def profiler_activities(torch: Any, wanted: tuple[str, ...]) -> tuple[list[Any], list[str]]:
    """The profiler activities asked for that this machine has (CUDA only where a GPU is), and their names."""
    kinds = torch.profiler.ProfilerActivity
    usable = {"cpu": kinds.CPU, **({"cuda": kinds.CUDA} if torch.cuda.is_available() else {})}
    names = [name for name in wanted if name in usable]
    return [usable[name] for name in names], names


def profiler_options(torch: Any) -> dict[str, Any]:
    """The profiler's optional keywords this PyTorch has: its CUDA-sync events (`_ExperimentalConfig(
    enable_cuda_sync_events=True)`: the host's waits on the device and the streams' waits on each other,
    read by the critical path, docs/metrics.md); none where the version lacks them (silently)."""
    config = getattr(getattr(getattr(torch, "_C", None), "_profiler", None), "_ExperimentalConfig", None)
    if config is None:
        return {}
    try:
        return {"experimental_config": config(enable_cuda_sync_events=True)}
    except (TypeError, RuntimeError):  # a version without the option
        return {}


def versions(torch: Any) -> ManifestVersions:
    """The versions of torch, CUDA, NCCL (where PyTorch has it), Python and traceview."""
    nccl = None
    with contextlib.suppress(AttributeError, RuntimeError, ImportError):
        found = torch.cuda.nccl.version()
        nccl = ".".join(map(str, found)) if isinstance(found, tuple) else str(found)
    return ManifestVersions(
        torch=str(torch.__version__),
        nccl=nccl,
        cuda=torch.version.cuda,
        python=platform.python_version(),
        traceview=__version__,
    )


def devices(torch: Any) -> list[str]:
    """The name of the rank's GPU (its current device once CUDA is up, else its LOCAL_RANK), none on a CPU."""
    if not torch.cuda.is_available():
        return []
    if torch.cuda.is_initialized():
        index = int(torch.cuda.current_device())
    else:
        index = int(os.environ.get("LOCAL_RANK", "0")) % max(1, torch.cuda.device_count())
    return [str(torch.cuda.get_device_name(index))]


def nccl_settings(run_dir: Path) -> dict[str, str]:
    """Every NCCL_* and TORCH_NCCL_* variable of this process; a log path inside the run folder relative to
    it, as manifests say."""
    found = {k: v for k, v in sorted(os.environ.items()) if k.startswith(NCCL_PREFIXES)}
    log = found.get("NCCL_DEBUG_FILE")
    if log and Path(log).is_absolute() and Path(log).parent == run_dir.resolve():
        found["NCCL_DEBUG_FILE"] = Path(log).name
    return found


def _model(recording: RankRecording) -> tuple[ManifestModel, dict[str, str]]:
    """The model facts: what the user stated wins over what was measured; each with its source."""
    settings, measured = recording.settings, recording.measured
    stated = "stated: traceview record --{flag} (or traceview.profile({key}=...))"
    sources: dict[str, str] = {}
    values: dict[str, Any] = {}
    for key, flag in (("local_batch", "local-batch"), ("params", "params")):
        if getattr(settings, key) is not None:
            values[key] = getattr(settings, key)
            sources[f"model.{key}"] = stated.format(flag=flag, key=key)
        elif getattr(measured, key) is not None:
            values[key] = getattr(measured, key)
            sources[f"model.{key}"] = measured.sources.get(f"model.{key}", "measured")
    if settings.local_batch is None and measured.local_batch is not None:
        values["local_batch_unit"] = measured.local_batch_unit
    if settings.flops_per_sample is not None:
        values["flops_per_sample"] = settings.flops_per_sample
        sources["model.flops_per_sample"] = stated.format(flag="flops-per-sample", key="flops_per_sample")
    return ManifestModel(**values), sources


def rank_part(recording: RankRecording, torch: Any) -> RunManifest:
    """This process's part of the manifest, each field it states with its source."""
    rank, host, settings = recording.rank, socket.gethostname(), recording.settings
    backend, world_size, groups = process_groups(torch)
    local = os.environ.get("LOCAL_RANK")
    trace = ManifestTrace(
        rank=rank, path=trace_name(rank), host=host, local_rank=int(local) if local else None
    )
    log = ManifestLog(path=nccl_log_name(host, os.getpid()), rank=rank, host=host)
    model, model_sources = _model(recording)
    part = RunManifest(
        job=settings.job,
        backend=backend,
        world_size=world_size,
        traces=[trace] if recording.traced else [],
        nccl_logs=[log] if "NCCL_DEBUG_FILE" in os.environ else [],
        process_groups=groups,
        devices=devices(torch),
        versions=versions(torch),
        nccl_env=nccl_settings(recording.run_dir),
        model=model,
        hardware=ManifestHardware(nic=settings.nic),
        profiler=recording.profiler,
        notes=sorted({*recording.notes, *recording.measured.notes}),
    )
    steps = {"profiler": f"torch.profiler.schedule; steps: {recording.steps_source}"}
    sources = {**FIXED_SOURCES, **model_sources, **steps}
    stated = {key: text for key, text in sorted(sources.items()) if _states(key, part)}
    return msgspec.structs.replace(part, sources=stated)


def _states(key: str, part: RunManifest) -> bool:
    """Whether the part states the field `key` names (a source is written only beside a value)."""
    section, _, name = key.partition(".")
    value = getattr(part, section)
    return (getattr(value, name) if name else value) not in (None, [], {})
