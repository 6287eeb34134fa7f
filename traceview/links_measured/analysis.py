"""Alpha and beta measured from the run (docs/metrics.md, "Links measured"; the seeds' section 5.6).

Each matched collective instance gives one sample: its transfer time (the shortest member's duration: the
wait for peers removed by the cross-rank alignment), its S, its group's n, the link its group ran on (the
prediction's pricing) and NCCL's protocol where the kernel name is evidence of it (NCCL <= 2.18, RCCL
specialized; a NCCL >= 2.19 name's `LL` is the kernel's specialisation, so unknown) (LL, LL128, SIMPLE: each
its own alpha and B). Per class (collective, n, link, protocol): alpha and B with 95% intervals beside the
hardware table's (`traceview.links_measured.fit`); per link scope (inside a node, across nodes) the pooled fit
that `--links measured` hands the prediction and its what-ifs as a `LinkOverride` with source `measured`.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

import polars as pl

from traceview.across_ranks.analysis import CrossRank
from traceview.core.costmodel import bus_factor_expr, latency_steps_expr
from traceview.core.records import record
from traceview.links_measured.fit import (
    MIN_CALLS,
    SMALL_CALL_RATIO,
    bandwidth_within_tolerance,
    line_fits,
    pooled_fits,
    why_not,
)
from traceview.options.model import LinkOverride
from traceview.prediction.gamma import Prediction
from traceview.prediction.links import HOST_LINK

CLASS_KEYS = ["collective", "group_size", "link", "scope", "protocol"]
MEASURED_NOTE = (
    "The prediction uses links measured in this run (--links measured): its bandwidth efficiency is ~1 by "
    "construction, not an independent check."
)


@record
class LinksMeasured:
    """`classes`: per class, the fit (alpha_us, bandwidth_Bps and their 95% bounds, R^2) or why not, beside
    the table's. `scopes`: the pooled fit per link scope. `overrides`: what `--links measured` feeds the
    prediction. `used`: whether this analysis's prediction uses them. `sentence`: the finding in words.
    `samples`: the transfer time (`y`, s) and bus bytes (`x`) of every matched instance, with its class."""

    classes: pl.DataFrame
    scopes: pl.DataFrame
    overrides: tuple[LinkOverride, ...]
    sentence: str
    used: bool = False
    samples: pl.DataFrame = field(default_factory=pl.DataFrame)  # per matched instance: class, x, y


def samples(kernels: pl.DataFrame, crossrank: CrossRank, priced: pl.DataFrame) -> pl.DataFrame:
    """One row per usable instance: class keys, S, k, x = f(n) S, y = transfer time (s), table alpha and B."""
    member = crossrank.calls.group_by("instance").agg(
        pl.col("rank").min(), pl.col("start_us").sort_by("rank").first()
    )
    usable = crossrank.instances.filter(pl.col("transfer_us").is_not_null() & (pl.col("size_bytes") > 0))
    protocol = kernels.filter(pl.col("first_in_call")).select("rank", "start_us", "protocol")
    kind = pl.col("comm_kind") if "comm_kind" in priced.columns else pl.lit("device")
    link = priced.select(
        "rank",
        "start_us",
        "group_size",
        "link",
        "spans_nodes",
        "alpha_s",
        "bandwidth_Bps",
        kind.alias("kind"),
    )
    joined = (
        usable.select("instance", "collective", "size_bytes", "transfer_us")
        .join(member, on="instance")
        .join(protocol, on=["rank", "start_us"], how="left")
        .join(link, on=["rank", "start_us"], how="inner")
        .filter(pl.col("group_size").is_not_null())
    )
    n = pl.col("group_size")
    return joined.with_columns(
        pl.col("protocol").fill_null("unknown"),
        pl.when(pl.col("link").is_null() & (pl.col("kind") == "host") & ~pl.col("spans_nodes"))
        .then(pl.lit(HOST_LINK))
        .otherwise(pl.col("link").fill_null("unknown"))
        .alias("link"),
        pl.when(pl.col("spans_nodes"))
        .then(pl.lit("inter"))
        .when(pl.col("kind") == "host")
        .then(pl.lit("host"))
        .otherwise(pl.lit("intra"))
        .alias("scope"),
        latency_steps_expr(pl.col("collective"), n).alias("k"),
        (bus_factor_expr(pl.col("collective"), n) * pl.col("size_bytes").cast(pl.Float64)).alias("x"),
        (pl.col("transfer_us") * 1e-6).alias("y"),
    ).drop_nulls(["k", "x"])


CLASS_COLUMNS = (
    "k",
    "calls",
    "min_bytes",
    "max_bytes",
    "size_spread",
    "fitted",
    "reason",
    "alpha_us",
    "alpha_lo_us",
    "alpha_hi_us",
    "alpha_fit_us",
    "alpha_determined",
    "alpha_note",
    "constrained",
    "bandwidth_Bps",
    "bandwidth_lo_Bps",
    "bandwidth_hi_Bps",
    "r2",
    "table_alpha_us",
    "table_bandwidth_Bps",
)
"""The columns of `class_table` after the class keys, in order."""
ALPHA_UNDETERMINED = pl.format(
    "alpha undetermined at these sizes ({} to {} MB: the smallest call's transfer term "
    "outweighs the latency's bound); alpha <= {} us",
    (pl.col("min_bytes") / 1e6).round(3),
    (pl.col("max_bytes") / 1e6).round(3),
    (pl.col("intercept_hi") / pl.col("k") * 1e6).round(1),
)
"""`alpha_note` of a fitted class whose alpha no call is small enough to see: the sizes and alpha's bound."""


