"""The `run.json` of a simulated run (docs/run-manifest.md): what the simulator used, stated as a recorder
would state it for a real run, so that the analysis of a sample reads its links, placement and workload
instead of assuming them.

Links: the simulator times a group inside one host with `intra_host_bandwidth_Bps`/`intra_host_alpha_s` (the
cross-host figures when unset) and a group across hosts with `bandwidth_Bps`/`alpha_s`. Compute: a scenario
with a planted model (`Scenario.model`) computes at exactly R = `flops_per_s`, stated as `peak_flops` = R with
`efficiency` 1; its local batch, parameters and FLOPs per sample (6 P) are stated too.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tests.simulate.scenario import Scenario
from traceview.core.costmodel import FLOPS_PER_PARAM_PER_EXAMPLE
from traceview.options.manifest import (
    ManifestGroup,
    ManifestHardware,
    ManifestModel,
    ManifestTrace,
    ManifestVersions,
    RunManifest,
)

DTYPES = {2: "bf16", 4: "fp32"}
"""Gradient bytes per parameter -> the compute dtype a manifest names."""


def _hardware(scenario: Scenario) -> ManifestHardware:
    intra_b = scenario.intra_host_bandwidth_Bps or scenario.bandwidth_Bps
    intra_alpha = scenario.alpha_s if scenario.intra_host_alpha_s is None else scenario.intra_host_alpha_s
    model = scenario.model
    return ManifestHardware(
        device=scenario.device_name,
        gpus_per_node=scenario.ranks_per_host,
        intra_bandwidth_Bps=intra_b,
        inter_bandwidth_Bps=scenario.bandwidth_Bps,
        intra_alpha_us=intra_alpha * 1e6,
        inter_alpha_us=scenario.alpha_s * 1e6,
        peak_flops=model.flops_per_s if model else None,
        efficiency=1.0 if model else None,
    )


def _model(scenario: Scenario) -> ManifestModel:
    model = scenario.model
    if model is None and scenario.recorded_workload is not None:
        batch, params = scenario.recorded_workload
        dtype = _gradient_dtype(scenario)
        if scenario.recorded_per_rank:  # a recorder on a pipeline stage counts that stage's parameters
            return ManifestModel(local_batch=batch, params_per_rank=params, dtype=dtype)
        return ManifestModel(local_batch=batch, params=params, dtype=dtype)
    if model is None:
        return ManifestModel()
    return ManifestModel(
        local_batch=float(model.local_batch),
        params=float(model.params),
        flops_per_sample=FLOPS_PER_PARAM_PER_EXAMPLE * model.params,
        dtype=DTYPES.get(model.grad_bytes_per_param),
    )


def _gradient_dtype(scenario: Scenario) -> str | None:
    """The compute dtype a recorder names: that of the run's all-reduced gradients."""
    names = {spec.dtype for spec in scenario.collectives if spec.collective == "AllReduce"}
    return {"BFloat16": "bf16", "Float": "fp32", "Half": "fp16"}.get(names.pop()) if len(names) == 1 else None


def _groups(scenario: Scenario) -> list[ManifestGroup]:
    seen = {spec.pg.name: spec.pg for spec in scenario.collectives}
    return [
        ManifestGroup(name=g.name, ranks=list(g.ranks), desc=g.desc, backend="nccl") for g in seen.values()
    ]


def scenario_manifest(job: str, scenario: Scenario, files: Sequence[Path]) -> RunManifest:
    """The manifest of `scenario` written as `files` (one per rank, in rank order), named `job`."""
    traces = [
        ManifestTrace(
            rank=rank,
            path=path.name,
            host=scenario.hostname(scenario.host_of(rank)),
            local_rank=rank % scenario.ranks_per_host,
        )
        for rank, path in enumerate(files)
    ]
    return RunManifest(
        job=job,
        backend="nccl",
        world_size=scenario.ranks,
        ranks_per_host=scenario.ranks_per_host,
        traces=traces,
        process_groups=_groups(scenario),
        devices=[scenario.device_name],
        versions=ManifestVersions(torch=scenario.pytorch_version, nccl=scenario.nccl_version),
        model=_model(scenario),
        hardware=_hardware(scenario),
        notes=[
            "written by traceview's simulator (sample_traces/make_samples.py): links, placement and workload "
            "as simulated"
        ],
    )
