"""The communication roofline (docs/metrics.md, "Communication roofline"; the seeds' chapter 6).

CCR = the step's FLOPs (per rank, the prediction's FLOPs per step, median) over the bytes a dimension moves
per step (its bus bytes per rank, median over (rank, step): `traceview.dimensions`), and over all of them.
Each link level (inside a node, across nodes) has a ridge point CCR* = peak FLOP/s / B of that level. A
dimension sits on the level its calls ran on; its scaling efficiency (seeds 6.5) is min(1, CCR / CCR*): below
the ridge the link caps the throughput at CCR x B, above it the GPU's peak does; `gamma_at_peak` = CCR* / CCR
is the T_comm / T_comp the point implies at peak FLOP/s. The run's: min(1, (FLOPs / peak) / max over levels of
(bytes on that level / its B)), the levels working at once; it is also the `all` point's efficiency. `REGIMES`
name where a point sits (the seeds' 6.6 bands). That efficiency is the roofline's bound (peak FLOP/s,
communication hidden under compute, no peer late); the run's measured one is 1 - exposed communication / step
(median step, waiting for late peers included: the share of the step the run would keep without
communication), and the sentence gives both.

The roofline inherits the prediction's facts: a dimension whose calls ran on the host (gloo, MPI) sits on the
`host` level, the prediction's host link (`traceview.prediction.links.resolve_host_link`); when that link is
unknown the level has no B and no ridge, its points no efficiency, and the sentence says why. FLOPs per step
that the prediction doubts (achieved / peak outside the range a real step reaches) are doubted here too:
`flops_doubt` says so and the sentence leads with it.

The critical batch of a point (seeds 6.6, the batch at which the run reaches the ridge): b* = b x CCR* /
CCR, b the local batch (the prediction's, its unit the model's: tokens for a transformer). CCR grows with b
(the FLOPs per step do, the bytes of DP and FSDP do not), so below b* the point is communication-bound; null
without b or a ridge. (For TP, PP, EP and CP the bytes grow with b too: b* holds only where the bytes do not.)
"""

from __future__ import annotations

import polars as pl

from traceview.core.records import record
from traceview.dimensions.analysis import Dimensions
from traceview.prediction.gamma import Prediction
from traceview.prediction.trust import ACHIEVED_RANGE

REGIMES: tuple[tuple[float, str], ...] = (
    (0.2, "severely communication-bound"),
    (0.8, "communication-bound"),
    (1.2, "near the ridge"),
    (float("inf"), "compute-bound"),
)
"""(upper bound of CCR / CCR*, regime), first that holds."""


@record
class Roofline:
    """`levels`: per link level its name, B and ridge point. `points`: per dimension (and `all`) its bytes per
    step, CCR, level, ridge, CCR / ridge, regime, efficiency. `flops_per_step`, `peak_flops`, `achieved_flops`
    (FLOPs per step / the median step). `efficiency`: the run's implied scaling efficiency (the roofline's
    bound). `measured_efficiency`: 1 - exposed communication / step (median step). `missing`: what it lacks
    when it cannot be drawn."""

    levels: pl.DataFrame
    points: pl.DataFrame
    flops_per_step: float | None
    peak_flops: float | None
    achieved_flops: float | None
    efficiency: float | None
    sentence: str
    missing: str | None = None
    flops_doubt: str | None = None
    host_note: str | None = None
    measured_efficiency: float | None = None


def _regime(ratio: pl.Expr) -> pl.Expr:
    """The first regime of `REGIMES` whose bound the ratio CCR / CCR* is under (null without a ridge)."""
    return pl.coalesce([pl.when(ratio < bound).then(pl.lit(name)) for bound, name in REGIMES])


def _levels(prediction: Prediction, peak: float) -> pl.DataFrame:
    links = (
        ("intra", prediction.inputs.intra),
        ("inter", prediction.inputs.inter),
        ("host", prediction.inputs.host_link),
    )
    rows = [
        (scope, found.name, found.bandwidth_Bps, peak / found.bandwidth_Bps)
        for scope, found in links
        if found is not None and found.bandwidth_Bps > 0
    ]
    schema = {"level": pl.Utf8, "link": pl.Utf8, "bandwidth_Bps": pl.Float64, "ridge": pl.Float64}
    return pl.DataFrame(rows, schema=schema, orient="row")


