"""`traceview.profile()`: record one rank of a training job into a run folder (docs/run-manifest.md,
"Recording"). Needs PyTorch (`pip install 'traceview[record]'`), imported only when a profile starts.

    with traceview.profile() as prof:      # the folder and settings from `traceview record`, else defaults
        for batch in loader:
            train_step(batch)
            prof.step()                     # once per step

Each rank writes `rank<N>.pt.trace.json.gz` (`torch.profiler` with a wait/warmup/active schedule,
`record_shapes`, `with_flops`, CPU and, where there is one, CUDA activity) and its part of the manifest,
`run.rank<N>.json`; rank 0 then merges the parts present into `run.json` (under `traceview record`, which
merges again when the command has exited, at once; otherwise after waiting up to `merge_wait_s` for the others).
"""

from __future__ import annotations

import contextlib
import gzip
import importlib
import os
import platform
import shutil
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from traceview.core.errors import UsageError
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
from traceview.record.parts import (
    DEFAULT_RUN_DIR,
    MERGED_BY_RECORD_ENV,
    RUN_DIR_ENV,
    RecordSettings,
    merge_parts,
    nccl_log_name,
    part_paths,
    settings_from_env,
    trace_name,
    write_part,
)

MERGE_WAIT_S = 30.0
"""How long rank 0 waits, at most, for the other ranks' parts before merging without `traceview record`."""


def _torch() -> Any:
    try:
        return importlib.import_module("torch")
    except ImportError as exc:
        raise UsageError("traceview.profile needs PyTorch: pip install 'traceview[record]'") from exc


@dataclass
class Profile:
    """A running recording: call `step()` once per training step. `profiler` is the `torch.profiler.profile`;
    `trace` the rank's trace once written."""

    run_dir: Path
    settings: RecordSettings
    profiler: Any = None
    trace: Path | None = None
    steps: int = 0
    _rank: int | None = field(default=None, repr=False)

    def step(self) -> None:
        """Mark the end of a training step (the profiler's schedule advances)."""
        self.steps += 1
        self.profiler.step()

    def _save(self, finished: Any) -> None:
        """`on_trace_ready`: write the rank's trace, gzip, named with its rank. The profiler exports to a
        temporary file named relative to the working folder (its name is the trace's `traceName`), which is
        then compressed (no name, no time in the gzip header) and removed."""
        self._rank = _rank_of(_torch())
        self.trace = self.run_dir / trace_name(self._rank)
        plain = self.run_dir / f".rank{self._rank}.{os.getpid()}.json"
        finished.export_chrome_trace(os.path.relpath(plain))
        with (
            plain.open("rb") as source,
            self.trace.open("wb") as target,
            gzip.GzipFile(filename="", mode="wb", fileobj=target, mtime=0) as compressed,
        ):
            shutil.copyfileobj(source, compressed)
        plain.unlink()


def _rank_of(torch: Any) -> int:
    """The global rank: torch.distributed's when initialised, else $RANK, else 0."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    return int(os.environ.get("RANK", "0"))


def _groups(torch: Any) -> tuple[str | None, int | None, list[ManifestGroup]]:
    """(backend, world size, process groups) of torch.distributed; nothing when it is not initialised."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return None, None, []
    configs: list[dict[str, Any]] = []
    with contextlib.suppress(AttributeError, RuntimeError):  # a private helper (the profiler's own source)
        configs = dist.distributed_c10d._get_all_pg_configs()
    groups = [
        ManifestGroup(
            name=str(c.get("pg_name", "")),
            ranks=[int(r) for r in c.get("ranks", [])],
            desc=c.get("pg_desc"),
            backend=c.get("backend_config"),
        )
        for c in configs
    ]
    return str(dist.get_backend()), int(dist.get_world_size()), groups


def _versions(torch: Any) -> ManifestVersions:
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


def _devices(torch: Any) -> list[str]:
    """The name of the rank's GPU (its LOCAL_RANK), none on a CPU-only machine."""
    if not torch.cuda.is_available():
        return []
    index = int(os.environ.get("LOCAL_RANK", "0")) % max(1, torch.cuda.device_count())
    return [str(torch.cuda.get_device_name(index))]


