"""Least squares of T = k alpha + f S / B on the run's transfer times (docs/metrics.md, "Links measured").

Per class of calls (collective, n, link, protocol) the model is a line in the bus bytes x = f(n) S: T = a + b
x, a = k(n) alpha (k fixed in a class), b = 1 / B. Ordinary least squares gives a and b with their standard
errors (s^2 = residual sum of squares / (N - 2)); the 95% interval is estimate +- t(0.975, N - 2) x error. B's
interval is that of 1 / b (unbounded above when b's interval reaches 0). Per link scope the pooled fit T =
alpha k + beta x (two regressors, no intercept) serves the prediction. A class is fitted only with at least
`MIN_CALLS` calls whose sizes spread at least `MIN_SPREAD` times (equal DDP buckets cannot tell alpha from
beta) and a slope above 0. Everything is a polars aggregation per class.
"""

from __future__ import annotations

import polars as pl

MIN_CALLS = 8
MIN_SPREAD = 4.0
_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)
"""Student's t at 0.975 for 1 to 30 degrees of freedom (standard tables)."""
_Z = 1.959964


def t975(df: pl.Expr) -> pl.Expr:
    """Student's t quantile 0.975 for `df` degrees of freedom: the table to 30, then the Cornish-Fisher
    expansion around z = 1.96 (within 0.001 of the exact value past 30); null below 1."""
    expansion = _Z + (_Z**3 + _Z) / (4 * df) + (5 * _Z**5 + 16 * _Z**3 + 3 * _Z) / (96 * df**2)
    table = df.replace_strict(dict(enumerate(_T975, start=1)), default=None, return_dtype=pl.Float64)
    return pl.when(df < 1).then(None).when(df <= len(_T975)).then(table).otherwise(expansion)


def line_fits(samples: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Per class (`keys`): calls, slope, intercept, their 95% half-widths, R^2, the size range (`samples`:
    keys, `x` bus bytes, `y` seconds, `size_bytes`)."""
    centred = samples.with_columns(
        (pl.col("x") - pl.col("x").mean().over(keys)).alias("_dx"),
        (pl.col("y") - pl.col("y").mean().over(keys)).alias("_dy"),
    )
    sums = centred.group_by(keys).agg(
        pl.len().alias("calls"),
        pl.col("x").mean().alias("_mx"),
        pl.col("y").mean().alias("_my"),
        (pl.col("_dx") ** 2).sum().alias("_sxx"),
        (pl.col("_dx") * pl.col("_dy")).sum().alias("_sxy"),
        (pl.col("_dy") ** 2).sum().alias("_syy"),
        pl.col("size_bytes").min().alias("min_bytes"),
        pl.col("size_bytes").max().alias("max_bytes"),
    )
    slope = pl.when(pl.col("_sxx") > 0).then(pl.col("_sxy") / pl.col("_sxx"))
    fitted = sums.with_columns(slope.alias("slope")).with_columns(
        (pl.col("_my") - pl.col("slope") * pl.col("_mx")).alias("intercept"),
        (pl.col("_syy") - pl.col("slope") * pl.col("_sxy")).clip(lower_bound=0.0).alias("_ssr"),
    )
    s2 = pl.col("_ssr") / (pl.col("calls") - 2)
    t = t975(pl.col("calls") - 2)
    return fitted.with_columns(
        (t * (s2 / pl.col("_sxx")).sqrt()).alias("slope_half"),
        (t * (s2 * (1 / pl.col("calls") + pl.col("_mx") ** 2 / pl.col("_sxx"))).sqrt()).alias(
            "intercept_half"
        ),
        pl.when(pl.col("_syy") > 0).then(1 - pl.col("_ssr") / pl.col("_syy")).otherwise(1.0).alias("r2"),
        (pl.col("max_bytes") / pl.col("min_bytes")).alias("size_spread"),
    ).drop("_mx", "_my", "_sxx", "_sxy", "_syy", "_ssr")


def pooled_fits(samples: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Per `keys`: (alpha_s, beta) of T = alpha k + beta x by least squares without intercept (`samples`:
    keys,
    `k`, `x`, `y`); null where the normal equations are singular."""
    sums = samples.group_by(keys).agg(
        pl.len().alias("calls"),
        (pl.col("k") ** 2).sum().alias("_kk"),
        (pl.col("k") * pl.col("x")).sum().alias("_kx"),
        (pl.col("x") ** 2).sum().alias("_xx"),
        (pl.col("k") * pl.col("y")).sum().alias("_ky"),
        (pl.col("x") * pl.col("y")).sum().alias("_xy"),
        (pl.col("size_bytes").max() / pl.col("size_bytes").min()).alias("size_spread"),
    )
    det = pl.col("_kk") * pl.col("_xx") - pl.col("_kx") ** 2
    regular = det.abs() > 1e-12 * pl.col("_kk") * pl.col("_xx")
    return sums.with_columns(
        pl.when(regular)
        .then((pl.col("_ky") * pl.col("_xx") - pl.col("_kx") * pl.col("_xy")) / det)
        .alias("alpha_s"),
        pl.when(regular)
        .then((pl.col("_kk") * pl.col("_xy") - pl.col("_kx") * pl.col("_ky")) / det)
        .alias("beta"),
    ).drop("_kk", "_kx", "_xx", "_ky", "_xy")


def why_not() -> pl.Expr:
    """Why a class cannot be fitted (null: it can): too few calls, too narrow a size spread, or a slope not
    above 0 (the time does not grow with the size: waiting or contention, not transfer)."""
    return (
        pl.when(pl.col("calls") < MIN_CALLS)
        .then(pl.format("not fitted: {} calls (at least {} needed)", pl.col("calls"), pl.lit(MIN_CALLS)))
        .when(pl.col("size_spread").fill_null(1.0) < MIN_SPREAD)
        .then(
            pl.format(
                "not fitted: sizes spread {}x (at least {}x needed; equal buckets cannot tell alpha "
                "from beta)",
                pl.col("size_spread").fill_null(1.0).round(2),
                pl.lit(MIN_SPREAD),
            )
        )
        .when(pl.col("slope").fill_null(0.0) <= 0)
        .then(
            pl.lit("not fitted: the time does not grow with the size (waiting or contention, not transfer)")
        )
    )
