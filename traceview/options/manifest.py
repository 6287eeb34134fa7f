"""`run.json`, the run manifest: what a run folder holds and what no trace says (docs/run-manifest.md).

`traceview record` and `traceview.profile()` write it at the root of a run folder; `traceview report run.json`
(or a folder that holds one) reads it, and every analysis prefers its facts over defaults, with the source
`manifest`. Every field is optional; unknown keys are ignored (a newer writer stays readable), a major
`schema_version` other than ours is refused. Paths are relative to the manifest's folder.
"""

from __future__ import annotations

import datetime as dt
import math
import os
from pathlib import Path
from typing import Any

import msgspec

from traceview.core.boundary import RunBoundary, repeated
from traceview.core.errors import InputError
from traceview.core.reading import check_kind, with_compressed
from traceview.core.sanitize import printable

MANIFEST_NAME = "run.json"
SCHEMA_VERSION = "1.0"
KIND = "traceview-run"


class ManifestTrace(msgspec.Struct, frozen=True, omit_defaults=True):
    """One rank's trace file: its global rank, path (relative to the manifest), host and local rank."""

    rank: int
    path: str
    host: str | None = None
    local_rank: int | None = None


class ManifestLog(msgspec.Struct, frozen=True, omit_defaults=True):
    """One NCCL_DEBUG log file (per rank when `NCCL_DEBUG_FILE` held `%r`/`%p`, else one for the job)."""

    path: str
    rank: int | None = None
    host: str | None = None


class ManifestGroup(msgspec.Struct, frozen=True, omit_defaults=True):
    """A process group as the job created it: name (PyTorch's id), description, member ranks, backend, and the
    DeviceMesh dimension it serves (`dp`, `tp`, ...) where the job built a mesh."""

    name: str
    ranks: list[int] = msgspec.field(default_factory=list)
    desc: str | None = None
    backend: str | None = None
    mesh_dim: str | None = None


class ManifestModel(msgspec.Struct, frozen=True, omit_defaults=True):
    """What the user knows of the workload: local batch b (examples, or tokens for a transformer), parameter
    count P, model FLOPs per sample (forward + backward), compute dtype, global batch; the unit of the local
    batch (`examples` or `tokens`) where the recorder measured it."""

    local_batch: float | None = None
    local_batch_unit: str | None = None
    params: float | None = None
    params_per_rank: float | None = None  # one rank's share of P (a pipeline stage's, a TP shard's)
    flops_per_sample: float | None = None
    dtype: str | None = None
    global_batch: float | None = None
    hidden: float | None = None  # the model's shape (docs/metrics.md, "Parallelism dimensions")
    seq_len: float | None = None
    layers: float | None = None
    micro_batches: float | None = None
    top_k: float | None = None
    experts: float | None = None
    moe_layers: float | None = None


class ManifestHardware(msgspec.Struct, frozen=True, omit_defaults=True):
    """The machine as the user or the recorder knows it: device name, GPUs per node, NIC (a hardware-table
    key such as `ib_ndr`), link bandwidths (bytes/s, one direction per GPU), latencies (us), peak FLOP/s and
    the share of it sustained."""

    device: str | None = None
    gpus_per_node: int | None = None
    nics_per_node: int | None = None  # NICs per node of rail-aligned rings across nodes
    nic: str | None = None
    intra_bandwidth_Bps: float | None = None  # noqa: N815 - B inside a node
    inter_bandwidth_Bps: float | None = None  # noqa: N815 - B across nodes
    host_bandwidth_Bps: float | None = None  # noqa: N815 - B of host collectives inside a host (gloo, MPI)
    links_measured: bool | None = None  # the bandwidths above were measured in this run (a probe, nccl-tests)
    intra_alpha_us: float | None = None
    inter_alpha_us: float | None = None
    peak_flops: float | None = None
    efficiency: float | None = None  # share of peak_flops sustained: R = peak x efficiency


class ManifestVersions(msgspec.Struct, frozen=True, omit_defaults=True):
    """Software versions the recorder saw."""

    torch: str | None = None
    nccl: str | None = None
    cuda: str | None = None
    python: str | None = None
    traceview: str | None = None


