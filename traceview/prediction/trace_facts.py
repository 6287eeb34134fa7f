"""What the trace says about the prediction's inputs (docs/metrics.md, "Predicted gamma"): the group sizes of
the calls of each step (the calls themselves: `traceview.prediction.step_calls`), the data-parallel gradient
all-reduce (P, g, K), the FLOPs recorded per step, the local batch from input shapes, the device name. Pure
functions of frames and runs; `traceview.prediction.inputs` resolves them against the command line, the NCCL
log, the hardware table and the defaults.
"""

from __future__ import annotations

from collections import Counter

import polars as pl

from traceview.core.costmodel import FLOPS_PER_PARAM_PER_EXAMPLE
from traceview.core.records import record
from traceview.model.trace import Run
from traceview.prediction.batch_shapes import batch_from_shapes
from traceview.prediction.step_flops import convolutional, shape_flops, trace_flops

SOURCES = ("trace", "nccl log", "manifest", "hardware table", "command line", "default")
"""Where an input may come from (`Assumption.source`)."""

FLOATING_DTYPES = ("float32", "float16", "bfloat16", "float64")


@record
class Assumption:
    """One input of the prediction: its value, unit and where it came from (one of `SOURCES`)."""

    name: str
    value: float | str | None
    unit: str
    source: str
    detail: str = ""


@record
class Workload:
    """What the step computes and all-reduces: P, b, the gradient group (g, K, dtype), FLOPs per (rank, step)
    and the assumptions (P, b, g, K, FLOPs) with their provenance; `note` says what is missing."""

    params: float | None
    local_batch: float | None
    grad_group: str | None
    grad_bytes_per_param: int | None
    grad_dtype: str | None
    workers: int | None
    flops: pl.DataFrame
    flops_source: str | None
    assumptions: tuple[Assumption, ...]
    note: str


POINT_TO_POINT = ("SendRecv", "Send", "Recv")
"""Collectives of two ranks whatever the group: their n is 2."""


def with_group_sizes(calls: pl.DataFrame, world_size: int | None) -> tuple[pl.DataFrame, Assumption | None]:
    """`calls` with n where the traces give none: 2 for point to point, the world size for a call of no named
    process group (old traces name none: the default group, the world, is assumed), and that assumption."""
    unnamed = (
        pl.col("group_size").is_null()
        & (pl.col("pg_key") == "unknown")
        & ~pl.col("collective").is_in(POINT_TO_POINT)
    )
    if "group_size_assumed" in calls.columns:  # `comm_kernels` assumed the default group already
        unnamed = unnamed | pl.col("group_size_assumed").fill_null(False)
    assumed = int(calls.select(unnamed.sum()).item()) if calls.height and world_size else 0
    filled = calls.with_columns(
        pl.coalesce(
            pl.col("group_size"),
            pl.when(pl.col("collective").is_in(POINT_TO_POINT)).then(pl.lit(2, pl.Int64)),
            pl.when(unnamed).then(pl.lit(world_size, pl.Int64)),
        ).alias("group_size")
    )
    if not assumed:
        return filled, None
    detail = (
        f"the world size: the traces name no process group for {assumed} call(s), so the default group is "
        "assumed"
    )
    return filled, Assumption("n of calls without a group", world_size, "", "default", detail)


def gradient_allreduce(calls: pl.DataFrame) -> dict[str, float | str | None]:
    """The data-parallel gradient all-reduce: the group whose floating-point AllReduce bytes are largest;
    `params` = median over (rank, step) of its elements per step, `elem_size`, `dtype`, `workers` = n."""
    grads = calls.filter(
        (pl.col("collective") == "AllReduce")
        & pl.col("dtype").is_in(FLOATING_DTYPES)
        & pl.col("size_bytes").is_not_null()
    )
    if grads.height == 0:
        return {
            "group": None,
            "params": None,
            "elem_size": None,
            "dtype": None,
            "workers": None,
            "bytes": None,
        }
    group = (
        grads.group_by("pg_key")
        .agg(pl.col("size_bytes").sum())
        .sort("size_bytes", "pg_key", descending=True)
        .item(0, "pg_key")
    )
    mine = grads.filter(pl.col("pg_key") == group)
    per_step = mine.group_by("rank", "step").agg(
        pl.col("size_bytes").sum(), (pl.col("size_bytes") / pl.col("elem_size")).sum().alias("elems")
    )
    return {
        "group": group,
        "params": float(per_step["elems"].median()),  # type: ignore[arg-type]
        "bytes": float(per_step["size_bytes"].median()),  # type: ignore[arg-type]
        "elem_size": int(mine["elem_size"].mode().sort()[0]),
        "dtype": str(mine["dtype"].mode().sort()[0]),
        "workers": None
        if mine["group_size"].drop_nulls().len() == 0
        else int(mine["group_size"].drop_nulls().mode().sort()[0]),
    }


