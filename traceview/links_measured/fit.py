"""Least squares of T = k alpha + f S / B on the run's transfer times (docs/metrics.md, "Links measured").

Per class of calls (collective, n, link, protocol) the model is a line in the bus bytes x = f(n) S: T = a + b
x, a = k(n) alpha (k fixed in a class), b = 1 / B. Ordinary least squares gives a and b with their standard
errors (s^2 = residual sum of squares / (N - 2)); the 95% interval is estimate +- t(0.975, N - 2) x error.
alpha is constrained non-negative: where the free intercept falls below 0 the line is refitted through the
origin (b alone, N - 1 degrees of freedom) and a's interval is the free interval cut at 0 (it still holds the
true a >= 0 with probability 95% or more). B's interval is that of 1 / b (open above when b's reaches 0). A
class's B is reported when its interval lies within `BANDWIDTH_TOLERANCE` of B, whatever the number of calls;
its alpha only where some call is small enough for the latency to weigh (`SMALL_CALL_RATIO`), else its bound.
Per link scope the pooled fit T = alpha k + beta x (two regressors, no intercept) with the same constraint,
intervals and R^2 serves the prediction. Everything is a polars aggregation per class.
"""

from __future__ import annotations

import polars as pl

MIN_CALLS = 3
"""A line and its interval need one residual degree of freedom."""
BANDWIDTH_TOLERANCE = 0.25
"""B is reported when its 95% interval lies within +-25% of it."""
SMALL_CALL_RATIO = 1.0
"""alpha is determined only when the smallest call's transfer term f S / B is at most this many times the
latency term's upper bound k alpha_hi: otherwise no call of the class is small enough to see it."""
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


