"""The inputs of the alpha-beta prediction, each with where it came from (SPEC section 5; docs/metrics.md,
"Predicted gamma").

Order of precedence for every constant: the command line (or the API's `PredictionOptions`), then the NCCL log
(`LinkOverride`), then the trace, then the hardware table, then a stated default. What cannot be had is None
and a note says which option supplies it; nothing here raises for an unknown device.

- The communication calls of a step: on-device communication kernels collapsed into their collective call
  (`step_calls`), each in the step window that contains its start.
- P: the data-parallel gradient all-reduce elements per step (the AllReduce bytes of the process group that
  all-reduces the most floating-point bytes, over the element size), median over (rank, step).
- b: the leading input shape of the first operator of a step named in `BATCH_SHAPE_RULES`.
- FLOPs per step: the trace's `flops` args summed inside each CPU `ProfilerStep#N`, else 6 * P * b.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

import polars as pl

from traceview.costmodel import FLOPS_PER_PARAM_PER_EXAMPLE
from traceview.errors import UsageError
from traceview.hardware import (
    GpuSpec,
    HardwareLookupError,
    intra_node_link,
    link,
    match_device,
    normalise_dtype,
    peak_flops,
)
from traceview.model import Run
from traceview.steps import WHOLE_TRACE

if TYPE_CHECKING:
    from traceview.nccl_join import NcclJoin

SOURCES = ("trace", "nccl log", "hardware table", "command line", "default")
"""Where an input may come from (`Assumption.source`)."""

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

FLOATING_DTYPES = ("float32", "float16", "bfloat16", "float64")

BATCH_SHAPE_RULES: tuple[tuple[str, int, str], ...] = (
    # (operator name regex, input argument, how the batch is read from its shape)
    (r"^aten::embedding$", 1, "all"),  # token ids [b, s]: b * s tokens
    (r"^aten::conv[123]d$", 0, "first"),  # [b, C, H, W]: b examples
    (r"^aten::linear$", 0, "all_but_last"),  # [b, s, h]: b * s tokens (6 P b counts tokens)
)
"""The first operator of a step matching a rule gives b from its input shape."""


@dataclass(frozen=True)
class Assumption:
    """One input of the prediction: its value, unit and where it came from (one of `SOURCES`)."""

    name: str
    value: float | str | None
    unit: str
    source: str
    detail: str = ""


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


def parse_quantity(text: str, what: str) -> float:
    """A positive number with an optional decimal SI suffix: "300e9", "300G", "312T", "25 g" -> float."""
    found = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([kKmMgGtTpP]?)\s*", text)
    if found is None or float(found.group(1)) <= 0:
        raise UsageError(f"{what}: {text!r} is not a positive number (e.g. 300e9, 300G)")
    return float(found.group(1)) * _SI[found.group(2).lower()]


def parse_pair(text: str, what: str, scale: float = 1.0) -> tuple[float, float | None]:
    """ "INTRA[,INTER]" as two quantities times `scale`; the second None when not given."""
    parts = text.split(",")
    if len(parts) > 2:
        raise UsageError(f"{what}: {text!r} takes at most two values, INTRA,INTER")
    values = [parse_quantity(part, what) * scale for part in parts]
    return values[0], (values[1] if len(values) == 2 else None)


def step_calls(kernels: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """The on-device collective calls of every step: kernels of one call collapsed (durations summed, fields
    of its first kernel), each in the (rank, step) window that contains its start; calls outside every
    window are left out. Columns rank, step, start_us, dur_us, kernels, collective, dtype, elem_size,
    size_bytes, group_size, pg_key, pg_ranks."""
    fields = ("collective", "dtype", "elem_size", "size_bytes", "group_size", "pg_key", "pg_ranks")
    linked = pl.col("call_start_us").is_not_null()
    call = pl.when(linked).then(pl.format("{}@{}", "call_name", "call_start_us")).otherwise(pl.format("k{}", "row"))
    calls = (
        kernels.filter(pl.col("on_device"))
        .with_row_index("row")
        .with_columns(call.alias("call"))
        .group_by("rank", "call")
        .agg(
            pl.col("start_us").min(),
            pl.col("dur_us").sum(),
            pl.len().cast(pl.Int64).alias("kernels"),
            *[pl.col(name).sort_by("start_us").first() for name in fields],
        )
    )
    starts = windows.select(
        pl.col("rank").cast(pl.Int64), pl.col("step").cast(pl.Int64), "window_start_us", "window_end_us"
    ).sort("window_start_us")
    placed = calls.sort("start_us").join_asof(
        starts, left_on="start_us", right_on="window_start_us", by="rank", check_sortedness=False
    )
    return (
        placed.filter(pl.col("step").is_not_null() & (pl.col("start_us") < pl.col("window_end_us")))
        .drop("call", "window_start_us", "window_end_us")
        .sort("rank", "step", "start_us")
    )


def gradient_allreduce(calls: pl.DataFrame) -> dict[str, float | str | None]:
    """The data-parallel gradient all-reduce: the group whose floating-point AllReduce bytes are largest;
    `params` = median over (rank, step) of its elements per step, `elem_size`, `dtype`, `workers` = n."""
    grads = calls.filter(
        (pl.col("collective") == "AllReduce") & pl.col("dtype").is_in(FLOATING_DTYPES) & pl.col("size_bytes").is_not_null()
    )
    if grads.height == 0:
        return {"group": None, "params": None, "elem_size": None, "dtype": None, "workers": None, "bytes": None}
    group = grads.group_by("pg_key").agg(pl.col("size_bytes").sum()).sort("size_bytes", "pg_key", descending=True).item(0, "pg_key")
    mine = grads.filter(pl.col("pg_key") == group)
    per_step = mine.group_by("rank", "step").agg(pl.col("size_bytes").sum(), (pl.col("size_bytes") / pl.col("elem_size")).sum().alias("elems"))
    return {
        "group": group,
        "params": float(per_step["elems"].median()),  # type: ignore[arg-type]
        "bytes": float(per_step["size_bytes"].median()),  # type: ignore[arg-type]
        "elem_size": int(mine["elem_size"].mode().sort()[0]),
        "dtype": str(mine["dtype"].mode().sort()[0]),
        "workers": None if mine["group_size"].drop_nulls().len() == 0 else int(mine["group_size"].drop_nulls().mode().sort()[0]),
    }


def _cpu_steps(cpu: pl.DataFrame) -> pl.DataFrame:
    """CPU `ProfilerStep#N` windows of one rank: step, start_us, end_us."""
    marks = cpu.filter(pl.col("name").str.contains(r"^ProfilerStep#\d+$"))
    return marks.select(
        pl.col("name").str.extract(r"#(\d+)$").cast(pl.Int64).alias("step"), "start_us", pl.col("end_us").alias("step_end_us")
    ).unique("step").sort("start_us")


def _in_cpu_steps(ops: pl.DataFrame, cpu: pl.DataFrame) -> pl.DataFrame:
    """`ops` with the `step` of the CPU ProfilerStep containing their start (WHOLE_TRACE without steps)."""
    steps = _cpu_steps(cpu)
    if steps.height == 0:
        return ops.with_columns(pl.lit(WHOLE_TRACE, dtype=pl.Int64).alias("step"))
    placed = ops.sort("start_us").join_asof(steps, on="start_us", check_sortedness=False)
    return placed.filter(pl.col("step").is_not_null() & (pl.col("start_us") < pl.col("step_end_us"))).drop("step_end_us")


def trace_flops(run: Run) -> pl.DataFrame:
    """FLOPs per (rank, step) from the operators' `flops` args (columns rank, step, flops); no rows when the
    trace recorded none."""
    frames = []
    for trace in run:  # one frame per rank, no row loop
        ops = trace.cpu.filter(pl.col("flops").is_not_null() & (pl.col("flops") > 0)).select("start_us", "flops")
        if ops.height:
            steps = _in_cpu_steps(ops, trace.cpu).group_by("step").agg(pl.col("flops").cast(pl.Float64).sum())
            frames.append(steps.with_columns(pl.lit(trace.rank, dtype=pl.Int64).alias("rank")))
    schema = {"rank": pl.Int64, "step": pl.Int64, "flops": pl.Float64}
    return pl.concat(frames).select(list(schema)).cast(schema) if frames else pl.DataFrame(schema=schema)  # type: ignore[arg-type]


_BATCH_READERS: dict[str, Callable[[pl.Expr], pl.Expr]] = {
    "first": lambda shape: shape.list.first(),
    "all": lambda shape: shape.list.eval(pl.element().product()).list.first(),
    "all_but_last": lambda shape: shape.list.head(shape.list.len() - 1).list.eval(pl.element().product()).list.first(),
}


def batch_from_shapes(run: Run) -> tuple[float | None, str]:
    """b from the input shape of each step's first operator matched by `BATCH_SHAPE_RULES` (median over
    (rank, step)), and the operator used; (None, "") when the traces recorded no such shape."""
    found: list[pl.DataFrame] = []
    for trace in run:
        for pattern, argument, reading in BATCH_SHAPE_RULES:
            ops = trace.cpu.filter(pl.col("name").str.contains(pattern) & pl.col("input_dims").is_not_null())
            if ops.height == 0:
                continue
            try:
                dims = ops.with_columns(pl.col("input_dims").str.json_decode(pl.List(pl.List(pl.Int64))).list.get(argument, null_on_oob=True).alias("shape"))
            except pl.exceptions.PolarsError:
                continue
            batch = dims.filter(pl.col("shape").list.len() > 0).with_columns(_BATCH_READERS[reading](pl.col("shape")).alias("batch"))
            found.append(_in_cpu_steps(batch.select("start_us", "batch", pl.lit(pattern).alias("rule")), trace.cpu).with_columns(pl.lit(trace.rank).alias("rank")))
    if not found:
        return None, ""
    firsts = pl.concat(found).sort("start_us").group_by("rank", "step").agg(pl.all().first())
    rule = str(firsts["rule"].mode().sort()[0])
    return float(firsts["batch"].median()), rule.strip("^$").replace("[123]", "N")  # type: ignore[arg-type]


def device_name(run: Run) -> str | None:
    """The commonest device name of the run's ranks."""
    names = [name for trace in run for name in trace.meta.devices]
    return max(sorted(set(names)), key=names.count) if names else None


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
    return Link(scope, spec.name, spec.bandwidth_bytes_per_s, spec.alpha_s, source, source, detail, spec.key), ""


