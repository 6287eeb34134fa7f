"""What the analysis takes from a run's `run.json` (docs/run-manifest.md): the model's inputs it states and the
hosts of its ranks (for the prediction's topology), each filled only where the command line left it unset and
marked with the source `manifest`, and the NCCL logs it lists.

Precedence of a model input: the command line, then the manifest, then the NCCL log, then the traces, then
the hardware table, then a stated default (docs/metrics.md, "Predicted gamma").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceview.load.manifest import RunManifest, find_manifest, load_manifest, manifest_files

if TYPE_CHECKING:  # the analysis' modules are imported when options are made, not when files are listed
    from traceview.reduce.results import AnalysisOptions

MANIFEST_SOURCE = "manifest"

_US = 1e6
MODEL_FIELDS: tuple[tuple[str, str, str, float], ...] = (
    # (PredictionOptions field, manifest section, manifest key, divisor to the option's unit)
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
"""The model inputs a manifest may state, as rows: where each is read and what it is divided by (us -> s)."""


def run_manifest(spec: str | Path | Sequence[str | Path]) -> tuple[Path, RunManifest] | None:
    """The manifest `spec` names (a `run.json`, or a folder holding one) and its contents; None without one.
    A manifest that breaks its rules raises `InputError` naming it."""
    if not isinstance(spec, str | Path):
        return None
    path = find_manifest(spec)
    return None if path is None else (path, load_manifest(path))


def manifest_logs(spec: str | Path | Sequence[str | Path]) -> list[Path]:
    """The NCCL logs a manifest lists (none without one)."""
    found = run_manifest(spec)
    return [] if found is None else manifest_files(*found)[1]


def stated_inputs(manifest: RunManifest) -> dict[str, Any]:
    """Every model input the manifest states, in the option's unit (GPUs per node: `ranks_per_host`, else
    `hardware.gpus_per_node`)."""
    stated: dict[str, Any] = {}
    for option, section, key, divisor in MODEL_FIELDS:
        value = getattr(getattr(manifest, section), key)
        if value is not None:
            stated[option] = value / divisor if divisor != 1.0 else value
    if manifest.ranks_per_host is not None:
        stated["gpus_per_node"] = manifest.ranks_per_host
    hosts = manifest.hosts_by_rank()
    if hosts:
        stated["rank_hosts"] = tuple(sorted(hosts.items()))
    return stated


def with_manifest(options: AnalysisOptions, spec: str | Path | Sequence[str | Path]) -> AnalysisOptions:
    """`options` with every model input the run's manifest states and the command line left unset, each
    marked `manifest` (its hosts reach the prediction's topology, `PredictionOptions.rank_hosts`; the clock
    alignment labels every host mapping it is given `nccl log`, so they are not passed to it). `options` as
    they are without a manifest."""
    found = run_manifest(spec)
    if found is None:
        return options
    model = options.prediction
    given = {f.name for f in fields(model) if getattr(model, f.name) not in (None, ())}
    filled = {name: value for name, value in stated_inputs(found[1]).items() if name not in given}
    sources = (*model.sources, *((name, MANIFEST_SOURCE) for name in filled))
    return replace(options, prediction=replace(model, **filled, sources=sources))