def class_table(found: pl.DataFrame) -> pl.DataFrame:
    """Per class: B with its 95% bounds where they lie within +-25% (else why not), alpha with its bounds
    where some call is small enough to see it (else null and its bound in `alpha_note`), R^2; the table's."""
    lines = line_fits(found, CLASS_KEYS)
    table = found.group_by(CLASS_KEYS).agg(
        pl.col("k").first(),
        pl.col("alpha_s").median().alias("table_alpha_s"),
        pl.col("bandwidth_Bps").median().alias("table_bandwidth_Bps"),
    )
    low_slope = pl.col("slope") - pl.col("slope_half")
    fitted = pl.col("reason").is_null()
    small_seen = pl.col("min_x") * pl.col("slope") <= SMALL_CALL_RATIO * pl.col("intercept_hi")
    return (
        lines.join(table, on=CLASS_KEYS)
        .with_columns(why_not().alias("reason"))
        .with_columns(fitted.alias("fitted"), (fitted & small_seen).alias("alpha_determined"))
        .with_columns(
            pl.when(pl.col("alpha_determined"))
            .then(pl.col("intercept") / pl.col("k") * 1e6)
            .alias("alpha_us"),
            pl.when(fitted).then(pl.col("intercept") / pl.col("k") * 1e6).alias("alpha_fit_us"),
            pl.when(fitted).then(pl.col("intercept_lo") / pl.col("k") * 1e6).alias("alpha_lo_us"),
            pl.when(fitted).then(pl.col("intercept_hi") / pl.col("k") * 1e6).alias("alpha_hi_us"),
            pl.when(fitted & ~pl.col("alpha_determined")).then(ALPHA_UNDETERMINED).alias("alpha_note"),
            pl.when(fitted).then(1 / pl.col("slope")).alias("bandwidth_Bps"),
            pl.when(fitted).then(1 / (pl.col("slope") + pl.col("slope_half"))).alias("bandwidth_lo_Bps"),
            pl.when(fitted & (low_slope > 0)).then(1 / low_slope).alias("bandwidth_hi_Bps"),
            (pl.col("table_alpha_s") * 1e6).alias("table_alpha_us"),
        )
        .select(*CLASS_KEYS, *CLASS_COLUMNS)
        .sort("scope", "collective", "group_size", "protocol")
    )