def _level() -> pl.Expr:
    """The link level of a dimension's calls: across nodes, else on the host (gloo, MPI), else inside."""
    return (
        pl.when(pl.col("spans_nodes").fill_null(False))
        .then(pl.lit("inter"))
        .when(pl.col("on_host").fill_null(False))
        .then(pl.lit("host"))
        .otherwise(pl.lit("intra"))
        .alias("level")
    )


def _points(dimensions: Dimensions, levels: pl.DataFrame, flops: float, batch: float | None) -> pl.DataFrame:
    found = dimensions.per_dimension
    if "on_host" not in found.columns:
        found = found.with_columns(pl.lit(False).alias("on_host"))
    rows = found.filter(pl.col("bus_bytes") > 0).select(
        "dimension", pl.col("bus_bytes").alias("bytes_per_step"), _level()
    )
    placed = rows.join(levels.select("level", "bandwidth_Bps", "ridge"), on="level", how="left")
    total = placed.select(
        pl.lit("all").alias("dimension"),
        pl.col("bytes_per_step").sum(),
        pl.lit(None, pl.Utf8).alias("level"),
        pl.lit(None, pl.Float64).alias("bandwidth_Bps"),
        pl.lit(None, pl.Float64).alias("ridge"),
    )
    ratio = pl.col("ccr") / pl.col("ridge")
    return (
        pl.concat([placed, total])
        .with_columns((flops / pl.col("bytes_per_step")).alias("ccr"))
        .with_columns(ratio.alias("ccr_over_ridge"), _regime(ratio).alias("regime"))
        .with_columns(
            pl.when(pl.col("ccr_over_ridge").is_not_null())
            .then(pl.min_horizontal(pl.lit(1.0), pl.col("ccr_over_ridge")))
            .alias("efficiency"),
            (pl.col("ridge") / pl.col("ccr")).alias("gamma_at_peak"),
            (pl.lit(batch, pl.Float64) * pl.col("ridge") / pl.col("ccr")).alias("critical_batch"),
        )
    )


def _run_efficiency(points: pl.DataFrame, flops: float, peak: float) -> float | None:
    """min(1, (FLOPs / peak) / max over levels of (bytes on the level / its B)); None when a level that moved
    bytes has no known B (its time is unknown, so is the run's)."""
    placed = points.filter(pl.col("level").is_not_null())
    if placed.filter(pl.col("bandwidth_Bps").is_null()).height:
        return None
    per_level = placed.group_by("level").agg(
        (pl.col("bytes_per_step").sum() / pl.col("bandwidth_Bps").first()).alias("seconds")
    )
    if per_level.height == 0:
        return None
    comm = float(per_level.get_column("seconds").max())  # type: ignore[arg-type]
    return min(1.0, (flops / peak) / comm) if comm > 0 else 1.0


def _missing(dimensions: Dimensions | None, prediction: Prediction | None) -> tuple[str | None, float | None]:
    if prediction is None or prediction.inputs.peak_flops is None:
        return "peak FLOP/s (--peak-flops or a device in the hardware table)", None
    flops = prediction.inputs.flops
    if flops.height == 0 or flops.get_column("flops").drop_nulls().len() == 0:
        return "FLOPs per step (--local-batch with --params, or with_flops=True)", None
    if dimensions is None or dimensions.per_dimension.filter(pl.col("bus_bytes") > 0).height == 0:
        return "communication of known size", None
    return None, float(flops.get_column("flops").median())  # type: ignore[arg-type]


def _overall(efficiency: float | None, measured: float | None) -> str:
    """The run's efficiencies: the roofline's bound and the measured one, each where known."""
    bound = (
        f"; at peak FLOP/s with communication hidden the roofline bounds the run's scaling efficiency at "
        f"{efficiency:.0%}"
        if efficiency is not None
        else ""
    )
    said = (
        f"; measured, {measured:.0%} (1 - exposed communication / step, waiting for late peers included)"
        if measured is not None
        else ""
    )
    return bound + said


