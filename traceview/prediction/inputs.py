"""The inputs of the alpha-beta prediction, each with where it came from (SPEC section 5; docs/metrics.md,
"Predicted gamma").

Order of precedence for every constant: the command line (or the API's `PredictionOptions`), then the NCCL log
(`LinkOverride`), then the trace (`traceview.prediction.trace_facts`), then the hardware table, then a stated default.
What cannot be had is None and a note says which option supplies it; nothing here raises for an unknown device
(a `--nic` or `--dtype` the table does not know is a usage error). FLOPs per step: the trace's `flops` args,
else 6 * P * b.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

import polars as pl

from traceview.core.errors import UsageError
from traceview.model.trace import Run
from traceview.prediction.hardware import (
    GpuSpec,
    HardwareLookupError,
    intra_node_link,
    link,
    match_device,
    normalise_dtype,
    peak_flops,
)
from traceview.prediction.trace_facts import Assumption, device_name, workload

if TYPE_CHECKING:
    from traceview.nccl.join import NcclJoin

DEFAULT_EFFICIENCY = 0.5
"""R = peak x efficiency. 0.5: the model FLOPs utilisation reported for well-tuned large-model training on
A100-class GPUs (about 46% for PaLM, 52% for Megatron-LM's trillion-parameter run); docs/metrics.md."""
DEFAULT_NIC = "ib_hdr"
"""The NIC of groups that span nodes when the user names none: one HDR InfiniBand port per GPU (DGX A100)."""
DEFAULT_RANKS_PER_NODE = 8
"""GPUs per node when neither the command line nor the traces say: an HGX/DGX board."""
DEFAULT_DTYPE = "fp32"
DEFAULT_ALPHA_S = {"intra": 1e-6, "inter": 5e-6}
"""alpha when a bandwidth is given on the command line without one and the table has none."""


@dataclass(frozen=True)
class Link:
    """The links one kind of group spans: B (one direction per GPU, bytes/s) and alpha (s), with sources."""

    scope: str  # intra | inter
    name: str
    bandwidth_Bps: float  # noqa: N815 - B of the alpha-beta model
    alpha_s: float
    source: str
    alpha_source: str
    detail: str = ""
    key: str = ""  # the hardware table's key, when the link is one of its rows


@dataclass(frozen=True)
class LinkOverride:
    """A link the NCCL log found (e.g. a socket fallback), provenance "nccl log": replaces the link of every
    call of process group `group` (its `pg_key`), or with `group` None the table's link of `scope`."""

    scope: Literal["intra", "inter"]
    name: str
    bandwidth_Bps: float  # noqa: N815 - B of the alpha-beta model
    alpha_s: float | None = None
    reason: str = ""
    group: str | None = None


@dataclass(frozen=True)
class PredictionOptions:
    """Every constant of the prediction the user may set; None: from the trace, NCCL log, table or default.

    Bandwidths are bytes/s one direction per GPU, alphas seconds, peak FLOP/s dense per device."""

    params: float | None = None
    local_batch: float | None = None
    peak_flops: float | None = None
    efficiency: float | None = None
    bandwidth_Bps: float | None = None  # noqa: N815 - intra-node B
    inter_bandwidth_Bps: float | None = None  # noqa: N815 - inter-node B
    alpha_s: float | None = None
    inter_alpha_s: float | None = None
    nic: str | None = None
    dtype: str | None = None
    link_overrides: tuple[LinkOverride, ...] = ()


@dataclass(frozen=True)
class ModelInputs:
    """The resolved inputs; None where unknown. `flops` has columns rank, step, flops (trace or 6 P b)."""

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

    @property
    def sustained_flops(self) -> float | None:
        """R = peak x efficiency (FLOP/s), None when the peak is unknown."""
        return None if self.peak_flops is None else self.peak_flops * self.efficiency


_SI = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}


def parse_quantity(text: str, what: str, zero_ok: bool = False) -> float:
    """A positive number (or zero, with `zero_ok`) with an optional decimal SI suffix: "300e9", "300G", "312T",
    "25 g" -> float."""
    found = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([kKmMgGtTpP]?)\s*", text)
    value = float(found.group(1)) if found else math.nan
    if found is None or not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        kind = "a non-negative" if zero_ok else "a positive"
        raise UsageError(f"{what}: {text!r} is not {kind} number (e.g. 300e9, 300G)")
    return value * _SI[found.group(2).lower()]


def parse_pair(text: str, what: str, scale: float = 1.0, zero_ok: bool = False) -> tuple[float, float | None]:
    """ "INTRA[,INTER]" as two quantities times `scale`; the second None when not given. `zero_ok`: 0 is a
    value (a latency; not a bandwidth)."""
    parts = text.split(",")
    if len(parts) > 2:
        raise UsageError(f"{what}: {text!r} takes at most two values, INTRA,INTER")
    values = [parse_quantity(part, what, zero_ok) * scale for part in parts]
    return values[0], (values[1] if len(values) == 2 else None)


