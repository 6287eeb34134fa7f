"""The replay of the run's own step skeletons (docs/metrics.md, "Replay"): `as_recorded` and its error, then
one replay per lever with its predicted median step, gamma and the time it saves.

Per lever the engine (`traceview.replay.engine`) replays every (rank, step) together; the step of a rank is
its replayed end less its window start; the lever's `step_us` is the median over (rank, step). Its gamma per
(rank, step) is T_comm x (its time inside collectives over `as_recorded`'s: transfers and waits) / (T_comp /
the compute factor), median over (rank, step): `as_recorded` gives the measured gamma back. `saved_us` is
`as_recorded`'s median step less the lever's, so the replay's own error cancels.
"""

from __future__ import annotations

from dataclasses import replace

import polars as pl

from traceview.across_ranks.analysis import CrossRank
from traceview.budget.time_budget import TimeBudget
from traceview.core.records import record
from traceview.prediction.gamma import Prediction
from traceview.replay.engine import LANE, VARIANT, levels, run, stacked, variant_columns
from traceview.replay.levers import Recorded, Variant, default_levers, variant
from traceview.replay.skeleton import first_claims, repeated_ranks, skeleton

LEVER_SCHEMA = {
    "lever": pl.Utf8,
    "step_us": pl.Float64,
    "gamma": pl.Float64,
    "saved_us": pl.Float64,
    "notes": pl.Utf8,
}


@record
class Replay:
    """`levers`: one row per lever (lever, step_us, gamma, saved_us, notes; null figures and the reason in
    notes where it cannot be replayed). `errors`: per step, the recorded and the `as_recorded` median step
    and their relative error. `error_median`, `error_worst` (|relative error|) and `worst_step`.
    `skeleton`: one row per (rank, step, collective). `steps`: each replayed lever's step per (lever, rank,
    step) (`step_us`). `sentence`: the finding in words."""

    levers: pl.DataFrame
    errors: pl.DataFrame
    error_median: float | None
    error_worst: float | None
    worst_step: int | None
    skeleton: pl.DataFrame
    steps: pl.DataFrame
    sentence: str

    def lever(self, name: str) -> dict[str, object] | None:
        """The row of lever `name`, None when it was not replayed."""
        rows = self.levers.filter(pl.col("lever") == name)
        return rows.row(0, named=True) if rows.height else None


def _changed(length: str, compute: str, host: str, change: Variant) -> pl.Expr:
    """A segment (or tail) `length` under `change`: its compute part divided by the compute factor, its host
    part times the host factor, the rest (communication of collectives outside the skeleton on the path)
    kept; a negative one (concurrent collectives) as it is."""
    rest = pl.col(length) - pl.col(compute) - pl.col(host)
    positive = pl.col(compute) / change.compute_factor + pl.col(host) * change.host_factor + rest
    return pl.when(pl.col(length) < 0).then(pl.col(length)).otherwise(positive).alias(length)


BODY = ("step", "instance", "rank", "order", "anchor")
"""The skeleton's columns the engine reads beside each variant's segments and transfers."""


def _variant(found: Recorded, change: Variant, number: int) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """The skeleton's (body, tails) under `change`, numbered `number` (`traceview.replay.engine.VARIANT`)."""
    body = (change.frame if change.frame is not None else found.body).lazy()
    segments = body.select(
        *BODY,
        _changed("segment_us", "compute_us", "host_us", change),
        change.transfer.alias("transfer_us"),
    )
    tails = found.tails.lazy().select(
        "step",
        "rank",
        "start_us",
        _changed("tail_us", "tail_compute_us", "tail_host_us", change),
        *(pl.col(column) / change.compute_factor for column in LANE),
    )
    return variant_columns(segments, tails, change.late, change.overlap, number)


VARIANT_ROWS = 1 << 17
"""At most this many member rows are replayed in one engine run: the changes of a small run share its
queries, those of a large one go a few at a time (the engine's frames grow with its rows: on 1,024 ranks of
the 8-rank sample, 49,152 rows a lever, all 8 levers at once peaked 150 MiB above 2 at a time, for the same
CPU; benchmarks/reduce_scale.py)."""


