"""The slow rank explained kernel by kernel (docs/metrics.md, "Kernels and operators", "The slow rank").

A rank's excess is its compute per step (T_comp, the mean over its steps) less the reference rank's, the
median rank by T_comp among the others (a real rank, whose kernels exist). It splits exactly into the compute
classes' exclusive times and the `overlap` term (`traceview.kernels.classes`): `by_class`. Within the classes,
each kernel key both ranks list (`traceview.kernels.top.key_steps`; a key one rank does not list counts as
absent there only when that rank's class has no unlisted time) gives its difference in summed duration per
step, split as

    delta = (n_slow - n_ref) x d_ref  +  n_slow x (d_slow - d_ref)
            (different work: more kernels)  (the same work, slower)

with n the kernels per step and d their mean duration: `by_kernel`. What the kernels leave unexplained
(overlap between classes, keys outside the bounded lists) is `remainder_us` = excess - the kernels' deltas,
stated.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from traceview.core.durations import duration_text
from traceview.core.records import record

SLOW_EXCESS_MIN = 0.05
"""A rank computing this fraction more per step than the reference rank is explained unasked."""
MAX_EXPLAINED = 4
"""Ranks explained unasked, the largest excess first."""
ABSENT_SHARE = 0.01
"""A key a rank does not list counts as absent there when that rank's class holds at most this share of
unlisted time."""
SAME_COUNT = 0.02
"""Kernel counts per step within this fraction are the same work; a time within it is unchanged."""
LISTED_KERNELS = 8
"""Kernels named in the sentence, at most."""
NOTABLE = 0.01
"""A kernel is named in the sentence when its difference is at least this share of the excess."""

BY_KERNEL_SCHEMA: dict[str, pl.DataType] = {
    "key": pl.Utf8(),
    "name": pl.Utf8(),
    "kernel_class": pl.Utf8(),
    "count": pl.Float64(),
    "reference_count": pl.Float64(),
    "time_us": pl.Float64(),
    "reference_us": pl.Float64(),
    "delta_us": pl.Float64(),
    "slower_us": pl.Float64(),
    "more_work_us": pl.Float64(),
    "duration_ratio": pl.Float64(),
    "cause": pl.Utf8(),
}


@record
class SlowRank:
    """One rank against the reference rank, per step (means over each rank's steps)."""

    rank: int
    reference_rank: int
    comp_us: float
    reference_comp_us: float
    by_class: pl.DataFrame  # kernel_class, time_us, reference_us, delta_us
    by_kernel: pl.DataFrame  # BY_KERNEL_SCHEMA, largest |delta| first
    remainder_us: float
    sentence: str

    @property
    def excess_us(self) -> float:
        """Compute per step beyond the reference rank's."""
        return self.comp_us - self.reference_comp_us


def _per_step(frame: pl.DataFrame, keys: Sequence[str], values: Sequence[str]) -> pl.DataFrame:
    """Per rank and `keys`: each value summed over the rank's steps, divided by its step count."""
    steps = frame.group_by("rank").agg(pl.col("step").n_unique().alias("_steps"))
    return (
        frame.group_by("rank", *keys)
        .agg(*(pl.col(v).sum() for v in values))
        .join(steps, on="rank")
        .with_columns(*(pl.col(v) / pl.col("_steps") for v in values))
        .drop("_steps")
    )


def rank_comp(class_steps: pl.DataFrame) -> pl.DataFrame:
    """Per rank: T_comp per step (`comp_us`), from the compute classes' exclusive times and the overlap."""
    comp = class_steps.filter(pl.col("in_comp"))
    return _per_step(comp, [], ["exclusive_us"]).rename({"exclusive_us": "comp_us"}).sort("rank")


def references(comp: pl.DataFrame) -> pl.DataFrame:
    """Per rank of `comp` (`rank`, `comp_us`): its reference rank (`reference`), the median rank by T_comp
    among the others (the lower middle for an even count), and that rank's `reference_us`; null alone. With
    the ranks sorted by T_comp then rank, the lower middle of the others is the ranks' lower middle
    m = (n - 2) // 2 for a rank above it, the next one for a rank at or below it: every rank at once."""
    ordered = comp.sort("comp_us", "rank").with_row_index("_position")
    middle = (ordered.height - 2) // 2
    none = {"rank": None, "comp_us": None}
    below, above = (
        ordered.row(i, named=True) if 0 <= i < ordered.height else none for i in (middle, middle + 1)
    )
    lower = pl.col("_position") > middle
    taken = (("rank", pl.Int64, "reference"), ("comp_us", pl.Float64, "reference_us"))
    return ordered.select(
        "rank",
        "comp_us",
        *(
            pl.when(lower).then(pl.lit(below[of])).otherwise(pl.lit(above[of])).cast(dtype).alias(name)
            for of, dtype, name in taken
        ),
    )


def reference_rank(comp: pl.DataFrame, rank: int) -> int | None:
    """`rank`'s reference rank (`references`; None for a rank alone or without compute)."""
    found = references(comp).filter(pl.col("rank") == rank)
    return None if found.height == 0 else found.item(0, "reference")


def slow_ranks(class_steps: pl.DataFrame, asked: Sequence[int] = ()) -> list[int]:
    """The ranks to explain: `asked`, then those computing `SLOW_EXCESS_MIN` more than their reference (the
    largest T_comp first)."""
    base = pl.col("reference_us")
    slow = (base != 0) & (pl.col("comp_us") >= base * (1 + SLOW_EXCESS_MIN))
    found = references(rank_comp(class_steps)).filter(slow).sort("comp_us", "rank", descending=[True, False])
    return list(dict.fromkeys([*asked, *found.get_column("rank").head(MAX_EXPLAINED).to_list()]))


def _classes(class_steps: pl.DataFrame, rank: int, reference: int) -> pl.DataFrame:
    comp = class_steps.filter(pl.col("in_comp") & pl.col("rank").is_in([rank, reference]))
    means = _per_step(comp, ["kernel_class"], ["exclusive_us", "kernel_sum_us"])
    mine = means.filter(pl.col("rank") == rank).drop("rank")
    theirs = means.filter(pl.col("rank") == reference).drop("rank")
    joined = mine.join(theirs, on="kernel_class", how="full", coalesce=True, suffix="_ref").fill_null(0.0)
    return joined.select(
        "kernel_class",
        pl.col("exclusive_us").alias("time_us"),
        pl.col("exclusive_us_ref").alias("reference_us"),
        (pl.col("exclusive_us") - pl.col("exclusive_us_ref")).alias("delta_us"),
        pl.col("kernel_sum_us").alias("_sum"),
        pl.col("kernel_sum_us_ref").alias("_sum_ref"),
    )


def _kernels(key_steps: pl.DataFrame, classes: pl.DataFrame, rank: int, reference: int) -> pl.DataFrame:
    in_classes = pl.col("kernel_class").is_in(classes.get_column("kernel_class").to_list())
    compute = key_steps.filter(pl.col("rank").is_in([rank, reference]) & in_classes)
    means = _per_step(compute, ["key", "kernel_class"], ["kernels", "kernel_sum_us"])
    names = compute.group_by("key").agg(pl.col("name").min())  # deterministic where ranks differ
    mine = means.filter(pl.col("rank") == rank).drop("rank")
    theirs = means.filter(pl.col("rank") == reference).drop("rank", "kernel_class")
    joined = mine.join(theirs, on="key", how="full", coalesce=True, suffix="_ref")
    listed = joined.group_by("kernel_class").agg(
        pl.col("kernel_sum_us").sum().alias("_listed"), pl.col("kernel_sum_us_ref").sum().alias("_listed_ref")
    )
    return (
        joined.join(listed, on="kernel_class", how="left")
        .join(classes, on="kernel_class", how="left")
        .join(names, on="key", how="left")
    )


def _absent_is_zero(unlisted: pl.Expr, total: pl.Expr) -> pl.Expr:
    return (total - unlisted).abs() <= ABSENT_SHARE * total.abs().clip(lower_bound=1e-9)


def _split(joined: pl.DataFrame) -> pl.DataFrame:
    """Per key: the delta, split into more work and slower work (module docstring)."""
    mine_ok = pl.col("kernels").is_not_null() | _absent_is_zero(pl.col("_listed"), pl.col("_sum"))
    ref_ok = pl.col("kernels_ref").is_not_null() | _absent_is_zero(pl.col("_listed_ref"), pl.col("_sum_ref"))
    n, n_ref = pl.col("kernels").fill_null(0.0), pl.col("kernels_ref").fill_null(0.0)
    t, t_ref = pl.col("kernel_sum_us").fill_null(0.0), pl.col("kernel_sum_us_ref").fill_null(0.0)
    d = pl.when(n > 0).then(t / n).otherwise(0.0)
    d_ref = pl.when(n_ref > 0).then(t_ref / n_ref).otherwise(d)
    return joined.filter(mine_ok & ref_ok).select(
        "key",
        "name",
        "kernel_class",
        n.alias("count"),
        n_ref.alias("reference_count"),
        t.alias("time_us"),
        t_ref.alias("reference_us"),
        (t - t_ref).alias("delta_us"),
        (n * (d - d_ref)).alias("slower_us"),
        ((n - n_ref) * d_ref).alias("more_work_us"),
        pl.when(d_ref > 0).then(d / d_ref).alias("duration_ratio"),
    )


def _cause() -> pl.Expr:
    same = (pl.col("count") - pl.col("reference_count")).abs() <= SAME_COUNT * pl.col("reference_count")
    unchanged = pl.col("delta_us").abs() <= SAME_COUNT * pl.col("reference_us").abs()
    return (
        pl.when(same & unchanged)
        .then(pl.lit("unchanged"))
        .when(pl.col("reference_count") == 0)
        .then(pl.lit("new work"))
        .when(pl.col("count") == 0)
        .then(pl.lit("work not done"))
        .when(same)
        .then(pl.lit("same work, slower"))
        .when(pl.col("slower_us").abs() >= pl.col("more_work_us").abs())
        .then(pl.lit("slower, and different work"))
        .otherwise(pl.lit("different work"))
    )


def explain(class_steps: pl.DataFrame, key_steps: pl.DataFrame, rank: int) -> SlowRank | None:
    """`rank` against its reference rank (module docstring); None when it has no compute or no peer."""
    comp = rank_comp(class_steps)
    reference = reference_rank(comp, rank)
    if reference is None or comp.filter(pl.col("rank") == rank).height == 0:
        return None
    classes = _classes(class_steps, rank, reference)
    kernels = _split(_kernels(key_steps, classes, rank, reference)).with_columns(_cause().alias("cause"))
    largest = [pl.col("delta_us").abs(), pl.col("key")]
    kernels = kernels.sort(largest, descending=[True, False]).select(list(BY_KERNEL_SCHEMA))
    value = {int(r["rank"]): float(r["comp_us"]) for r in comp.iter_rows(named=True)}
    excess = value[rank] - value[reference]
    remainder = excess - float(kernels.get_column("delta_us").sum())
    by_class = classes.drop("_sum", "_sum_ref").sort(
        [pl.col("delta_us").abs(), pl.col("kernel_class")], descending=[True, False]
    )
    found = SlowRank(rank, reference, value[rank], value[reference], by_class, kernels, remainder, "")
    return SlowRank(**{**found.__dict__, "sentence": sentence(found)})


def _ms(us: float) -> str:
    return duration_text(us)


NAME_WIDTH = 60
"""A kernel key longer than this is shown by its start and its end (they tell variants apart)."""
REMAINDER_CAUSES = (
    "kernels running at once on several streams, counted once in their class's time; the overlap between "
    "classes; kernels outside the listed ones"
)


def _short(name: str) -> str:
    """`name` within `NAME_WIDTH` characters: its start and its end around '...'."""
    if len(name) <= NAME_WIDTH:
        return name
    end = NAME_WIDTH // 3
    return f"{name[: NAME_WIDTH - end - 3]}...{name[-end:]}"


def _kernel_phrase(row: dict[str, object]) -> str:
    delta, cause = float(row["delta_us"]), str(row["cause"])  # type: ignore[arg-type]
    name = _short(str(row["key"]))
    if cause == "same work, slower":
        ratio = f"{row['duration_ratio']:.2f}x" if row["duration_ratio"] is not None else "longer"
        return (
            f"{_ms(delta)} in {row['kernel_class']} `{name}` ({ratio} longer at the same count: the same "
            "work ran slower)"
        )
    more = float(row["count"]) - float(row["reference_count"])  # type: ignore[arg-type]
    return f"{_ms(delta)} in {row['kernel_class']} `{name}` ({more:+.0f} kernels per step: {cause})"


def _notable(frame: pl.DataFrame, excess_us: float) -> pl.DataFrame:
    """The rows whose `delta_us` has the excess's sign and at least `NOTABLE` of its size."""
    same_sign = pl.col("delta_us") * excess_us > 0
    return frame.filter(same_sign & (pl.col("delta_us").abs() >= NOTABLE * abs(excess_us)))


def _class_phrase(found: SlowRank) -> str:
    """'by class: embedding +25.43 ms, other +3.90 ms' (the classes that sum to the excess, largest first)."""
    rows = _notable(found.by_class, found.excess_us).iter_rows(named=True)
    parts = [
        f"{row['kernel_class']} {'+' if row['delta_us'] > 0 else '-'}{_ms(abs(row['delta_us']))}"
        for row in rows
    ]
    return f"; by class: {', '.join(parts)}" if parts else ""


def sentence(found: SlowRank) -> str:
    """'Rank 5 computes 10.8 ms more per step than rank 3 (the median rank ...); by class: gemm +9.1 ms, ...;
    by kernel: 9.1 ms in gemm ...; remainder ...'."""
    head = (
        f"Rank {found.rank} computes {_ms(abs(found.excess_us))} "
        f"{'more' if found.excess_us >= 0 else 'less'} "
        "per step "
        f"than rank {found.reference_rank} (the median of the other ranks, {_ms(found.reference_comp_us)})"
    )
    listed = _notable(found.by_kernel, found.excess_us).head(LISTED_KERNELS)
    parts = [_kernel_phrase(row) for row in listed.iter_rows(named=True)]
    kernels = "; by kernel: " + ", ".join(parts) if parts else ""
    tail = f"; remainder {_ms(found.remainder_us)} ({REMAINDER_CAUSES})"
    return head + _class_phrase(found) + kernels + tail + "."
