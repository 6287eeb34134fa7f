"""Predicted gamma from the alpha-beta model against the measured one, the gap explained factor by factor
(docs/metrics.md, "Predicted gamma"; docs/metrics.md, "Predicted gamma").

Each collective call is priced T_pred = k(n) * alpha + f(n) * S / B (`costmodel.collective_time_expr`) with
B and alpha of the links its group spans; a step's T_comm_pred is the sum over its calls and T_comp_pred =
FLOPs / R. Per (rank, step) and pooled over the run (sums of every (rank, step)), exactly:

    gamma / gamma_pred = waiting x latency / bandwidth_eff x compute_eff x residual

with D the summed durations of the step's calls (D_priced: of the priced ones; D_bw: of those the model calls
bandwidth-bound, f S / B >= k alpha), T_bw the model's T_pred of the bandwidth-bound calls and T_transfer the
cross-rank transfer time: waiting = D / T_transfer (1 when not measured); bandwidth_eff = T_bw * waiting /
D_bw (achieved busbw / B, exactly so for alpha = 0); latency = (D_priced / D_bw) / (T_comm_pred / T_bw);
compute_eff = T_comp_pred / T_comp (achieved FLOP/s / R); residual = T_comm / D_priced (communication kernels
overlapping each other, calls the model cannot price).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import polars as pl

from traceview.across_ranks.analysis import CrossRank
from traceview.budget.time_budget import TimeBudget
from traceview.core.records import record
from traceview.model.trace import Run
from traceview.prediction.inputs import ModelInputs, ModelOptions, resolve_inputs
from traceview.prediction.pricing import price
from traceview.prediction.step_calls import step_calls
from traceview.prediction.topology import resolve_topology, run_facts
from traceview.prediction.trace_facts import with_group_sizes
from traceview.prediction.trust import Trust, trust
from traceview.prediction.whatif import WhatIf, what_if

FACTORS: tuple[tuple[str, str, int], ...] = (
    # (column, name in the sentence, exponent in the identity)
    ("waiting", "waiting on peers (T_comm / T_transfer)", 1),
    ("latency", "latency of small messages", 1),
    ("bandwidth_eff", "bandwidth efficiency (achieved busbw / B)", -1),
    ("compute_eff", "compute efficiency (achieved FLOP/s / R)", 1),
    ("residual", "residual (concurrent or unpriced communication)", 1),
)
"""The factors of gamma / gamma_pred: effect on the ratio = value ** exponent."""

AGREEMENT = 1.05
"""Below this effect (either way) no factor is called dominant: the model and the measurement agree."""

SUMS = (
    "comm_us",
    "comp_us",
    "d_all_us",
    "d_priced_us",
    "d_bw_us",
    "t_pred_us",
    "t_bw_us",
    "transfer_us",
    "comp_pred_us",
)


@record
class Prediction:
    """The prediction of a run. `calls`: every priced call; `per_step`: per (rank, step) measured and
    predicted figures and factors; `per_collective`: per (collective, group, n, link); `run`: pooled
    figures, factors and headline medians; `dominant`: the factor column with the largest effect (None when
    no call was priced or the model and the measurement agree, `gap_factor`); `trust`: the input it lacks,
    whether its links are known, the inputs from defaults, its caveats (`traceview.prediction.trust`)."""

    inputs: ModelInputs
    calls: pl.DataFrame
    per_step: pl.DataFrame
    per_collective: pl.DataFrame
    run: dict[str, float | None]
    waiting_measured: bool
    dominant: str | None
    sentence: str
    what_if: WhatIf | None = None
    trust: Trust | None = None

    @property
    def missing_input(self) -> str | None:
        """One line naming what gamma_pred lacks; None when it was computed."""
        return self.trust.missing_input if self.trust else None

    @property
    def link_known(self) -> bool:
        """Whether every priced call's B is stated or read from an NCCL log (not assumed)."""
        return self.trust.link_known if self.trust else False

    @property
    def factors(self) -> list[tuple[str, str, float | None, float | None]]:
        """(column, name, run value, effect on gamma / gamma_pred) of every factor, in `FACTORS` order."""
        return [
            (column, name, self.run.get(column), _effect(self.run, column)) for column, name, _ in FACTORS
        ]

    def gate_figures(self) -> dict[str, float | None]:
        """Figures `--fail-on` can name: `gamma_pred` and `gamma_ratio` (measured / predicted, pooled)."""
        return {"gamma_pred": self.run.get("gamma_pred"), "gamma_ratio": self.run.get("gamma_ratio")}