def resolve_link(options: PredictionOptions, gpu: GpuSpec | None, scope: str, rpn: int) -> tuple[Link | None, str]:
    """B and alpha of `scope` ("intra" or "inter"): command line, then NCCL log override, then the table."""
    given_b = options.bandwidth_Bps if scope == "intra" else options.inter_bandwidth_Bps
    given_alpha = options.alpha_s if scope == "intra" else options.inter_alpha_s
    table, note = _table_link(gpu, scope, rpn, options.nic)
    override = _override(options, scope)
    if given_b is not None:
        base = Link(scope, "given", given_b, DEFAULT_ALPHA_S[scope], "command line", "default", "--bandwidth")
    elif override is not None:
        alpha = override.alpha_s if override.alpha_s is not None else (table.alpha_s if table else DEFAULT_ALPHA_S[scope])
        base = Link(scope, override.name, override.bandwidth_Bps, alpha, "nccl log", "nccl log" if override.alpha_s is not None else (table.alpha_source if table else "default"), override.reason)
    elif table is not None:
        base = table
    else:
        return None, note
    if given_alpha is not None:
        return replace(base, alpha_s=given_alpha, alpha_source="command line"), ""
    if given_b is not None and table is not None:
        return replace(base, alpha_s=table.alpha_s, alpha_source=table.alpha_source), ""
    return base, ""