class ManifestProfiler(msgspec.Struct, frozen=True, omit_defaults=True):
    """How the traces were recorded: the `torch.profiler.schedule` and the options."""

    wait: int | None = None
    warmup: int | None = None
    active: int | None = None
    repeat: int | None = None
    record_shapes: bool | None = None
    with_flops: bool | None = None
    activities: list[str] = msgspec.field(default_factory=list)


class RunManifest(msgspec.Struct, frozen=True, omit_defaults=True):
    """The whole manifest; see docs/run-manifest.md for every field."""

    schema_version: str = SCHEMA_VERSION
    kind: str = KIND
    job: str | None = None
    commit: str | None = None  # the code's version (a git commit), for trend's labels
    created: str | None = None  # ISO 8601, UTC
    backend: str | None = None
    world_size: int | None = None
    ranks_per_host: int | None = None
    parallelism: str | None = None  # the layout, innermost axis first: "tp=8,pp=4,dp=*" (as --dims)
    traces: list[ManifestTrace] = msgspec.field(default_factory=list)
    nccl_logs: list[ManifestLog] = msgspec.field(default_factory=list)
    nccl_inspector: list[ManifestLog] = msgspec.field(default_factory=list)  # NCCL Inspector JSON outputs
    flight_recorder: list[str] = msgspec.field(default_factory=list)  # Flight Recorder dumps or folders
    process_groups: list[ManifestGroup] = msgspec.field(default_factory=list)
    devices: list[str] = msgspec.field(default_factory=list)
    versions: ManifestVersions = msgspec.field(default_factory=ManifestVersions)
    nccl_env: dict[str, str] = msgspec.field(default_factory=dict)
    model: ManifestModel = msgspec.field(default_factory=ManifestModel)
    hardware: ManifestHardware = msgspec.field(default_factory=ManifestHardware)
    profiler: ManifestProfiler = msgspec.field(default_factory=ManifestProfiler)
    notes: list[str] = msgspec.field(default_factory=list)
    sources: dict[str, str] = msgspec.field(
        default_factory=dict
    )  # field ("model.params") -> where it came from

    def hosts_by_rank(self) -> dict[int, str]:
        """Global rank -> host, from the trace entries that name one."""
        return {trace.rank: trace.host for trace in self.traces if trace.host}


_DECODER = msgspec.json.Decoder(RunManifest)
SHAPE_FIELDS = ("hidden", "seq_len", "layers", "micro_batches", "top_k", "experts", "moe_layers")
"""The model's shape a manifest may state (`model.<field>`): `traceview.options.parallel.ModelShape`."""
_POSITIVE_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "model",
        ("local_batch", "params", "params_per_rank", "flops_per_sample", "global_batch", *SHAPE_FIELDS),
    ),
    ("hardware", ("intra_bandwidth_Bps", "inter_bandwidth_Bps", "host_bandwidth_Bps", "peak_flops")),
)
_NON_NEGATIVE_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("hardware", ("intra_alpha_us", "inter_alpha_us")),
)


PART_PREFIX = "run.rank"
"""Per-rank parts of a manifest (`run.rank<N>.json`), which `traceview record` merges into `run.json`: never
traces."""


def is_manifest_file(path: Path) -> bool:
    """A manifest or one of its per-rank parts: a folder's JSON that is never a trace."""
    return path.name == MANIFEST_NAME or (path.name.startswith(PART_PREFIX) and path.suffix == ".json")


TRACE_SUFFIXES = with_compressed((".json",))
"""File endings read as Kineto traces inside a folder (`.pt.trace.json[.gz]` included, and every compressed
format `traceview.core.reading` knows: those it cannot read are named as skipped, never silently left out)."""


def traces_in(folder: Path) -> list[Path]:
    """The trace files of a folder, sorted: the entries named like traces (`TRACE_SUFFIXES`) that are not
    manifests nor folders; whatever else they are (a FIFO, a socket) is said when they are read."""
    return sorted(
        p
        for p in folder.iterdir()
        if p.name.endswith(TRACE_SUFFIXES) and not is_manifest_file(p) and not p.is_dir()
    )