def _call_sums() -> list[pl.Expr]:
    priced, bw = pl.col("t_pred_us").is_not_null(), pl.col("bw_bound").fill_null(False)
    return [
        pl.col("dur_us").sum().alias("d_all_us"),
        pl.col("dur_us").filter(priced).sum().alias("d_priced_us"),
        pl.col("dur_us").filter(bw).sum().alias("d_bw_us"),
        pl.col("t_pred_us").sum().alias("t_pred_us"),
        pl.col("t_pred_us").filter(bw).sum().alias("t_bw_us"),
        pl.len().cast(pl.Int64).alias("calls"),
        priced.sum().cast(pl.Int64).alias("priced_calls"),
    ]


def _ratio(numerator: pl.Expr, denominator: pl.Expr) -> pl.Expr:
    return pl.when(denominator > 0).then(numerator / denominator)


def factor_exprs(waiting_measured: bool) -> list[pl.Expr]:
    """gamma, gamma_pred, their ratio and the factors of the identity from the summed columns of `SUMS`;
    gamma_pred is null where there are calls but none could be priced."""
    waiting = _ratio(pl.col("d_all_us"), pl.col("transfer_us")) if waiting_measured else pl.lit(1.0)
    has_bw = pl.col("d_bw_us") > 0
    return [
        _ratio(pl.col("comm_us"), pl.col("comp_us")).alias("gamma"),
        pl.when((pl.col("t_pred_us") > 0) | (pl.col("d_all_us") == 0))
        .then(_ratio(pl.col("t_pred_us"), pl.col("comp_pred_us")))
        .alias("gamma_pred"),
        _ratio(pl.col("t_pred_us"), pl.col("comp_us")).alias("gamma_comm_model"),
        _ratio(pl.col("comm_us"), pl.col("t_pred_us")).alias("comm_ratio"),
        waiting.alias("waiting"),
        pl.when(has_bw).then(_ratio(pl.col("t_bw_us") * waiting, pl.col("d_bw_us"))).alias("bandwidth_eff"),
        pl.when(has_bw)
        .then(
            _ratio(pl.col("d_priced_us"), pl.col("d_bw_us")) / _ratio(pl.col("t_pred_us"), pl.col("t_bw_us"))
        )
        .otherwise(_ratio(pl.col("d_priced_us"), waiting * pl.col("t_pred_us")))
        .alias("latency"),
        _ratio(pl.col("comp_pred_us"), pl.col("comp_us")).alias("compute_eff"),
        _ratio(pl.col("comm_us"), pl.col("d_priced_us")).alias("residual"),
    ]