def _peak(gpu: GpuSpec | None, dtype: str, options: PredictionOptions, device: str | None) -> tuple[float | None, Assumption, str]:
    if options.peak_flops is not None:
        return options.peak_flops, Assumption("peak FLOP/s", options.peak_flops, "FLOP/s", "command line", "--peak-flops"), ""
    if gpu is None:
        note = f"unknown device {device!r}: give --peak-flops and --bandwidth" if device else "no device in the traces: give --peak-flops and --bandwidth"
        return None, Assumption("peak FLOP/s", None, "FLOP/s", "default", "unknown: give --peak-flops"), note
    try:
        value = peak_flops(gpu, dtype)
    except HardwareLookupError as error:
        return None, Assumption("peak FLOP/s", None, "FLOP/s", "default", "unknown: give --peak-flops"), str(error)
    return value, Assumption("peak FLOP/s", value, "FLOP/s", "hardware table", f"{gpu.name} {dtype} dense: {gpu.source}"), ""


def _dtype(options: PredictionOptions, grads: dict[str, float | str | None]) -> tuple[str, Assumption]:
    if options.dtype is not None:
        return normalise_dtype(options.dtype), Assumption("compute dtype", normalise_dtype(options.dtype), "", "command line", "--dtype")
    if grads["dtype"] is not None:
        value = normalise_dtype(str(grads["dtype"]))
        return value, Assumption("compute dtype", value, "", "trace", "dtype of the gradient all-reduce")
    return DEFAULT_DTYPE, Assumption("compute dtype", DEFAULT_DTYPE, "", "default", "give --dtype")