def ranks_per_node(run: Run, given: int | None) -> tuple[int, str, str]:
    """GPUs per node: given (command line), else the most ranks sharing one trace hostname, else the default."""
    if given:
        return given, "command line", ""
    hosts = [trace.meta.hostname for trace in run]
    if hosts and all(hosts) and len(set(hosts)) > 1:
        return max(hosts.count(h) for h in set(hosts)), "trace", "ranks per hostname"
    return DEFAULT_RANKS_PER_NODE, "default", "an HGX/DGX board; give --gpus-per-node"


def _override(options: PredictionOptions, scope: str) -> LinkOverride | None:
    found = [o for o in options.link_overrides if o.scope == scope and o.group is None]
    return found[-1] if found else None


def _table_link(gpu: GpuSpec | None, scope: str, rpn: int, nic: str | None) -> tuple[Link | None, str]:
    """The hardware table's link of `scope` (source "hardware table"), or None and a note."""
    try:
        if scope == "inter":
            spec = link(nic or DEFAULT_NIC)
        elif gpu is None:
            return None, "unknown device: give --bandwidth for groups inside a node"
        else:
            spec = intra_node_link(gpu, rpn)
    except HardwareLookupError as error:
        if scope == "inter" and nic:
            raise  # the user's --nic names no link: an error, not a note
        return None, str(error)
    detail = spec.source + ("" if scope == "intra" or nic else f" (default NIC {DEFAULT_NIC}; give --nic)")
    source = "command line" if scope == "inter" and nic else "hardware table"
    return Link(
        scope, spec.name, spec.bandwidth_bytes_per_s, spec.alpha_s, source, source, detail, spec.key
    ), ""


def resolve_link(
    options: PredictionOptions, gpu: GpuSpec | None, scope: str, rpn: int
) -> tuple[Link | None, str]:
    """B and alpha of `scope` ("intra" or "inter"): command line, then NCCL log override, then the table."""
    given_b = options.bandwidth_Bps if scope == "intra" else options.inter_bandwidth_Bps
    given_alpha = options.alpha_s if scope == "intra" else options.inter_alpha_s
    table, note = _table_link(gpu, scope, rpn, options.nic)
    override = _override(options, scope)
    if given_b is not None:
        base = Link(scope, "given", given_b, DEFAULT_ALPHA_S[scope], "command line", "default", "--bandwidth")
    elif override is not None:
        alpha = (
            override.alpha_s
            if override.alpha_s is not None
            else (table.alpha_s if table else DEFAULT_ALPHA_S[scope])
        )
        base = Link(
            scope,
            override.name,
            override.bandwidth_Bps,
            alpha,
            "nccl log",
            "nccl log" if override.alpha_s is not None else (table.alpha_source if table else "default"),
            override.reason,
        )
    elif table is not None:
        base = table
    else:
        return None, note
    if given_alpha is not None:
        return replace(base, alpha_s=given_alpha, alpha_source="command line"), ""
    if given_b is not None and table is not None:
        return replace(base, alpha_s=table.alpha_s, alpha_source=table.alpha_source), ""
    return base, ""


def _peak(
    gpu: GpuSpec | None, dtype: str, options: PredictionOptions, device: str | None
) -> tuple[float | None, Assumption, str]:
    if options.peak_flops is not None:
        return (
            options.peak_flops,
            Assumption("peak FLOP/s", options.peak_flops, "FLOP/s", "command line", "--peak-flops"),
            "",
        )
    if gpu is None:
        note = (
            f"unknown device {device!r}: give --peak-flops and --bandwidth"
            if device
            else "no device in the traces: give --peak-flops and --bandwidth"
        )
        return None, Assumption("peak FLOP/s", None, "FLOP/s", "default", "unknown: give --peak-flops"), note
    try:
        value = peak_flops(gpu, dtype)
    except HardwareLookupError as error:
        return (
            None,
            Assumption("peak FLOP/s", None, "FLOP/s", "default", "unknown: give --peak-flops"),
            str(error),
        )
    return (
        value,
        Assumption(
            "peak FLOP/s", value, "FLOP/s", "hardware table", f"{gpu.name} {dtype} dense: {gpu.source}"
        ),
        "",
    )


def _dtype(options: PredictionOptions, grad_dtype: str | None) -> tuple[str, Assumption]:
    if options.dtype is not None:
        return normalise_dtype(options.dtype), Assumption(
            "compute dtype", normalise_dtype(options.dtype), "", "command line", "--dtype"
        )
    if grad_dtype is not None:
        value = normalise_dtype(grad_dtype)
        return value, Assumption("compute dtype", value, "", "trace", "dtype of the gradient all-reduce")
    return DEFAULT_DTYPE, Assumption("compute dtype", DEFAULT_DTYPE, "", "default", "give --dtype")


