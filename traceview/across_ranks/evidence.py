"""When a cross-rank claim may be made (docs/metrics.md, "Across ranks", "Evidence"): a sentence may say that
peers wait for a rank only when the rank arrives last beyond chance and beyond the clock's uncertainty.

- **Beyond chance**: of its `instances` collectives, each of `K` members (its median group size), the rank is
  last in `times_last`. Were arrival order random, the count would be Binomial(instances, 1/K); its upper
  tail P(X >= times_last) is `last_p_value`, and the rank is last beyond chance when it is below
  `LAST_ALPHA`. The tail is summed exactly from log-factorials (a table built once by a cumulative sum), only
  for ranks last more often than chance (times_last > instances / K); the others have no p-value (null).
- **Beyond the clock**: the median lateness exceeds `CLOCK_MARGIN` times the rank's clock uncertainty (the
  spread of the alignment it is compared through) and `LATENESS_FLOOR_US`.
- **By size** (a test that needs neither many ranks nor many collectives: two ranks and six collectives never
  reach `LAST_ALPHA`): at least `MIN_SIZE_INSTANCES` instances and its median lead (aligned start - the
  latest of the other members') above `lead_floor_us`, the largest of `CLOCK_MARGIN` x its clock
  uncertainty, `JITTER_MARGIN` x the median absolute deviation of its leads (the run's own jitter),
  `LATENESS_FLOOR_US` and `SIZE_STEP_SHARE` of the median step.
"""

from __future__ import annotations

import polars as pl

LAST_ALPHA = 0.01
"""A rank is last beyond chance when P(last at least this often | random order) is below this."""
CLOCK_MARGIN = 2.0
"""A lateness counts only past this multiple of the clock uncertainty (the interquartile range of the offsets'
differences: twice it is about 2.7 standard deviations of a normal spread)."""
LATENESS_FLOOR_US = 20.0
"""Below this median lateness a rank is never said to hold its peers back, however often it is last."""


def _log_factorials(largest: int) -> pl.DataFrame:
    """`m`, `log_factorial` = log(m!) for m = 0..largest (a cumulative sum of log i)."""
    return pl.DataFrame({"m": pl.int_range(0, largest + 1, eager=True)}).with_columns(
        pl.col("m").clip(lower_bound=1).cast(pl.Float64).log().cum_sum().alias("log_factorial")
    )


def last_p_values(figures: pl.DataFrame) -> pl.DataFrame:
    """Per rank of `figures` (rank, instances, times_last, group_size) last more often than chance:
    `last_p_value` = P(X >= times_last), X ~ Binomial(instances, 1 / max(2, group_size)). Columns rank,
    last_p_value."""
    chance = 1.0 / pl.col("group_size").fill_null(2.0).clip(lower_bound=2.0)
    tested = figures.select(
        "rank",
        pl.col("instances").cast(pl.Int64).alias("n"),
        pl.col("times_last").cast(pl.Int64).alias("k"),
        chance.alias("p"),
    ).filter((pl.col("n") > 0) & (pl.col("k") > pl.col("n") * pl.col("p")))
    if tested.height == 0:
        return pl.DataFrame(schema={"rank": pl.Int64, "last_p_value": pl.Float64})
    table = _log_factorials(int(tested.get_column("n").max()))  # type: ignore[arg-type]
    terms = tested.with_columns(pl.int_ranges(pl.col("k"), pl.col("n") + 1).alias("j")).explode("j")
    for column, expr in (
        ("lf_n", pl.col("n")),
        ("lf_j", pl.col("j")),
        ("lf_rest", pl.col("n") - pl.col("j")),
    ):
        terms = terms.with_columns(expr.alias("m")).join(
            table.rename({"log_factorial": column}), on="m", how="left"
        )
    log_pmf = (
        pl.col("lf_n")
        - pl.col("lf_j")
        - pl.col("lf_rest")
        + pl.col("j") * pl.col("p").log()
        + (pl.col("n") - pl.col("j")) * (1 - pl.col("p")).log()
    )
    return (
        terms.group_by("rank")
        .agg(log_pmf.exp().sum().clip(upper_bound=1.0).alias("last_p_value"))
        .cast({"rank": pl.Int64})
    )


def beyond_chance() -> pl.Expr:
    """The rank is last beyond chance (`last_p_value` below `LAST_ALPHA`)."""
    return (pl.col("last_p_value") < LAST_ALPHA).fill_null(False)


def beyond_clock() -> pl.Expr:
    """The rank's median lateness exceeds `CLOCK_MARGIN` x its clock uncertainty (null when its clock is not
    aligned: never beyond it)."""
    return pl.col("median_lateness_us") > CLOCK_MARGIN * pl.col("clock_uncertainty_us")


def late_enough() -> pl.Expr:
    """The rank's median lateness reaches `LATENESS_FLOOR_US`."""
    return pl.col("median_lateness_us").fill_null(0.0) >= LATENESS_FLOOR_US


JITTER_MARGIN = 2.0
"""A median lead counts by size only past this multiple of the median absolute deviation of the rank's leads
(about 1.35 standard deviations of a normal spread)."""
SIZE_STEP_SHARE = 0.02
"""A median lead counts by size only past this share of the run's median step."""
MIN_SIZE_INSTANCES = 3
"""Instances a rank needs before its leads are evidence by size."""


def lead_floor(median_step_us: float | None) -> pl.Expr:
    """`lead_floor_us`: the median lead a rank must exceed to be late by size (null when its clock is not
    aligned)."""
    step = median_step_us if median_step_us and median_step_us > 0 else 0.0
    return pl.max_horizontal(
        CLOCK_MARGIN * pl.col("clock_uncertainty_us"),
        JITTER_MARGIN * pl.col("lead_jitter_us").fill_null(0.0),
        pl.lit(LATENESS_FLOOR_US),
        pl.lit(SIZE_STEP_SHARE * step),
    ).alias("lead_floor_us")


def late_by_size() -> pl.Expr:
    """The rank's median lead exceeds its `lead_floor_us` over at least `MIN_SIZE_INSTANCES` instances (false
    when its clock is not aligned)."""
    enough = pl.col("instances") >= MIN_SIZE_INSTANCES
    late = pl.col("median_lead_us") > pl.col("lead_floor_us")
    return (enough & late & pl.col("clock_uncertainty_us").is_not_null()).fill_null(False)