def scope_table(found: pl.DataFrame) -> pl.DataFrame:
    """Per link scope: the pooled fit (alpha_us and B with 95% bounds, R^2), the links it covers, and whether
    it can feed the prediction (an interval exists and B's lies within +-25%)."""
    pooled = pooled_fits(found, ["scope"])
    links = found.group_by("scope").agg(pl.col("link").drop_nulls().unique().sort().alias("links"))
    low_beta = pl.col("beta") - pl.col("beta_half")
    usable = (pl.col("calls") >= MIN_CALLS) & bandwidth_within_tolerance(pl.col("beta"), pl.col("beta_half"))
    return (
        pooled.join(links, on="scope")
        .with_columns(
            (pl.col("alpha_s") * 1e6).alias("alpha_us"),
            (pl.col("alpha_lo_s") * 1e6).alias("alpha_lo_us"),
            (pl.col("alpha_hi_s") * 1e6).alias("alpha_hi_us"),
            pl.when(pl.col("beta") > 0).then(1 / pl.col("beta")).alias("bandwidth_Bps"),
            pl.when(pl.col("beta") > 0)
            .then(1 / (pl.col("beta") + pl.col("beta_half")))
            .alias("bandwidth_lo_Bps"),
            pl.when(low_beta > 0).then(1 / low_beta).alias("bandwidth_hi_Bps"),
            usable.fill_null(False).alias("fitted"),
        )
        .select(
            "scope",
            "links",
            "calls",
            "size_spread",
            "alpha_us",
            "alpha_lo_us",
            "alpha_hi_us",
            "constrained",
            "bandwidth_Bps",
            "bandwidth_lo_Bps",
            "bandwidth_hi_Bps",
            "r2",
            "fitted",
        )
        .sort("scope")
    )


def overrides_of(scopes: pl.DataFrame) -> tuple[LinkOverride, ...]:
    """The `LinkOverride` (source `measured`) of every fitted scope."""
    return tuple(
        LinkOverride(
            row["scope"],
            f"measured ({', '.join(row['links'])})",
            row["bandwidth_Bps"],
            row["alpha_us"] * 1e-6,
            f"fitted on {row['calls']} transfer times of this run (B {row['bandwidth_lo_Bps'] / 1e9:.3g} to "
            f"{_gb(row['bandwidth_hi_Bps'])} GB/s, 95%)",
            source="measured",
        )
        for row in scopes.filter(pl.col("fitted")).iter_rows(named=True)
    )


def _gb(value: float | None) -> str:
    return "unbounded" if value is None else f"{value / 1e9:.3g}"


def _alpha_words(row: dict[str, Any]) -> str:
    if row["alpha_us"] is None:
        return f"alpha undetermined at these sizes (at most {row['alpha_hi_us']:.3g} us)"
    return f"alpha {row['alpha_us']:.3g} us ({row['alpha_lo_us']:.3g} to {row['alpha_hi_us']:.3g})"


def _sentence(classes: pl.DataFrame, reason: str | None) -> str:
    if reason:
        return reason
    fitted = classes.filter(pl.col("fitted"))
    if fitted.height == 0:
        first = str(classes.sort("calls", descending=True).get_column("reason").drop_nulls().first())
        return f"No class of calls could be fitted; the largest: {first.removeprefix('not fitted: ')}."
    parts = [
        f"{r['collective']} n={r['group_size']} {r['protocol']} on {r['link']}: "
        f"{_alpha_words(r)}, B {r['bandwidth_Bps'] / 1e9:.3g} GB/s "
        f"({r['bandwidth_lo_Bps'] / 1e9:.3g} to {_gb(r['bandwidth_hi_Bps'])}; {r['calls']} calls)"
        for r in fitted.sort("calls", descending=True).head(3).iter_rows(named=True)
    ]
    return "Measured from the run's transfer times: " + "; ".join(parts) + "."


def measure_links(
    kernels: pl.DataFrame, crossrank: CrossRank | None, prediction: Prediction | None
) -> LinksMeasured:
    """The links measured in the run (module docstring); empty tables and the reason when nothing can be."""
    reason = None
    if crossrank is None or crossrank.usable_instances == 0:
        reason = (
            "Not fitted: no collective was matched on two or more ranks, so no transfer time is free of "
            "waiting."
        )
    elif prediction is None or prediction.calls.height == 0:
        reason = "Not fitted: the prediction priced no call, so no call has a link."
    found = (
        samples(kernels, crossrank, prediction.calls)
        if reason is None and crossrank and prediction
        else pl.DataFrame()
    )
    if reason is None and found.height == 0:
        reason = "Not fitted: no matched instance has a known size, group size and link."
    classes = class_table(found) if reason is None else pl.DataFrame()
    scopes = scope_table(found) if reason is None else pl.DataFrame()
    return LinksMeasured(
        classes=classes,
        scopes=scopes,
        overrides=overrides_of(scopes) if scopes.height else (),
        sentence=_sentence(classes, reason),
        samples=found.select(*CLASS_KEYS, "size_bytes", "x", "y") if found.height else pl.DataFrame(),
    )
