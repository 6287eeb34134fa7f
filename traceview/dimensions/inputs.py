"""The inputs of the expected volumes, each with its source (docs/metrics.md, "Parallelism dimensions",
volumes): P, the whole model, from the command line or `run.json` (or a stated P per rank times the run's
shards; a P the trace suggests comes from the gradient all-reduce itself, so it checks nothing), the model's
shape (`--shape`, `run.json` `model.hidden`, ...), the activation per micro-batch (stated: h x b / m, b the
local batch in tokens; else the TP, then the PP calls' own size), the micro-batches (stated, else the
pipeline's M, else 1 without a pipeline: with one, unknown unless A is stated) and each named dimension's
group size and pipeline stage.
"""

from __future__ import annotations

import polars as pl

from traceview.dimensions.classify import UNKNOWN
from traceview.dimensions.volume import Input, VolumeInputs
from traceview.options.parallel import MODEL_SHARDING, ModelShape
from traceview.prediction.gamma import Prediction

STATED_SOURCES = ("command line", "manifest")


def _assumption(prediction: Prediction | None, prefix: str) -> tuple[float | None, str]:
    if prediction is None:
        return None, "default"
    found = next((a for a in prediction.inputs.assumptions if a.name.startswith(prefix)), None)
    if found is None or not isinstance(found.value, int | float):
        return None, "default"
    return float(found.value), found.source


def _params(prediction: Prediction | None, sizes: dict[str, float]) -> Input:
    """P, the whole model: stated, else a stated P per rank times the shards the run shows (tp x pp x fsdp
    group sizes of its named dimensions)."""
    value, source = _assumption(prediction, "P (")
    if value is not None and source in STATED_SOURCES:
        return Input("P", value, source)
    per_rank, rank_source = _assumption(prediction, "P per rank")
    shards = 1.0
    for dimension in MODEL_SHARDING:
        shards *= sizes.get(dimension, 1.0)
    if per_rank is not None and rank_source in STATED_SOURCES:
        how = f"{rank_source}: P per rank x {shards:.0f} (the run's tp x pp x fsdp group sizes)"
        return Input("P", per_rank * shards, how)
    give = "--params or run.json model.params"
    if value is not None:
        give += " (the P the trace suggests is a gradient all-reduce's own size: no independent check)"
    return Input("P", None, source, give)


def _shaped(shape: ModelShape, name: str, label: str, give: str) -> Input:
    value = getattr(shape, name)
    return Input(label, value, shape.source_of(name) or "default", give)


def _trace_activation(calls: pl.DataFrame) -> tuple[float | None, str]:
    """The activation elements per micro-batch the TP (else PP) calls carry: their median S / e."""
    for dimension, collectives in (
        ("tp", ("AllReduce", "AllGather", "ReduceScatter")),
        ("pp", ("Send", "SendRecv")),
    ):
        mine = calls.filter(
            (pl.col("dimension") == dimension) & pl.col("collective").is_in(list(collectives))
        )
        elements = (mine["size_bytes"] / mine["elem_size"]).drop_nulls()
        if elements.len():
            median = float(elements.median())  # type: ignore[arg-type]
            return median, f"trace ({dimension.upper()} calls' own size)"
    return None, "default"


def _activation(shape: ModelShape, prediction: Prediction | None, micro: float, calls: pl.DataFrame) -> Input:
    batch, batch_source = _assumption(prediction, "b (")
    give = "--shape hidden=H,seq=S with --local-batch (or a TP/PP group in the run)"
    if shape.hidden is not None and batch is not None:
        # b is the local batch in tokens for a transformer (the one unit of `--local-batch` and
        # model.local_batch for a model with a hidden size, as 6 P b counts it): s never multiplies it again
        sources = {shape.source_of("hidden") or "default", batch_source}
        return Input(
            "A (activation elements per micro-batch)",
            shape.hidden * batch / micro,
            "/".join(sorted(sources)),
        )
    value, source = _trace_activation(calls)
    return Input("A (activation elements per micro-batch)", value, source, give)


def _micro_batches(shape: ModelShape, measured: float | None, pipelined: bool) -> Input:
    if shape.micro_batches is not None:
        return Input("m (micro-batches)", shape.micro_batches, shape.source_of("micro_batches") or "")
    if pipelined and measured is not None:
        return Input("m (micro-batches)", measured, "trace (the pipeline's M)")
    if pipelined:  # a pipeline runs several micro-batches: 1 would be a guess
        return Input("m (micro-batches)", None, "default", "--shape micro_batches=M")
    return Input("m (micro-batches)", 1.0, "default", "--shape micro_batches=M")


def stages_of(calls: pl.DataFrame) -> pl.DataFrame:
    """Per rank with pipeline calls: its `stage` (its place in its own pipeline group's ranks, the commonest
    list on its calls) and `stages` (that group's size). Per rank, not per group: a group read from a stream
    (gloo) holds every pipeline of the job, each rank's calls name its own."""
    schema = {"rank": pl.Int64, "stage": pl.Float64, "stages": pl.Float64}
    mine = calls.filter((pl.col("dimension") == "pp") & pl.col("pg_ranks").is_not_null())
    if mine.height == 0:
        return pl.DataFrame(schema=schema)
    members = pl.col("_text").str.extract_all(r"-?\d+").cast(pl.List(pl.Int64))
    return (
        mine.group_by("rank")
        .agg(pl.col("pg_ranks").mode().min().alias("_text"))
        .with_columns(members.alias("_member"))
        .filter(pl.col("_member").list.len() >= 2)
        .with_columns(
            pl.int_ranges(0, pl.col("_member").list.len()).alias("_place"),
            pl.col("_member").list.len().cast(pl.Float64).alias("stages"),
        )
        .explode("_member", "_place")
        .filter(pl.col("_member") == pl.col("rank"))
        .select("rank", pl.col("_place").cast(pl.Float64).alias("stage"), "stages")
    )


def volume_inputs(
    groups: pl.DataFrame,
    calls: pl.DataFrame,
    prediction: Prediction | None,
    shape: ModelShape,
    pipeline: tuple[int, float | None],
) -> VolumeInputs:
    """Every input of `VOLUME_RULES` with its source (module docstring); `pipeline` = (V, measured M)."""
    named = groups.filter(pl.col("dimension") != UNKNOWN)
    sizes = {
        row["dimension"]: float(row["n"])
        for row in named.group_by("dimension").agg(pl.col("n").median()).iter_rows(named=True)
        if row["n"] is not None
    }
    virtual_stages, measured = pipeline
    micro = _micro_batches(shape, measured, "pp" in sizes)
    activation = _activation(shape, prediction, float(micro.value or 1.0), calls)
    if micro.value is None and not activation.source.startswith("trace"):  # m x A = the stated tokens x h
        micro = Input("m (micro-batches)", 1.0, "default (m cancels: A is the stated shape's)")
    return VolumeInputs(
        params=_params(prediction, sizes),
        activation=activation,
        layers=_shaped(shape, "layers", "L (layers)", "--shape layers=L or run.json model.layers"),
        micro_batches=micro,
        top_k=_shaped(
            shape, "top_k", "k (top-k experts per token)", "--shape top_k=K or run.json model.top_k"
        ),
        moe_layers=_shaped(shape, "moe_layers", "MoE layers", "--shape moe_layers=N (default: every layer)"),
        virtual_stages=virtual_stages,
        sizes=sizes,
        stages=stages_of(calls),
    )