def _with_ratio(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.with_columns(_ratio(pl.col("gamma"), pl.col("gamma_pred")).alias("gamma_ratio"))


def per_step_table(
    priced: pl.DataFrame, budget: TimeBudget, inputs: ModelInputs, waiting_measured: bool
) -> pl.DataFrame:
    """Per (rank, step): measured gamma, exposed and transfer gamma, T_comm_pred, T_comp_pred, gamma_pred and
    the factors (every budget step, also those without calls)."""
    keys = ["rank", "step"]
    sums = priced.group_by(keys).agg(_call_sums())
    steps = budget.per_step.select(
        *keys,
        "comm_us",
        "comp_us",
        "exposed_gamma",
        *[
            pl.col(c) if c in budget.per_step.columns else pl.lit(None, pl.Float64).alias(c)
            for c in ("transfer_us", "transfer_gamma")
        ],
    )
    rate = inputs.sustained_flops
    comp_pred = (pl.col("flops") / rate * 1e6) if rate else pl.lit(None, pl.Float64)
    table = (
        steps.join(sums, on=keys, how="left")
        .join(inputs.flops, on=keys, how="left")
        .with_columns(
            pl.col("d_all_us", "d_priced_us", "d_bw_us", "t_pred_us", "t_bw_us").fill_null(0.0),
            comp_pred.alias("comp_pred_us"),
        )
    )
    return _with_ratio(table.with_columns(factor_exprs(waiting_measured))).sort(keys)


def pooled(per_step: pl.DataFrame, waiting_measured: bool) -> dict[str, float | None]:
    """Run figures: the factors of the pooled sums (identity exact for pooled gammas = sums' ratios) and the
    medians over (rank, step) of measured, exposed, transfer and predicted gamma."""
    complete = (
        per_step.filter(pl.col("comp_pred_us").is_not_null())
        if per_step["comp_pred_us"].is_not_null().any()
        else per_step
    )
    sums = complete.select(pl.col(c).sum() for c in SUMS)
    if per_step["comp_pred_us"].is_null().all():
        sums = sums.with_columns(pl.lit(None, pl.Float64).alias("comp_pred_us"))
    figures = _with_ratio(sums.with_columns(factor_exprs(waiting_measured))).row(0, named=True)
    medians = per_step.select(
        pl.col(c).median().alias(f"median_{c}")
        for c in ("gamma", "exposed_gamma", "transfer_gamma", "gamma_pred", "t_pred_us", "comp_pred_us")
    ).row(0, named=True)
    return {k: (None if v is None else float(v)) for k, v in {**figures, **medians}.items()}


def per_collective_table(priced: pl.DataFrame) -> pl.DataFrame:
    """Per (collective, process group, n, link): calls, summed measured and predicted time, their ratio,
    median S, median achieved busbw and B."""
    keys = ["collective", "pg_key", "group_size", "link"]
    return (
        priced.group_by(keys)
        .agg(
            pl.len().cast(pl.Int64).alias("calls"),
            pl.col("size_bytes").median().alias("median_size_bytes"),
            pl.col("dur_us").sum().alias("measured_us"),
            pl.col("t_pred_us").sum().alias("predicted_us"),
            pl.col("busbw_Bps").median().alias("median_busbw_Bps"),
            pl.col("bandwidth_Bps").first(),
        )
        .with_columns(_ratio(pl.col("measured_us"), pl.col("predicted_us")).alias("ratio"))
        .sort("measured_us", descending=True)
    )


NETWORK_FACTORS = ("waiting", "latency", "bandwidth_eff")
"""The factors a prediction replayed on the run's own graph still has (it keeps the run's compute and its own
T_comm outside collectives, so compute_eff and residual do not enter; docs/metrics.md, "Predicted gamma")."""


def dominant_factor(run: dict[str, float | None], among: tuple[str, ...] | None = None) -> str | None:
    """The factor (of `among`, every one by default) whose effect on gamma / gamma_pred is largest in either
    direction (|log effect|)."""
    effects = {c: run.get(c) for c, _, _ in FACTORS if among is None or c in among}
    sized = {c: abs(math.log(v)) for c, v in effects.items() if v is not None and v > 0}
    return max(sized, key=lambda c: sized[c]) if sized else None


def gap_factor(run: dict[str, float | None], dominant: str | None) -> str | None:
    """`dominant` as the factor the gap is due to: None when no call was priced or every factor is within
    `AGREEMENT` of 1 (the model and the measurement agree: no gap to explain)."""
    if dominant is None or run.get("t_pred_us") in (None, 0.0):
        return None
    effect = _effect(run, dominant) or 1.0
    return dominant if max(effect, 1 / effect) >= AGREEMENT else None


def _effect(run: dict[str, float | None], column: str) -> float | None:
    value = run.get(column)
    exponent = next(e for c, _, e in FACTORS if c == column)
    return None if value is None or value <= 0 else value**exponent


def sentence(
    run: dict[str, float | None], dominant: str | None, waiting_measured: bool, trust: Trust | None = None
) -> str:
    """One sentence: measured against predicted gamma (or what the prediction lacks) and the factor that
    dominates the gap, saying when that factor is measured against an assumed link."""
    lacking = (
        f"No predicted gamma: it needs the {trust.missing_input}. " if trust and trust.missing_input else ""
    )
    if dominant is None or run.get("t_pred_us") in (None, 0.0):
        return (
            lacking.strip()
            or "No collective could be priced by the alpha-beta model, so there is no predicted gamma."
        )
    names = {c: name for c, name, _ in FACTORS}
    effect = _effect(run, dominant) or 1.0
    if max(effect, 1 / effect) < AGREEMENT:
        return (
            f"{lacking}Pooled over the run, the model and the measurement agree: every factor is within "
            f"{AGREEMENT - 1:.0%} of 1."
        )
    if run.get("gamma_pred") is not None and run.get("gamma_ratio") is not None:
        head = (
            f"Pooled over the run, measured gamma {run['gamma']:.3g} is {run['gamma_ratio']:.3g}x the "
            f"predicted {run['gamma_pred']:.3g}"
        )
    else:
        head = f"{lacking}Pooled over the run, measured T_comm is {run['comm_ratio']:.3g}x the predicted"
    unmeasured = (
        ""
        if waiting_measured
        else "; waiting on peers was not measured (no collective matched on two ranks), so part of it may be "
        "waiting"
    )
    assumed = (
        "; B is assumed, not known (nothing in the run states the link), so this factor may be the "
        "assumption's"
        if dominant == "bandwidth_eff" and trust is not None and not trust.link_known
        else ""
    )
    caveat = trust.caveat_of(dominant) if trust is not None else None
    return (
        f"{head}; the largest factor is {names[dominant]} = {run[dominant]:.3g} (x{effect:.3g} on the ratio)"
        f"{assumed}{f'; {caveat}' if caveat else ''}{_opposing(run, dominant, effect)}{unmeasured}."
    )


def _opposing(run: dict[str, float | None], dominant: str, effect: float) -> str:
    """ ", while <factor> (x e) pulls the other way" for the largest factor acting against the
    dominant one."""
    against = [
        (abs(math.log(e)), c, e)
        for c, name, _ in FACTORS
        if c != dominant
        and (e := _effect(run, c)) is not None
        and max(e, 1 / e) >= AGREEMENT
        and (e > 1) != (effect > 1)
    ]
    if not against:
        return ""
    _, column, other = max(against)
    name = next(name for c, name, _ in FACTORS if c == column)
    return f", while {name} = {run[column]:.3g} (x{other:.3g}) pulls the other way"


def predict(
    run: Run,
    kernels: pl.DataFrame,
    windows: pl.DataFrame,
    budget: TimeBudget,
    crossrank: CrossRank | None,
    options: ModelOptions | None = None,
    ranks_per_host: int | None = None,
    nccl_hosts: Mapping[int, str] | None = None,
) -> Prediction:
    """The prediction of a run from its communication kernels (`comm_kernels`), step windows, time budget and
    cross-rank analysis (None: waiting is not measured); `ranks_per_host` a GPUs per node given on the command
    line, `nccl_hosts` the NCCL logs' host of each rank. Always a `Prediction`: when gamma_pred cannot be
    computed, `missing_input` names what it lacks."""
    options = options or ModelOptions()
    worlds = [trace.meta.world_size for trace in run if trace.meta.world_size]
    calls, group_assumption = with_group_sizes(step_calls(kernels, windows), max(worlds) if worlds else None)
    stated = (options.gpus_per_node, options.source_of("gpus_per_node"))
    if stated[0] is None and ranks_per_host:
        stated = (ranks_per_host, "command line")
    facts = run_facts(run, crossrank, nccl_hosts, stated, dict(options.rank_hosts))
    inputs = resolve_inputs(run, calls, options, resolve_topology(facts), group_assumption)
    priced = price(calls, inputs)
    waiting_measured = crossrank is not None and crossrank.usable_instances > 0
    per_step = per_step_table(priced, budget, inputs, waiting_measured)
    figures = pooled(per_step, waiting_measured)
    dominant = dominant_factor(figures)
    found = trust(priced, inputs, figures, waiting_measured)
    return Prediction(
        inputs=inputs,
        calls=priced,
        per_step=per_step,
        per_collective=per_collective_table(priced),
        run=figures,
        waiting_measured=waiting_measured,
        dominant=gap_factor(figures, dominant),
        sentence=sentence(figures, dominant, waiting_measured, found),
        what_if=what_if(priced, per_step, inputs),
        trust=found,
    )
