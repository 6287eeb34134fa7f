"""What the analysis takes from a run's `run.json` (docs/run-manifest.md): the files it lists, the model's inputs
it states and the hosts of its ranks (for the prediction's topology), each filled only where the command line
left it unset and marked with the source `manifest`, and the NCCL logs it lists.

Precedence of a model input: the command line, then the manifest, then the NCCL log, then the traces, then
the hardware table, then a stated default (`traceview.prediction.inputs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceview.load.manifest import (
    RunManifest,
    find_manifest,
    is_manifest_file,
    load_manifest,
    manifest_files,
)

if TYPE_CHECKING:  # the analysis' modules are imported when options are made, not when files are listed
    from traceview.reduce.results import AnalysisOptions

MANIFEST_SOURCE = "manifest"
_US = 1e-6
MODEL_FIELDS: tuple[tuple[str, str, str, float], ...] = (
    # (PredictionOptions field, manifest section, manifest key, scale to the option's unit)
    ("params", "model", "params", 1.0),
    ("local_batch", "model", "local_batch", 1.0),
    ("flops_per_sample", "model", "flops_per_sample", 1.0),
    ("dtype", "model", "dtype", 1.0),
    ("device", "hardware", "device", 1.0),
    ("gpus_per_node", "hardware", "gpus_per_node", 1.0),
    ("nic", "hardware", "nic", 1.0),
    ("peak_flops", "hardware", "peak_flops", 1.0),
    ("efficiency", "hardware", "efficiency", 1.0),
    ("bandwidth_Bps", "hardware", "intra_bandwidth_Bps", 1.0),
    ("inter_bandwidth_Bps", "hardware", "inter_bandwidth_Bps", 1.0),
    ("alpha_s", "hardware", "intra_alpha_us", _US),
    ("inter_alpha_s", "hardware", "inter_alpha_us", _US),
)
"""The model inputs a manifest may state, as rows: where each is read and how it is scaled."""


def run_manifest(spec: str | Path | Sequence[str | Path]) -> tuple[Path, RunManifest] | None:
    """The manifest `spec` names (a `run.json`, or a folder holding one) and its contents; None without one.
    A manifest that breaks its rules raises `InputError` naming it."""
    if not isinstance(spec, str | Path):
        return None
    path = find_manifest(spec)
    return None if path is None else (path, load_manifest(path))


def manifest_traces(path: Path, manifest: RunManifest) -> list[Path]:
    """The trace files of a manifest: those it lists, else the traces of its folder (manifests left out)."""
    listed, _ = manifest_files(path, manifest)
    if listed:
        return listed
    folder = path.parent
    return sorted(
        p
        for p in folder.iterdir()
        if p.is_file() and p.name.endswith((".json", ".json.gz")) and not is_manifest_file(p)
    )


def manifest_logs(spec: str | Path | Sequence[str | Path]) -> list[Path]:
    """The NCCL logs a manifest lists (none without one)."""
    found = run_manifest(spec)
    return [] if found is None else manifest_files(*found)[1]


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


def with_manifest(options: AnalysisOptions, path: Path, manifest: RunManifest) -> AnalysisOptions:
    """`options` with every model input the manifest states and the command line left unset, each marked
    `manifest`, and the ranks per host (`ranks_per_host`, else `hardware.gpus_per_node`)."""
    from traceview.prediction.inputs import PredictionOptions

    model = options.prediction
    given = {f.name for f in fields(PredictionOptions) if getattr(model, f.name) not in (None, ())}
    filled = {name: value for name, value in stated_inputs(manifest).items() if name not in given}
    sources = (*model.sources, *((name, MANIFEST_SOURCE) for name in filled))
    per_host = manifest.ranks_per_host or manifest.hardware.gpus_per_node
    use_per_host = options.ranks_per_host is None and per_host is not None
    if use_per_host:
        sources = (*sources, ("ranks_per_host", MANIFEST_SOURCE))
    return replace(
        options,
        prediction=replace(model, **filled, sources=sources),
        ranks_per_host=per_host if use_per_host else options.ranks_per_host,
        ranks_per_host_source="run.json" if use_per_host else options.ranks_per_host_source,
        manifest=str(path),
    )