def _class_sums(samples: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    centred = samples.with_columns(
        (pl.col("x") - pl.col("x").mean().over(keys)).alias("_dx"),
        (pl.col("y") - pl.col("y").mean().over(keys)).alias("_dy"),
    )
    return centred.group_by(keys).agg(
        pl.len().alias("calls"),
        pl.col("x").mean().alias("_mx"),
        pl.col("y").mean().alias("_my"),
        (pl.col("_dx") ** 2).sum().alias("_sxx"),
        (pl.col("_dx") * pl.col("_dy")).sum().alias("_sxy"),
        (pl.col("_dy") ** 2).sum().alias("_syy"),
        (pl.col("x") ** 2).sum().alias("_xx0"),
        (pl.col("x") * pl.col("y")).sum().alias("_xy0"),
        (pl.col("y") ** 2).sum().alias("_yy0"),
        pl.col("x").min().alias("min_x"),
        pl.col("size_bytes").min().alias("min_bytes"),
        pl.col("size_bytes").max().alias("max_bytes"),
    )


def line_fits(samples: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Per class (`keys`): calls, slope, intercept (>= 0), their 95% half-widths (the intercept's as bounds
    `intercept_lo`, `intercept_hi`), R^2, whether the intercept was constrained, the size range (`samples`:
    keys, `x` bus bytes, `y` seconds, `size_bytes`)."""
    sums = _class_sums(samples, keys)
    free_slope = pl.when(pl.col("_sxx") > 0).then(pl.col("_sxy") / pl.col("_sxx"))
    free = sums.with_columns(free_slope.alias("_b")).with_columns(
        (pl.col("_my") - pl.col("_b") * pl.col("_mx")).alias("_a"),
        (pl.col("_syy") - pl.col("_b") * pl.col("_sxy")).clip(lower_bound=0.0).alias("_ssr"),
        (pl.col("_xy0") / pl.col("_xx0")).alias("_b0"),
    )
    s2 = pl.col("_ssr") / (pl.col("calls") - 2)
    ssr0 = (pl.col("_yy0") - pl.col("_b0") * pl.col("_xy0")).clip(lower_bound=0.0)
    halves = free.with_columns(
        (t975(pl.col("calls") - 2) * (s2 / pl.col("_sxx")).sqrt()).alias("_b_half"),
        (
            t975(pl.col("calls") - 2)
            * (s2 * (1 / pl.col("calls") + pl.col("_mx") ** 2 / pl.col("_sxx"))).sqrt()
        ).alias("_a_half"),
        ssr0.alias("_ssr0"),
        (t975(pl.col("calls") - 1) * (ssr0 / (pl.col("calls") - 1) / pl.col("_xx0")).sqrt()).alias(
            "_b0_half"
        ),
    )
    constrained = pl.col("_a") < 0
    ssr = pl.when(constrained).then(pl.col("_ssr0")).otherwise(pl.col("_ssr"))
    return halves.with_columns(
        constrained.fill_null(False).alias("constrained"),
        pl.when(constrained).then(pl.col("_b0")).otherwise(pl.col("_b")).alias("slope"),
        pl.when(constrained).then(pl.col("_b0_half")).otherwise(pl.col("_b_half")).alias("slope_half"),
        pl.col("_a").clip(lower_bound=0.0).alias("intercept"),
        (pl.col("_a") - pl.col("_a_half")).clip(lower_bound=0.0).alias("intercept_lo"),
        (pl.col("_a") + pl.col("_a_half")).clip(lower_bound=0.0).alias("intercept_hi"),
        pl.when(pl.col("_syy") > 0).then(1 - ssr / pl.col("_syy")).otherwise(1.0).alias("r2"),
        (pl.col("max_bytes") / pl.col("min_bytes")).alias("size_spread"),
    ).drop(pl.selectors.starts_with("_"))


def pooled_fits(samples: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Per `keys`: (alpha_s, beta) of T = alpha k + beta x by least squares without intercept, alpha >= 0 (a
    negative alpha refits beta alone), with 95% half-widths, alpha's bounds and R^2 (`samples`: keys, `k`,
    `x`, `y`); null where the normal equations are singular."""
    sums = samples.group_by(keys).agg(
        pl.len().alias("calls"),
        (pl.col("k") ** 2).sum().alias("_kk"),
        (pl.col("k") * pl.col("x")).sum().alias("_kx"),
        (pl.col("x") ** 2).sum().alias("_xx"),
        (pl.col("k") * pl.col("y")).sum().alias("_ky"),
        (pl.col("x") * pl.col("y")).sum().alias("_xy"),
        (pl.col("y") ** 2).sum().alias("_yy"),
        ((pl.col("y") - pl.col("y").mean()) ** 2).sum().alias("_syy"),
        (pl.col("size_bytes").max() / pl.col("size_bytes").min()).alias("size_spread"),
    )
    det = pl.col("_kk") * pl.col("_xx") - pl.col("_kx") ** 2
    regular = det.abs() > 1e-12 * pl.col("_kk") * pl.col("_xx")
    solved = sums.with_columns(
        pl.when(regular)
        .then((pl.col("_ky") * pl.col("_xx") - pl.col("_kx") * pl.col("_xy")) / det)
        .alias("_a"),
        pl.when(regular)
        .then((pl.col("_kk") * pl.col("_xy") - pl.col("_kx") * pl.col("_ky")) / det)
        .alias("_b"),
        (pl.col("_xy") / pl.col("_xx")).alias("_b0"),
    )
    ssr = (pl.col("_yy") - pl.col("_a") * pl.col("_ky") - pl.col("_b") * pl.col("_xy")).clip(lower_bound=0.0)
    ssr0 = (pl.col("_yy") - pl.col("_b0") * pl.col("_xy")).clip(lower_bound=0.0)
    s2 = ssr / (pl.col("calls") - 2)
    t2, t1 = t975(pl.col("calls") - 2), t975(pl.col("calls") - 1)
    halves = solved.with_columns(
        ssr.alias("_ssr"),
        ssr0.alias("_ssr0"),
        (t2 * (s2 * pl.col("_xx") / det).sqrt()).alias("_a_half"),
        (t2 * (s2 * pl.col("_kk") / det).sqrt()).alias("_b_half"),
        (t1 * (ssr0 / (pl.col("calls") - 1) / pl.col("_xx")).sqrt()).alias("_b0_half"),
    )
    constrained = pl.col("_a") < 0
    return halves.with_columns(
        constrained.fill_null(False).alias("constrained"),
        pl.col("_a").clip(lower_bound=0.0).alias("alpha_s"),
        (pl.col("_a") - pl.col("_a_half")).clip(lower_bound=0.0).alias("alpha_lo_s"),
        (pl.col("_a") + pl.col("_a_half")).clip(lower_bound=0.0).alias("alpha_hi_s"),
        pl.when(constrained).then(pl.col("_b0")).otherwise(pl.col("_b")).alias("beta"),
        pl.when(constrained).then(pl.col("_b0_half")).otherwise(pl.col("_b_half")).alias("beta_half"),
        pl.when(pl.col("_syy") > 0)
        .then(1 - pl.when(constrained).then(pl.col("_ssr0")).otherwise(pl.col("_ssr")) / pl.col("_syy"))
        .alias("r2"),
    ).drop(pl.selectors.starts_with("_"))


def bandwidth_within_tolerance(slope: pl.Expr, half: pl.Expr) -> pl.Expr:
    """Whether B = 1 / slope has a 95% interval [1 / (slope + half), 1 / (slope - half)] within +-25% of B:
    the upper side binds, half <= slope x 0.25 / 1.25."""
    return (slope > 0) & (half <= slope * BANDWIDTH_TOLERANCE / (1 + BANDWIDTH_TOLERANCE))


def why_not() -> pl.Expr:
    """Why a class's B is not reported (null: it is): too few calls for an interval, every call of one size,
    a slope not above 0 (the time does not grow with the size: waiting or contention, not transfer), or B's
    interval wider than +-25%."""
    low = 1 / (pl.col("slope") + pl.col("slope_half")) / 1e9
    high = 1 / (pl.col("slope") - pl.col("slope_half")) / 1e9
    return (
        pl.when(pl.col("calls") < MIN_CALLS)
        .then(
            pl.format("not fitted: {} calls (at least {} needed for an interval)", "calls", pl.lit(MIN_CALLS))
        )
        .when(pl.col("size_spread").fill_null(1.0) <= 1.0)
        .then(pl.lit("not fitted: every call has one size (alpha and B cannot be told apart)"))
        .when(pl.col("slope").fill_null(0.0) <= 0)
        .then(
            pl.lit("not fitted: the time does not grow with the size (waiting or contention, not transfer)")
        )
        .when(~bandwidth_within_tolerance(pl.col("slope"), pl.col("slope_half")).fill_null(False))
        .then(
            pl.format(
                "not fitted: B's 95% interval {} to {} GB/s is wider than +-{}%",
                low.round(3),
                pl.when(pl.col("slope") > pl.col("slope_half"))
                .then(high.round(3).cast(pl.Utf8))
                .otherwise(pl.lit("unbounded")),
                pl.lit(round(BANDWIDTH_TOLERANCE * 100)),
            )
        )
    )