def find_manifest(spec: str | Path) -> Path | None:
    """The manifest `spec` names: `spec` itself when it is a `run.json`, the `run.json` inside a folder, else
    None (a run without a manifest works as before)."""
    path = Path(spec)
    if path.is_file() and path.name == MANIFEST_NAME:
        return path
    inside = path / MANIFEST_NAME
    return inside if path.is_dir() and inside.is_file() else None


def _check_numbers(path: Path, manifest: RunManifest) -> None:
    """Refuse a physically meaningless number (zero, negative, not finite) in one line naming it."""
    checks = [(part, names, False) for part, names in _POSITIVE_FIELDS]
    checks += [(part, names, True) for part, names in _NON_NEGATIVE_FIELDS]
    for part, names, zero_ok in checks:
        section = getattr(manifest, part)
        for name in names:
            value = getattr(section, name)
            if value is None:
                continue
            if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
                raise InputError(
                    path,
                    f"{part}.{name} = {value!r} is not a {'non-negative' if zero_ok else 'positive'} finite "
                    f"number",
                )
    efficiency = manifest.hardware.efficiency
    if efficiency is not None and not (math.isfinite(efficiency) and 0 < efficiency <= 1):
        raise InputError(path, f"hardware.efficiency = {efficiency!r} is not in (0, 1]")
    counts = [(name, getattr(manifest, name)) for name in ("world_size", "ranks_per_host")]
    counts += [("hardware.gpus_per_node", manifest.hardware.gpus_per_node)]
    for name, value in [*counts, ("hardware.nics_per_node", manifest.hardware.nics_per_node)]:
        if value is not None and not 1 <= value <= 1 << 24:
            raise InputError(path, f"{name} = {value} is outside 1 .. 16,777,216")