def _sentence(points: pl.DataFrame, efficiency: float | None, measured: float | None = None) -> str:
    named = points.filter((pl.col("dimension") != "all") & pl.col("ccr_over_ridge").is_not_null())
    if named.height == 0:
        return "No dimension's link level is known: the roofline has no ridge to compare with"
    worst = named.sort("ccr_over_ridge").row(0, named=True)
    overall = _overall(efficiency, measured)
    return (
        f"{worst['dimension'].upper()} sits lowest on the communication roofline: CCR {worst['ccr']:.3g} "
        f"FLOP/B against the {worst['level']}-node ridge {worst['ridge']:.3g} ({worst['regime']}, efficiency "
        f"{worst['efficiency']:.0%}){overall}"
    )


def flops_doubt(prediction: Prediction) -> str | None:
    """The prediction's doubt of the FLOPs per step (achieved / peak outside `ACHIEVED_RANGE`), else None."""
    found = prediction.trust
    achieved = found.achieved_over_peak if found else None
    if found is None or achieved is None or ACHIEVED_RANGE[0] <= achieved <= ACHIEVED_RANGE[1]:
        return None
    return found.doubt


def host_note(prediction: Prediction, points: pl.DataFrame) -> str | None:
    """Why the host level has no ridge (its link unknown), when some point sits there; else None."""
    on_host = points.filter((pl.col("level") == "host") & pl.col("ridge").is_null()).height > 0
    if not on_host:
        return None
    return next((n for n in prediction.inputs.notes if "host collectives" in n), "the host link is unknown")


def _said(
    points: pl.DataFrame, efficiencies: tuple[float | None, float | None], doubt: str | None, host: str | None
) -> str:
    """The roofline's sentence: the FLOPs' doubt first, the lowest point, the run's efficiencies (bound,
    measured), the host level's missing link."""
    lead = f"FLOPs per step in doubt ({doubt}): the CCRs below rest on them. " if doubt else ""
    tail = f"; no host-level ridge: {host}" if host else ""
    return f"{lead}{_sentence(points, *efficiencies)}{tail}."


def measured_efficiency(step_us: float | None, exposed_us: float | None) -> float | None:
    """1 - exposed communication / step (the run's medians), None without both or a step."""
    if not step_us or exposed_us is None:
        return None
    return max(0.0, 1.0 - exposed_us / step_us)


def communication_roofline(
    dimensions: Dimensions | None,
    prediction: Prediction | None,
    step_us: float | None,
    exposed_us: float | None = None,
) -> Roofline:
    """The roofline of the run (module docstring); `step_us` the run's median step (for achieved FLOP/s),
    `exposed_us` its median exposed communication (for the measured efficiency)."""
    missing, flops = _missing(dimensions, prediction)
    if missing is not None or flops is None or dimensions is None or prediction is None:
        return Roofline(
            pl.DataFrame(),
            pl.DataFrame(),
            None,
            None,
            None,
            None,
            f"No roofline: it needs the {missing}.",
            missing,
        )
    peak = float(prediction.inputs.peak_flops or 0.0)
    levels = _levels(prediction, peak)
    points = _points(dimensions, levels, flops, prediction.inputs.local_batch)
    efficiency = _run_efficiency(points, flops, peak)
    points = points.with_columns(
        pl.when(pl.col("dimension") == "all")
        .then(pl.lit(efficiency, pl.Float64))
        .otherwise(pl.col("efficiency"))
        .alias("efficiency")
    )
    achieved = flops / (step_us * 1e-6) if step_us else None
    doubt, host = flops_doubt(prediction), host_note(prediction, points)
    measured = measured_efficiency(step_us, exposed_us)
    sentence = _said(points, (efficiency, measured), doubt, host)
    return Roofline(levels, points, flops, peak, achieved, efficiency, sentence, None, doubt, host, measured)