def _replayed(found: Recorded, changes: list[Variant], order: pl.DataFrame) -> list[pl.DataFrame]:
    """Per change, per (rank, step): the replayed step and the time inside collectives (as many changes
    replayed at once as `VARIANT_ROWS` allows)."""
    at_once = max(1, VARIANT_ROWS // max(1, found.body.height))
    replayed: list[pl.DataFrame] = []
    for first in range(0, len(changes), at_once):
        numbered = list(enumerate(changes[first : first + at_once]))
        chain = stacked([_variant(found, change, number) for number, change in numbered])
        ends = run(chain, order).join(found.tails.select("rank", "step", "start_us"), on=["rank", "step"])
        steps = ends.select(
            VARIANT, "rank", "step", (pl.col("end_us") - pl.col("start_us")).alias("step_us"), "comm_chain_us"
        ).partition_by(VARIANT, as_dict=True, include_key=False)
        replayed += [steps.get((number,), _NO_STEPS) for number, _ in numbered]
    return replayed


_NO_STEPS = pl.DataFrame(
    schema={"rank": pl.Int64, "step": pl.Int64, "step_us": pl.Float64, "comm_chain_us": pl.Float64}
)


def _lever_figures(
    replayed: list[tuple[pl.DataFrame, Variant]], baseline: pl.DataFrame, budget: pl.DataFrame
) -> list[tuple[float | None, float | None]]:
    """Per replayed lever (its steps, its change): the median replayed step and the median gamma over (rank,
    step), every lever in the same two queries."""
    if not replayed:
        return []
    stacked = pl.concat(
        [
            ends.lazy().with_columns(
                pl.lit(n).alias("_lever"), pl.lit(1 / change.compute_factor).alias("_per_factor")
            )
            for n, (ends, change) in enumerate(replayed)
        ]
    )
    joined = stacked.join(
        baseline.lazy().select("rank", "step", pl.col("comm_chain_us").alias("_base")), on=["rank", "step"]
    ).join(budget.lazy().select("rank", "step", "comm_us", "comp_us"), on=["rank", "step"], how="left")
    comp = pl.col("comp_us") * pl.col("_per_factor")  # T_comp / the factor, as polars divides by a constant
    scale = pl.when(pl.col("_base") > 0).then(pl.col("comm_chain_us") / pl.col("_base")).otherwise(1.0)
    gamma = pl.when(comp > 0).then(pl.col("comm_us") * scale / comp)
    steps, gammas = pl.collect_all(
        [
            stacked.group_by("_lever").agg(pl.col("step_us").median()),
            joined.group_by("_lever").agg(gamma.median().alias("gamma")),
        ]
    )
    step_of, gamma_of = dict(steps.iter_rows()), dict(gammas.iter_rows())
    return [(step_of.get(n), gamma_of.get(n)) for n in range(len(replayed))]


def _row(
    lever: str, figures: tuple[float | None, float | None], base: float | None, notes: str
) -> dict[str, object]:
    step, gamma = figures
    saved = None if step is None or base is None else base - step
    return {"lever": lever, "step_us": step, "gamma": gamma, "saved_us": saved, "notes": notes}


def _errors(baseline: pl.DataFrame, tails: pl.DataFrame) -> pl.DataFrame:
    """Per step: the recorded and the replayed median step over ranks, and the relative error."""
    recorded = tails.group_by("step").agg(pl.col("step_us").median().alias("recorded_us"))
    replayed = baseline.group_by("step").agg(pl.col("step_us").median().alias("replayed_us"))
    return (
        recorded.join(replayed, on="step")
        .with_columns(
            ((pl.col("replayed_us") - pl.col("recorded_us")) / pl.col("recorded_us")).alias("error")
        )
        .sort("step")
    )


def replay_run(
    crossrank: CrossRank | None,
    kernels: pl.DataFrame,
    budget: TimeBudget,
    prediction: Prediction | None,
    world: int,
    levers: tuple[str, ...] = (),
    path: tuple[pl.DataFrame, pl.DataFrame] | None = None,
) -> Replay | None:
    """The replay of the run (module docstring); None when no collective was matched on two ranks or more.
    `path`: the map's open nodes and the critical path's `per_step`, which split the segments (the
    skeleton's share c without them)."""
    if crossrank is None or crossrank.usable_instances == 0:
        return None
    nodes, path_steps = path if path is not None else (None, None)
    per_step = first_claims(budget.per_step, "rank", "step")
    body, tails = skeleton(crossrank.calls, per_step, kernels, nodes, path_steps)
    if body.height == 0:
        return None
    found = Recorded(body, tails, crossrank.stragglers, prediction, world)
    baseline_change = variant(found, "as_recorded")
    assert isinstance(baseline_change, Variant)
    pairs = [(lever, variant(found, lever)) for lever in levers or default_levers(world)]
    ran = [(lever, change) for lever, change in pairs if isinstance(change, Variant)]
    others = [change for lever, change in ran if lever != "as_recorded"]
    baseline, *replayed = _replayed(found, [baseline_change, *others], levels(body))
    later = iter(replayed)
    ends = [(baseline if lever == "as_recorded" else next(later), change) for lever, change in ran]
    figures = iter(_lever_figures(ends, baseline, per_step))  # in the order of `ran`
    base = baseline.select(pl.col("step_us").median()).item()
    rows = [
        _row(lever, next(figures), base, change.notes)
        if isinstance(change, Variant)
        else _row(lever, (None, None), None, change)
        for lever, change in pairs
    ]
    steps = [
        frame.select(pl.lit(lever).alias("lever"), "rank", "step", "step_us")
        for (lever, _), (frame, _) in zip(ran, ends, strict=True)
    ]
    errors = _errors(baseline, tails)
    found_replay = _result(pl.DataFrame(rows, schema=LEVER_SCHEMA), errors, body, _steps(steps))
    return _with_repeats(found_replay, repeated_ranks(budget.per_step))


def _with_repeats(found: Replay, ranks: list[int]) -> Replay:
    """The replay saying which ranks the input names twice, whose first rows alone it replayed."""
    if not ranks:
        return found
    named = ", ".join(str(rank) for rank in ranks[:8]) + (
        f" and {len(ranks) - 8} more" if len(ranks) > 8 else ""
    )
    note = (
        f"Rank(s) {named} appear twice in the input (two summaries of one rank): the replay keeps the first "
        "one's steps and calls, as the loader keeps a rank's first file."
    )
    return replace(found, sentence=f"{found.sentence} {note}")


def _steps(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """The replayed steps of every lever (none: an empty frame)."""
    schema = {"lever": pl.Utf8, "rank": pl.Int64, "step": pl.Int64, "step_us": pl.Float64}
    return pl.concat([frame.cast(schema) for frame in frames]) if frames else pl.DataFrame(schema=schema)  # type: ignore[arg-type]


def _result(levers: pl.DataFrame, errors: pl.DataFrame, body: pl.DataFrame, steps: pl.DataFrame) -> Replay:
    size = errors.with_columns(pl.col("error").abs().alias("_abs"))
    worst = size.sort("_abs", descending=True, nulls_last=True).head(1)
    median = size.get_column("_abs").median()
    worst_error = worst.get_column("_abs").item() if worst.height else None
    worst_step = worst.get_column("step").item() if worst.height else None
    return Replay(
        levers=levers,
        errors=errors,
        error_median=None if median is None else float(median),  # type: ignore[arg-type]
        error_worst=worst_error,
        worst_step=worst_step,
        skeleton=body,
        steps=steps,
        sentence=_sentence(levers, median, worst_error, worst_step),
    )


def _sentence(levers: pl.DataFrame, median: object, worst: float | None, step: int | None) -> str:
    if median is None:
        return "The replay reproduced no step."
    found = levers.filter(pl.col("saved_us").is_not_null() & (pl.col("lever") != "as_recorded"))
    best = found.sort("saved_us", descending=True).head(1)
    within = float(median)  # type: ignore[arg-type]
    lead = (
        f"The replay of the run's own skeletons reproduces its median step within {within:.1%} (median over "
        f"steps; worst {worst:.1%}, step {step})."
    )
    if best.height == 0:
        return lead
    row = best.row(0, named=True)
    return f"{lead} The largest lever: {row['lever']}, saving {row['saved_us'] / 1e3:.3g} ms per median step."