def _check_created(path: Path, manifest: RunManifest) -> None:
    """Refuse a `created` that is not an ISO 8601 time (trend orders runs by it)."""
    if manifest.created is None:
        return
    try:
        dt.datetime.fromisoformat(manifest.created.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(
            path, f"created = {manifest.created!r} is not an ISO 8601 time (2026-11-20T02:00:00Z)"
        ) from None


def load_manifest(path: str | Path) -> RunManifest:
    """Read and check a `run.json`. Raises `InputError` naming the file and the problem."""
    path = Path(path)
    check_kind(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from exc
    try:
        manifest = _DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise InputError(path, f"not a traceview run manifest: {exc}") from exc
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # invalid UTF-8: one or the other by release
        raise InputError(path, f"malformed JSON: {exc}") from exc
    if manifest.kind != KIND:
        raise InputError(path, f"kind {manifest.kind!r} is not {KIND!r}: not a traceview run manifest")
    if manifest.schema_version.partition(".")[0] != SCHEMA_VERSION.partition(".")[0]:
        raise InputError(
            path,
            f"schema_version {manifest.schema_version} is not readable by this traceview (reads "
            f"{SCHEMA_VERSION})",
        )
    _check_numbers(path, manifest)
    _check_created(path, manifest)
    return manifest


def manifest_files(
    path: str | Path, manifest: RunManifest, run_root: str | Path | None = None
) -> tuple[list[Path], list[Path]]:
    """(trace files, NCCL logs) the manifest lists, resolved against its folder. Raises `InputError` naming
    the entry, before any file is opened, for an entry outside the run (its folder, or below `run_root`), a
    system or special file (`traceview.core.boundary`), or a file named by two entries."""
    boundary = RunBoundary.of_manifest(path, run_root)
    named = [(f"traces[{i}].path", entry.path) for i, entry in enumerate(manifest.traces)]
    named += [(f"nccl_logs[{i}].path", entry.path) for i, entry in enumerate(manifest.nccl_logs)]
    files = [Path(boundary.entry(text, field)) for field, text in named]
    twice = repeated(os.path.realpath(file) for file in files)
    if twice is not None:
        first, again = twice
        raise InputError(
            path,
            f"{named[again][0]} names the file {named[first][0]} names already "
            f"({printable(named[again][1], 200)!r}): each file once; refused before any is read",
        )
    return files[: len(manifest.traces)], files[len(manifest.traces) :]


def manifest_inspector_files(
    path: str | Path, manifest: RunManifest, run_root: str | Path | None = None
) -> list[Path]:
    """The NCCL Inspector output files the manifest lists (`nccl_inspector`), resolved against its folder;
    each inside the run (`traceview.core.boundary`), else refused before any is read."""
    boundary = RunBoundary.of_manifest(path, run_root)
    named = [(f"nccl_inspector[{i}].path", entry.path) for i, entry in enumerate(manifest.nccl_inspector)]
    return [Path(boundary.entry(text, field)) for field, text in named]


def manifest_dumps(path: str | Path, manifest: RunManifest, run_root: str | Path | None = None) -> list[Path]:
    """The Flight Recorder dumps (files or folders) the manifest lists, resolved against its folder; each
    inside the run (`traceview.core.boundary`), else refused before any is read."""
    boundary = RunBoundary.of_manifest(path, run_root)
    named = [(f"flight_recorder[{i}]", dump) for i, dump in enumerate(manifest.flight_recorder)]
    return [Path(boundary.entry(text, field, folder_ok=True)) for field, text in named]


def write_manifest(path: str | Path, manifest: RunManifest) -> Path:
    """Write `manifest` as indented JSON (keys in schema order; `schema_version` and `kind` always, other
    defaults left out); returns the path."""
    target = Path(path)
    if target.is_dir():
        target = target / MANIFEST_NAME
    document = {"schema_version": manifest.schema_version, "kind": manifest.kind}
    document.update(msgspec.to_builtins(manifest))
    target.write_bytes(msgspec.json.format(msgspec.json.encode(document), indent=2) + b"\n")
    return target


_US = 1e-6
MODEL_FIELDS: tuple[tuple[str, str, str, float], ...] = (
    # (ModelOptions field, manifest section, manifest key, scale to the option's unit)
    ("params", "model", "params", 1.0),
    ("params_per_rank", "model", "params_per_rank", 1.0),
    ("local_batch", "model", "local_batch", 1.0),
    ("local_batch_unit", "model", "local_batch_unit", 1.0),
    ("flops_per_sample", "model", "flops_per_sample", 1.0),
    ("dtype", "model", "dtype", 1.0),
    ("device", "hardware", "device", 1.0),
    ("gpus_per_node", "hardware", "gpus_per_node", 1.0),
    ("nics_per_node", "hardware", "nics_per_node", 1.0),
    ("nic", "hardware", "nic", 1.0),
    ("peak_flops", "hardware", "peak_flops", 1.0),
    ("efficiency", "hardware", "efficiency", 1.0),
    ("bandwidth_Bps", "hardware", "intra_bandwidth_Bps", 1.0),
    ("inter_bandwidth_Bps", "hardware", "inter_bandwidth_Bps", 1.0),
    ("host_bandwidth_Bps", "hardware", "host_bandwidth_Bps", 1.0),
    ("links_measured", "hardware", "links_measured", 1.0),
    ("alpha_s", "hardware", "intra_alpha_us", _US),
    ("inter_alpha_s", "hardware", "inter_alpha_us", _US),
)
"""The model inputs a manifest may state, as rows: where each is read and how it is scaled."""


def stated_inputs(manifest: RunManifest) -> dict[str, Any]:
    """Every model input the manifest states, in the option's unit (GPUs per node: `ranks_per_host`, else
    `hardware.gpus_per_node`), and the hosts of its ranks."""
    stated: dict[str, Any] = {}
    for option, section, key, scale in MODEL_FIELDS:
        value = getattr(getattr(manifest, section), key)
        if value is not None:
            stated[option] = value * scale if isinstance(value, float | int) and scale != 1.0 else value
    if manifest.ranks_per_host is not None:
        stated["gpus_per_node"] = manifest.ranks_per_host
    hosts = manifest.hosts_by_rank()
    if hosts:
        stated["rank_hosts"] = tuple(sorted(hosts.items()))
    return stated


def stated_shape(manifest: RunManifest) -> dict[str, float]:
    """The model's shape the manifest states (`model.hidden`, ...), by `ModelShape` field."""
    values = {name: getattr(manifest.model, name) for name in SHAPE_FIELDS}
    return {name: float(value) for name, value in values.items() if value is not None}
