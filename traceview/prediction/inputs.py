"""The inputs of the alpha-beta prediction, each with where it came from (docs/metrics.md, "Predicted gamma";
docs/metrics.md, "Predicted gamma").

Order of precedence for every constant: the command line (or the API's `ModelOptions`), then the run's
manifest (`run.json`: `ModelOptions.sources` says which values it gave), then the NCCL log (`LinkOverride`),
then the trace (`traceview.prediction.trace_facts`; GPUs per node: `traceview.prediction.topology`), then the
hardware table, then a stated default. What cannot be had is None and a note says which option supplies it;
nothing here raises for an unknown device (a `--nic` or `--dtype` the table does not know is a usage error).
FLOPs per step: stated FLOPs per sample x b, else 6 P b when P or b is stated, else the trace's `flops` args,
else 6 P b of what the trace suggests.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import polars as pl

from traceview.core.hardware import (
    GpuSpec,
    HardwareLookupError,
    link,
    match_device,
    normalise_dtype,
    peak_flops,
)
from traceview.core.records import record
from traceview.model.trace import Run
from traceview.options.model import LinkOverride, ModelOptions
from traceview.prediction.algorithms import logged_algorithms
from traceview.prediction.links import (
    KNOWN_LINK_SOURCES,
    Link,
    group_assumptions,
    group_links,
    link_assumptions,
    resolve_host_link,
    resolve_link,
)
from traceview.prediction.topology import Topology, resolve_topology, run_facts
from traceview.prediction.trace_facts import Assumption, Stated, device_name, workload

__all__ = ["KNOWN_LINK_SOURCES", "Link", "LinkOverride", "ModelInputs", "ModelOptions", "resolve_inputs"]

if TYPE_CHECKING:
    from traceview.nccl.join import NcclJoin

DEFAULT_EFFICIENCY = 0.5
"""R = peak x efficiency. 0.5: the model FLOPs utilisation reported for well-tuned large-model training on
A100-class GPUs (about 46% for PaLM, 52% for Megatron-LM's trillion-parameter run); docs/metrics.md."""
DEFAULT_DTYPE = "fp32"
SOCKET_LINK = "tcp_socket"
"""The hardware table's row of NCCL's socket transport (10 GbE): the link across nodes when a log says so."""


@record
class ModelInputs:
    """The resolved inputs; None where unknown. `flops` has columns rank, step, flops (`flops_source`: trace,
    6 P b, FLOPs per sample x b); `topology` says where the GPUs per node came from."""

    device: str | None
    gpu: GpuSpec | None
    dtype: str
    peak_flops: float | None
    efficiency: float
    ranks_per_node: int
    intra: Link | None
    inter: Link | None
    params: float | None
    local_batch: float | None
    grad_group: str | None
    grad_bytes_per_param: int | None
    workers: int | None
    flops: pl.DataFrame
    flops_source: str | None
    assumptions: tuple[Assumption, ...]
    notes: tuple[str, ...]
    group_links: tuple[tuple[str, Link], ...] = ()
    topology: Topology | None = None
    host_link: Link | None = None  # host collectives (gloo, MPI) inside a host; across hosts: `inter`
    links_measured: bool = False  # a stated B was measured in this run (run.json hardware.links_measured)
    nics_per_node: int | None = None  # NICs per node for rail-aligned rings; None: one per GPU
    logged_algorithms: tuple[tuple[str, int, str], ...] = ()  # what the NCCL logs say ran (`algorithms`)

    @property
    def sustained_flops(self) -> float | None:
        """R = peak x efficiency (FLOP/s), None when the peak is unknown."""
        return None if self.peak_flops is None else self.peak_flops * self.efficiency


def _peak(
    gpu: GpuSpec | None, dtype: str, options: ModelOptions, device: str | None
) -> tuple[float | None, Assumption, str]:
    if options.peak_flops is not None:
        source = options.source_of("peak_flops")
        detail = "--peak-flops" if source == "command line" else "run.json"
        return options.peak_flops, Assumption("peak FLOP/s", options.peak_flops, "FLOP/s", source, detail), ""
    unknown = Assumption("peak FLOP/s", None, "FLOP/s", "default", "unknown: give --peak-flops")
    if gpu is None:
        where = f"unknown device {device!r}" if device else "no device in the traces"
        return None, unknown, f"{where}: give --peak-flops and --bandwidth"
    try:
        value = peak_flops(gpu, dtype)
    except HardwareLookupError as error:
        return None, unknown, str(error)
    detail = f"{gpu.name} {dtype} dense: {gpu.source}"
    return value, Assumption("peak FLOP/s", value, "FLOP/s", "hardware table", detail), ""


def _dtype(options: ModelOptions, grad_dtype: str | None) -> tuple[str, Assumption]:
    if options.dtype is not None:
        value, source = normalise_dtype(options.dtype), options.source_of("dtype")
        return value, Assumption(
            "compute dtype", value, "", source, "--dtype" if source == "command line" else "run.json"
        )
    if grad_dtype is not None:
        value = normalise_dtype(grad_dtype)
        return value, Assumption("compute dtype", value, "", "trace", "dtype of the gradient all-reduce")
    return DEFAULT_DTYPE, Assumption("compute dtype", DEFAULT_DTYPE, "", "default", "give --dtype")


def _device(run: Run, options: ModelOptions) -> tuple[str | None, GpuSpec | None, Assumption]:
    """The device: stated (the manifest), else the traces' commonest name; matched in the hardware table."""
    stated = options.device
    name = stated if stated is not None else device_name(run)
    gpu = match_device(name) if name else None
    source = options.source_of("device") if stated is not None else ("trace" if name else "default")
    return name, gpu, Assumption("device", name, "", source, gpu.name if gpu else "not in the hardware table")


def _efficiency(options: ModelOptions) -> tuple[float, Assumption]:
    if options.efficiency is None:
        return DEFAULT_EFFICIENCY, Assumption(
            "efficiency", DEFAULT_EFFICIENCY, "", "default", "R = peak x efficiency"
        )
    source = options.source_of("efficiency")
    return options.efficiency, Assumption(
        "efficiency", options.efficiency, "", source, "R = peak x efficiency"
    )


def _stated(options: ModelOptions) -> Stated:
    return Stated(
        options.params,
        options.local_batch,
        options.flops_per_sample,
        options.source_of("params"),
        options.source_of("local_batch"),
        options.source_of("flops_per_sample"),
        options.local_batch_unit,
        options.params_per_rank,
        options.model_shards,
        options.source_of("params_per_rank"),
    )


def _topology(run: Run, options: ModelOptions) -> Topology:
    """The GPUs per node from the traces and what the user stated."""
    stated = (options.gpus_per_node, options.source_of("gpus_per_node"))
    return resolve_topology(run_facts(run, stated=stated))


def resolve_inputs(
    run: Run,
    calls: pl.DataFrame,
    options: ModelOptions,
    topology: Topology | None = None,
    group_sizes: Assumption | None = None,
) -> ModelInputs:
    """Every input of the prediction with its provenance (`step_calls` gives `calls`; `topology` the GPUs per
    node, by default from the traces alone; `group_sizes` the assumed n of calls without a group, if any)."""
    device, gpu, device_a = _device(run, options)
    work = workload(run, calls, _stated(options))
    dtype, dtype_a = _dtype(options, work.grad_dtype)
    peak, peak_a, peak_note = _peak(gpu, dtype, options, device)
    efficiency, efficiency_a = _efficiency(options)
    nodes = topology or _topology(run, options)
    intra, intra_note = resolve_link(options, gpu, "intra", nodes.ranks_per_node)
    inter, inter_note = resolve_link(options, gpu, "inter", nodes.ranks_per_node)
    groups = group_links(options, intra if intra else inter)
    host, host_note, host_assumed = _host_link(options, calls)
    sustained = None if peak is None else peak * efficiency
    assumptions = (
        device_a,
        dtype_a,
        peak_a,
        efficiency_a,
        Assumption("R (sustained FLOP/s)", sustained, "FLOP/s", peak_a.source, "peak x efficiency"),
        Assumption("GPUs per node", nodes.ranks_per_node, "", nodes.source, nodes.detail),
        *_nics(options),
        *link_assumptions(intra, "intra"),
        *link_assumptions(inter, "inter"),
        *host_assumed,
        *work.assumptions,
        *group_assumptions(groups),
        *((group_sizes,) if group_sizes else ()),
    )
    return ModelInputs(
        device=device,
        gpu=gpu,
        dtype=dtype,
        peak_flops=peak,
        efficiency=efficiency,
        ranks_per_node=nodes.ranks_per_node,
        intra=intra,
        inter=inter,
        params=work.params,
        local_batch=work.local_batch,
        grad_group=work.grad_group,
        grad_bytes_per_param=work.grad_bytes_per_param,
        workers=work.workers,
        flops=work.flops,
        flops_source=work.flops_source,
        assumptions=assumptions,
        group_links=groups,
        topology=nodes,
        notes=tuple(n for n in (peak_note, intra_note, inter_note, host_note, work.note) if n),
        host_link=host,
        links_measured=_stated_measured(options, (intra, inter, host)),
        nics_per_node=options.nics_per_node,
        logged_algorithms=options.logged_algorithms,
    )


def _nics(options: ModelOptions) -> tuple[Assumption, ...]:
    """The NICs per node that carry a hierarchical collective's rings across nodes, when stated (else one per
    GPU, docs/metrics.md, "Predicted gamma", Links)."""
    if options.nics_per_node is None:
        return ()
    source = options.source_of("nics_per_node")
    detail = "--nics-per-node" if source == "command line" else "run.json hardware.nics_per_node"
    return (Assumption("NICs per node", options.nics_per_node, "", source, detail),)


def _stated_measured(options: ModelOptions, links: tuple[Link | None, ...]) -> bool:
    """Whether run.json says its bandwidths were measured in this run and the prediction uses one of them."""
    return bool(options.links_measured) and any(
        found is not None and found.source == "manifest" for found in links
    )


def _host_link(options: ModelOptions, calls: pl.DataFrame) -> tuple[Link | None, str, tuple[Assumption, ...]]:
    """The link of host collectives inside a host, its note and its assumptions, when some call of the run ran
    on the host (none otherwise)."""
    if not _has_host_calls(calls):
        return None, "", ()
    host, note = resolve_host_link(options)
    return host, note, tuple(link_assumptions(host, "host"))


def _has_host_calls(calls: pl.DataFrame) -> bool:
    """Whether some call of the run ran on the host (gloo, MPI)."""
    return "comm_kind" in calls.columns and bool((calls.get_column("comm_kind") == "host").any())


def with_nccl_overrides(options: ModelOptions, nccl: NcclJoin | None) -> ModelOptions:
    """`options` plus one per-group `LinkOverride` for every link override of the NCCL-log join (a socket
    fallback): the group's B becomes that link's, with provenance "nccl log"; and when the logs say NCCL
    crosses nodes over sockets, the link across nodes itself (`SOCKET_LINK`), with the same provenance; and
    the algorithms the logs' TUNING lines name per collective and size (`logged_algorithms`)."""
    if nccl is None:
        return options
    found = tuple(
        LinkOverride("inter", o.link.name, o.bandwidth_bytes_per_s, o.link.alpha_s, o.reason, o.group)
        for o in nccl.link_overrides
    )
    if nccl.inter_network == "Socket":  # the link across nodes of every group, what-ifs included
        socket = link(SOCKET_LINK)
        reason = f"the NCCL log says NCCL crosses nodes over TCP sockets ({nccl.inter_network_evidence})"
        found += (LinkOverride("inter", socket.name, socket.bandwidth_bytes_per_s, socket.alpha_s, reason),)
    options = replace(options, link_overrides=(*options.link_overrides, *found)) if found else options
    algorithms = logged_algorithms(nccl.algorithms)
    return replace(options, logged_algorithms=algorithms) if algorithms else options