def _part(recording: Profile, torch: Any, activities: list[str]) -> RunManifest:
    """This rank's part of the manifest."""
    rank = recording._rank if recording._rank is not None else _rank_of(torch)
    host, settings = socket.gethostname(), recording.settings
    backend, world_size, groups = _groups(torch)
    local = os.environ.get("LOCAL_RANK")
    trace = ManifestTrace(
        rank=rank, path=trace_name(rank), host=host, local_rank=int(local) if local else None
    )
    log = ManifestLog(path=nccl_log_name(host, os.getpid()), rank=rank, host=host)
    return RunManifest(
        job=settings.job, backend=backend, world_size=world_size,
        traces=[trace] if recording.trace is not None else [],
        nccl_logs=[log] if "NCCL_DEBUG_FILE" in os.environ else [],
        process_groups=groups, devices=_devices(torch), versions=_versions(torch),
        nccl_env=_nccl_settings(recording.run_dir),
        model=ManifestModel(local_batch=settings.local_batch, params=settings.params, flops_per_sample=settings.flops_per_sample),
        hardware=ManifestHardware(nic=settings.nic),
        profiler=ManifestProfiler(
            wait=settings.wait, warmup=settings.warmup, active=settings.active, repeat=1,
            record_shapes=settings.record_shapes, with_flops=settings.with_flops, activities=activities,
        ),
    )  # fmt: skip


def _nccl_settings(run_dir: Path) -> dict[str, str]:
    """Every NCCL_* variable of this process; a path inside the run folder relative to it, as manifests say."""
    found = {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")}
    log = found.get("NCCL_DEBUG_FILE")
    if log and Path(log).is_absolute() and Path(log).parent == run_dir.resolve():
        found["NCCL_DEBUG_FILE"] = Path(log).name
    return found


def _await_parts(run_dir: Path, world_size: int | None, wait_s: float) -> None:
    """Rank 0 without `traceview record`: wait (up to `wait_s`) until every rank's part is there."""
    deadline = time.monotonic() + wait_s
    while world_size and len(part_paths(run_dir)) < world_size and time.monotonic() < deadline:
        time.sleep(0.05)


def _finish(recording: Profile, torch: Any, activities: list[str], merge_wait_s: float) -> None:
    """Write this rank's part; rank 0 merges the parts into run.json."""
    part = _part(recording, torch, activities)
    rank = part.traces[0].rank if part.traces else _rank_of(torch)
    write_part(recording.run_dir, rank, part)
    if rank != 0:
        return
    if not os.environ.get(MERGED_BY_RECORD_ENV):
        _await_parts(recording.run_dir, part.world_size, merge_wait_s)
    merge_parts(recording.run_dir)


def _activities(torch: Any, wanted: tuple[str, ...]) -> tuple[list[Any], list[str]]:
    """The profiler activities asked for that this machine has (CUDA only where a GPU is), and their names."""
    kinds = torch.profiler.ProfilerActivity
    usable = {"cpu": kinds.CPU, **({"cuda": kinds.CUDA} if torch.cuda.is_available() else {})}
    names = [name for name in wanted if name in usable]
    return [usable[name] for name in names], names


@contextlib.contextmanager
def profile(
    run_dir: str | Path | None = None, *, merge_wait_s: float = MERGE_WAIT_S, **settings: Any
) -> Iterator[Profile]:
    """Record this rank into `run_dir` (default: `$TRACEVIEW_RUN_DIR`, set by `traceview record -o DIR`,
    else `traceview-run`). Keyword settings override the environment's: `wait`, `warmup`, `active` (the
    schedule, in steps), `record_shapes`, `with_flops`, `activities` (`("cpu", "cuda")`), and what the
    manifest should say of the run: `local_batch`, `params`, `flops_per_sample`, `nic`, `job`.

    Yields a `Profile`; call its `step()` once per training step. Every rank of a distributed job enters
    it; rank 0 writes `run.json`. Raises `UsageError` without PyTorch or for an unknown setting."""
    unknown = sorted(set(settings) - set(RecordSettings.__dataclass_fields__))
    if unknown:
        raise UsageError(f"traceview.profile: unknown setting(s) {', '.join(unknown)}")
    torch = _torch()
    chosen = replace(settings_from_env(), **settings)
    folder = Path(run_dir or os.environ.get(RUN_DIR_ENV) or DEFAULT_RUN_DIR)
    folder.mkdir(parents=True, exist_ok=True)
    recording = Profile(folder, chosen)
    activities, names = _activities(torch, tuple(chosen.activities))
    schedule = torch.profiler.schedule(wait=chosen.wait, warmup=chosen.warmup, active=chosen.active, repeat=1)
    with torch.profiler.profile(
        activities=activities,
        schedule=schedule,
        on_trace_ready=recording._save,
        record_shapes=chosen.record_shapes,
        with_flops=chosen.with_flops,
    ) as profiler:
        recording.profiler = profiler
        yield recording
    _finish(recording, torch, names, merge_wait_s)