def _given_or_trace(name: str, given: float | None, found: float | None, unit: str, option: str, how: str) -> Assumption:
    if given is not None:
        return Assumption(name, given, unit, "command line", option)
    if found is not None:
        return Assumption(name, found, unit, "trace", how)
    return Assumption(name, None, unit, "default", f"unknown: give {option}")


def _link_assumptions(found: Link | None, scope: str) -> list[Assumption]:
    label = "inside a node" if scope == "intra" else "across nodes"
    if found is None:
        return [Assumption(f"B {label}", None, "B/s", "default", "unknown: give --bandwidth")]
    return [
        Assumption(f"B {label}", found.bandwidth_Bps, "B/s", found.source, f"{found.name}: {found.detail}" if found.detail else found.name),
        Assumption(f"alpha {label}", found.alpha_s, "s", found.alpha_source, "per latency step; an assumption, give --alpha"),
    ]


def _flops(run: Run, calls: pl.DataFrame, params: float | None, batch: float | None) -> tuple[pl.DataFrame, str | None]:
    recorded = trace_flops(run)
    if recorded.height:
        return recorded, "trace"
    if params is None or batch is None:
        return recorded, None
    steps = calls.select("rank", "step").unique()
    return steps.with_columns(pl.lit(FLOPS_PER_PARAM_PER_EXAMPLE * params * batch).alias("flops")), "6 P b"