def device_name(run: Run) -> str | None:
    """The commonest device name of the run's ranks."""
    counts = Counter(name for trace in run for name in trace.meta.devices)
    return min(counts, key=lambda name: (-counts[name], name)) if counts else None


STATED = ("command line", "manifest")
"""Sources of an input the user stated (`ModelOptions.sources`): they win over what the trace suggests."""


@record
class Stated:
    """What the user stated of the workload, each with its source (`command line` or `manifest`)."""

    params: float | None = None
    local_batch: float | None = None
    flops_per_sample: float | None = None
    params_source: str = "command line"
    batch_source: str = "command line"
    flops_source: str = "command line"
    batch_unit: str | None = None  # examples or tokens, as run.json says; else examples
    params_per_rank: float | None = None  # one rank's share of P, as run.json says
    model_shards: int | None = None  # the stated layout's tp x pp x fsdp: P / shards per rank
    params_per_rank_source: str = "manifest"


DISAGREE = 0.01
"""P / shards and a stated P per rank further apart than this share disagree (said in a note)."""


def rank_params(params: Assumption, stated: Stated) -> tuple[Assumption, str]:
    """The parameters one rank holds, what 6 P b counts (P is the whole model): a stated P per rank, else a
    stated P over the stated layout's shards, else P as given (a P the trace suggests is a rank's own
    gradient all-reduce already); with a note when a stated P over its shards and a stated P per rank
    disagree."""
    p = _number(params.value)
    split = p / stated.model_shards if p is not None and stated.model_shards else None
    per_rank = stated.params_per_rank
    apart = per_rank is not None and split is not None and abs(split - per_rank) > DISAGREE * per_rank
    note = (
        f"P / shards = {p:.6g} / {stated.model_shards} = {split:.6g} disagrees with the stated P per rank "
        f"{per_rank:.6g}: 6 P b uses the P per rank; check model.params (the whole model) and the layout"
        if apart and p is not None and split is not None and per_rank is not None
        else ""
    )
    if stated.params_per_rank is not None:
        return Assumption(
            "P per rank", stated.params_per_rank, "", stated.params_per_rank_source, "model.params_per_rank"
        ), note
    if split is not None and params.source in STATED:
        how = f"P / {stated.model_shards} (the stated layout's tp x pp x fsdp)"
        return Assumption("P per rank", split, "", params.source, how), note
    return Assumption(
        "P per rank", p, "", params.source, "P (no shards stated: every rank holds all of P)"
    ), note


def _given_or_trace(
    name: str, given: tuple[float | None, str], found: float | None, unit: str, option: str, how: str
) -> Assumption:
    value, source = given
    if value is not None:
        return Assumption(name, value, unit, source, option if source == "command line" else "run.json")
    if found is not None:
        return Assumption(name, found, unit, "trace", how)
    return Assumption(name, None, unit, "default", f"unknown: give {option}")


def _steps_with(calls: pl.DataFrame, flops: float) -> pl.DataFrame:
    return (
        calls.select(pl.col("rank").cast(pl.Int64), pl.col("step").cast(pl.Int64))
        .unique()
        .with_columns(pl.lit(flops, dtype=pl.Float64).alias("flops"))
    )


def _flops(
    run: Run, calls: pl.DataFrame, params: Assumption, batch: Assumption, stated: Stated
) -> tuple[pl.DataFrame, str | None, str]:
    """FLOPs per (rank, step), how they were had and the source: stated FLOPs per sample x b; else 6 P b when
    P or b is stated (the user's figures win over the trace's), unless the trace's shapes show a convolutional
    net; else the profiler's flops args; else the FLOPs of the operators' shapes; else 6 P b of what the
    trace suggests."""
    p, b = _number(params.value), _number(batch.value)
    if stated.flops_per_sample is not None and b is not None:
        return _steps_with(calls, stated.flops_per_sample * b), "FLOPs per sample x b", stated.flops_source
    said = [a.source for a in (params, batch) if a.source in STATED]
    counted = shape_flops(run)
    if p is not None and b is not None and said and not convolutional(counted, run):
        source = "command line" if "command line" in said else "manifest"
        return _steps_with(calls, FLOPS_PER_PARAM_PER_EXAMPLE * p * b), "6 P b", source
    recorded = trace_flops(run)
    if recorded.height:
        return recorded, "trace", "trace"
    if counted.height:
        return counted, "shapes", "trace"
    if p is not None and b is not None:
        return _steps_with(calls, FLOPS_PER_PARAM_PER_EXAMPLE * p * b), "6 P b", "trace"
    return recorded, None, "default"