def _link_assumptions(found: Link | None, scope: str) -> list[Assumption]:
    label = "inside a node" if scope == "intra" else "across nodes"
    if found is None:
        return [Assumption(f"B {label}", None, "B/s", "default", "unknown: give --bandwidth")]
    return [
        Assumption(
            f"B {label}",
            found.bandwidth_Bps,
            "B/s",
            found.source,
            f"{found.name}: {found.detail}" if found.detail else found.name,
        ),
        Assumption(
            f"alpha {label}",
            found.alpha_s,
            "s",
            found.alpha_source,
            "per latency step; an assumption, give --alpha",
        ),
    ]


def _hardware_assumptions(
    device: str | None, gpu: GpuSpec | None, efficiency: float, options: PredictionOptions
) -> list[Assumption]:
    return [
        Assumption("device", device, "", "trace" if device else "default", gpu.name if gpu else "not in the hardware table"),
        Assumption("efficiency", efficiency, "", "command line" if options.efficiency is not None else "default", "R = peak x efficiency"),
    ]  # fmt: skip


def resolve_inputs(
    run: Run, calls: pl.DataFrame, options: PredictionOptions, ranks_per_host: int | None = None
) -> ModelInputs:
    """Every input of the prediction with its provenance (`step_calls` gives `calls`)."""
    device = device_name(run)
    gpu = match_device(device) if device else None
    work = workload(run, calls, options.params, options.local_batch)
    dtype, dtype_assumption = _dtype(options, work.grad_dtype)
    peak, peak_assumption, peak_note = _peak(gpu, dtype, options, device)
    efficiency = options.efficiency if options.efficiency is not None else DEFAULT_EFFICIENCY
    rpn, rpn_source, rpn_detail = ranks_per_node(run, ranks_per_host)
    intra, intra_note = resolve_link(options, gpu, "intra", rpn)
    inter, inter_note = resolve_link(options, gpu, "inter", rpn)
    groups = group_links(options, intra if intra else inter)
    sustained = None if peak is None else peak * efficiency
    device_a, efficiency_a = _hardware_assumptions(device, gpu, efficiency, options)
    assumptions = (
        device_a, dtype_assumption, peak_assumption, efficiency_a,
        Assumption("R (sustained FLOP/s)", sustained, "FLOP/s", peak_assumption.source, "peak x efficiency"),
        Assumption("GPUs per node", rpn, "", rpn_source, rpn_detail),
        *_link_assumptions(intra, "intra"), *_link_assumptions(inter, "inter"),
        *work.assumptions, *_group_assumptions(groups),
    )  # fmt: skip
    return ModelInputs(
        device=device, gpu=gpu, dtype=dtype, peak_flops=peak, efficiency=efficiency, ranks_per_node=rpn, intra=intra,
        inter=inter, params=work.params, local_batch=work.local_batch, grad_group=work.grad_group,
        grad_bytes_per_param=work.grad_bytes_per_param, workers=work.workers, flops=work.flops,
        flops_source=work.flops_source, assumptions=assumptions, group_links=groups,
        notes=tuple(n for n in (peak_note, intra_note, inter_note, work.note) if n),
    )  # fmt: skip


def group_links(options: PredictionOptions, fallback: Link | None) -> tuple[tuple[str, Link], ...]:
    """(group, link) of every per-group NCCL-log override (alpha: the override's, else the fallback's)."""
    alpha = fallback.alpha_s if fallback else DEFAULT_ALPHA_S["inter"]
    return tuple(
        (
            o.group,
            Link(
                o.scope,
                o.name,
                o.bandwidth_Bps,
                o.alpha_s if o.alpha_s is not None else alpha,
                "nccl log",
                "nccl log" if o.alpha_s is not None else "default",
                o.reason,
            ),
        )
        for o in options.link_overrides
        if o.group is not None
    )


def _group_assumptions(groups: tuple[tuple[str, Link], ...]) -> list[Assumption]:
    return [
        Assumption(
            f"B of process group {group}",
            found.bandwidth_Bps,
            "B/s",
            found.source,
            f"{found.name}: {found.detail}",
        )
        for group, found in groups
    ]


def with_nccl_overrides(options: PredictionOptions, nccl: NcclJoin | None) -> PredictionOptions:
    """`options` plus one per-group `LinkOverride` for every link override of the NCCL-log join (a socket
    fallback): the group's B becomes that link's, with provenance "nccl log"."""
    if nccl is None or not nccl.link_overrides:
        return options
    found = tuple(
        LinkOverride("inter", o.link.name, o.bandwidth_bytes_per_s, o.link.alpha_s, o.reason, o.group)
        for o in nccl.link_overrides
    )
    return replace(options, link_overrides=(*options.link_overrides, *found))