def resolve_inputs(run: Run, calls: pl.DataFrame, options: PredictionOptions, ranks_per_host: int | None = None) -> ModelInputs:
    """Every input of the prediction with its provenance (`step_calls` gives `calls`)."""
    device = device_name(run)
    gpu = match_device(device) if device else None
    grads = gradient_allreduce(calls)
    dtype, dtype_assumption = _dtype(options, grads)
    peak, peak_assumption, peak_note = _peak(gpu, dtype, options, device)
    efficiency = options.efficiency if options.efficiency is not None else DEFAULT_EFFICIENCY
    rpn, rpn_source, rpn_detail = ranks_per_node(run, ranks_per_host)
    intra, intra_note = resolve_link(options, gpu, "intra", rpn)
    inter, inter_note = resolve_link(options, gpu, "inter", rpn)
    shape_batch, shape_op = batch_from_shapes(run) if options.local_batch is None else (None, "")
    grad_how = f"gradient AllReduce of group {grads['group']}: {grads['bytes']:.0f} B per step / {grads['elem_size']} B" if grads["group"] else ""
    params_a = _given_or_trace("P (parameters)", options.params, grads["params"], "", "--params", grad_how)  # type: ignore[arg-type]
    batch_a = _given_or_trace("b (local batch)", options.local_batch, shape_batch, "examples", "--local-batch", f"input shape of {shape_op}")
    flops, flops_source = _flops(run, calls, params_a.value, batch_a.value)  # type: ignore[arg-type]
    groups = group_links(options, intra if intra else inter)
    assumptions = [
        Assumption("device", device, "", "trace" if device else "default", gpu.name if gpu else "not in the hardware table"),
        dtype_assumption,
        peak_assumption,
        Assumption("efficiency", efficiency, "", "command line" if options.efficiency is not None else "default", "R = peak x efficiency"),
        Assumption("R (sustained FLOP/s)", None if peak is None else peak * efficiency, "FLOP/s", peak_assumption.source, "peak x efficiency"),
        Assumption("GPUs per node", rpn, "", rpn_source, rpn_detail),
        *_link_assumptions(intra, "intra"),
        *_link_assumptions(inter, "inter"),
        params_a,
        batch_a,
        Assumption("g (gradient bytes per parameter)", grads["elem_size"], "B", "trace" if grads["elem_size"] else "default", str(grads["dtype"] or "no gradient all-reduce")),
        Assumption("K (data-parallel workers)", grads["workers"], "", "trace" if grads["workers"] else "default", f"size of group {grads['group']}" if grads["group"] else "no gradient all-reduce"),
        Assumption("FLOPs per step", flops_source, "", _flops_provenance(flops_source, params_a, batch_a), _flops_detail(flops_source)),
    ]
    notes = tuple(n for n in (peak_note, intra_note, inter_note, _flops_note(flops_source)) if n)
    return ModelInputs(
        device=device, gpu=gpu, dtype=dtype, peak_flops=peak, efficiency=efficiency, ranks_per_node=rpn, intra=intra,
        inter=inter, params=params_a.value, local_batch=batch_a.value, grad_group=grads["group"],  # type: ignore[arg-type]
        grad_bytes_per_param=grads["elem_size"], workers=grads["workers"], flops=flops, flops_source=flops_source,  # type: ignore[arg-type]
        assumptions=(*assumptions, *_group_assumptions(groups)), notes=notes, group_links=groups,
    )  # fmt: skip


def _flops_detail(source: str | None) -> str:
    return {
        "trace": "sum of the operators' flops args in each ProfilerStep",
        "6 P b": "6 x P x b (2 forward + 4 backward per parameter per example)",
    }.get(source or "", "unknown: give --local-batch (and --params)")


def _flops_note(source: str | None) -> str:
    if source == "6 P b":
        return "FLOPs are 6 P b: right for dense transformers (b in tokens); a convolutional net reuses its weights at every position, so 6 P b undercounts its FLOPs and the compute-efficiency factor comes out low"
    if source is None:
        return "no FLOPs in the trace and no local batch: predicted T_comp and gamma need --local-batch (and --params when the gradient all-reduce is not in the trace)"
    return ""


def group_links(options: PredictionOptions, fallback: Link | None) -> tuple[tuple[str, Link], ...]:
    """(group, link) of every per-group NCCL-log override (alpha: the override's, else the fallback's)."""
    alpha = fallback.alpha_s if fallback else DEFAULT_ALPHA_S["inter"]
    return tuple(
        (o.group, Link(o.scope, o.name, o.bandwidth_Bps, o.alpha_s if o.alpha_s is not None else alpha, "nccl log", "nccl log" if o.alpha_s is not None else "default", o.reason))
        for o in options.link_overrides
        if o.group is not None
    )


def _group_assumptions(groups: tuple[tuple[str, Link], ...]) -> list[Assumption]:
    return [Assumption(f"B of process group {group}", found.bandwidth_Bps, "B/s", found.source, f"{found.name}: {found.detail}") for group, found in groups]


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


def _flops_provenance(source: str | None, params: Assumption, batch: Assumption) -> str:
    """The trace for recorded FLOPs; for 6 P b the command line when it gave P or b, else the trace."""
    if source != "6 P b":
        return "trace" if source else "default"
    return "command line" if "command line" in (params.source, batch.source) else "trace"