FLOPS_DETAILS = {
    "trace": "sum of the operators' flops args in each ProfilerStep",
    "shapes": (
        "counted from the operators' recorded shapes (matrix products, convolutions, attention) in each "
        "ProfilerStep"
    ),
    "6 P b": "6 x P per rank x b (2 forward + 4 backward per parameter per example)",
    "FLOPs per sample x b": "the stated model FLOPs per sample x b",
}


def _flops_note(how: str | None, source: str, params: Assumption) -> str:
    if how == "6 P b" and source == "trace":
        return (
            "FLOPs are 6 P b of a P and b the trace suggests (the gradient all-reduce, an input shape): "
            "right for dense transformers (b in tokens); a convolutional net reuses its weights at every "
            "position (6 P b undercounts), a recommender's embedding tables are not dense FLOPs (6 P b "
            "overcounts); state model.flops_per_sample or local_batch in run.json"
        )
    if how is None:
        return (
            "no FLOPs in the trace and no local batch: predicted T_comp and gamma need --local-batch (and "
            "--params when the gradient all-reduce is not in the trace)"
        )
    if how in ("trace", "shapes") and params.source in STATED:
        counted = "flops args" if how == "trace" else "operator shapes"
        return (
            f"P ({params.source}) is not used for the FLOPs: the trace's own {counted} count them; P enters "
            "the what-ifs"
        )
    return ""


def _gradient_assumptions(grads: dict[str, float | str | None]) -> tuple[Assumption, Assumption]:
    group = grads["group"]
    none = "no gradient all-reduce"
    return (
        Assumption(
            "g (gradient bytes per parameter)",
            grads["elem_size"],
            "B",
            "trace" if group else "default",
            str(grads["dtype"] or none),
        ),
        Assumption(
            "K (data-parallel workers)",
            grads["workers"],
            "",
            "trace" if grads["workers"] else "default",
            f"size of group {group}" if group else none,
        ),
    )


def _per_sample(stated: Stated) -> tuple[Assumption, ...]:
    """The model FLOPs per sample when stated (the command line or a manifest), else nothing."""
    if stated.flops_per_sample is None:
        return ()
    how = "forward + backward, per example" + ("" if stated.flops_source == "command line" else ": run.json")
    return (
        Assumption("F (model FLOPs per sample)", stated.flops_per_sample, "FLOP", stated.flops_source, how),
    )


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def workload(run: Run, calls: pl.DataFrame, stated: Stated) -> Workload:
    """P (stated, else the gradient all-reduce), b (stated, else input shapes) and FLOPs per step (`_flops`),
    each with its provenance."""
    grads = gradient_allreduce(calls)
    shape_batch, shape_op = batch_from_shapes(run) if stated.local_batch is None else (None, "")
    how = (
        f"gradient AllReduce of group {grads['group']}: {grads['bytes']:.0f} B per step / "
        f"{grads['elem_size']} B"
        if grads["group"] is not None
        else "no gradient AllReduce of known size in the trace"
    )
    params_a = _given_or_trace(
        "P (parameters)", (stated.params, stated.params_source), _number(grads["params"]), "", "--params", how
    )
    batch_a = _given_or_trace(
        "b (local batch)",
        (stated.local_batch, stated.batch_source),
        shape_batch,
        (stated.batch_unit or "examples") if stated.local_batch is not None else "examples",
        "--local-batch",
        f"input shape of {shape_op}",
    )
    rank_a, disagreement = rank_params(params_a, stated)
    flops, source, provenance = _flops(run, calls, rank_a, batch_a, stated)
    flops_a = Assumption(
        "FLOPs per step",
        source,
        "",
        provenance,
        FLOPS_DETAILS.get(source or "", "unknown: give --local-batch (and --params)"),
    )
    return Workload(
        params=_number(params_a.value),
        local_batch=_number(batch_a.value),
        grad_group=str(grads["group"]) if grads["group"] else None,
        grad_bytes_per_param=int(grads["elem_size"]) if grads["elem_size"] else None,
        grad_dtype=str(grads["dtype"]) if grads["dtype"] else None,
        workers=int(grads["workers"]) if grads["workers"] else None,
        flops=flops,
        flops_source=source,
        assumptions=(
            params_a,
            rank_a,
            batch_a,
            *_gradient_assumptions(grads),
            *_per_sample(stated),
            flops_a,
        ),
        note="; ".join(n for n in (_flops_note(source, provenance, params_a), disagreement) if n),
    )
