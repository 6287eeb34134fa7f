"""Expected against measured volume per dimension (docs/metrics.md, "Parallelism dimensions", volumes).

Volume = bus bytes per rank per step, sum of f(n) S over the calls (what a ring puts on each rank's links;
f the bus factor of "Collectives"). The expectation is the least the dimension needs per step, from the seeds'
formulas with the run's own inputs (`VOLUME_RULES`; n the group's size, e its calls' element size):

| dimension | collectives | expected bus bytes per rank per step |
|---|---|---|
| dp | AllReduce | 2(K-1)/K x P_rep x e, P_rep = P / (tp x pp x fsdp) |
| fsdp | AllGather; ReduceScatter | (F-1)/F x P_local x e each, P_local = P / (tp x pp) |
| tp | AllReduce, AllGather, ReduceScatter | 8 (T-1)/T x L_stage x m x A x e |
| pp | Send, Recv, SendRecv | 2 x boundaries x m x A x e |
| ep | AllToAll | 4 (E-1)/E x L_moe x m x A x k x e |
| cp | AllToAll | 8 (C-1)/C x L_stage x m x A x e (Ulysses) |
| cp | Send, Recv, SendRecv | 6 (C-1) x L_stage x m x A x e (ring attention) |

FSDP: every parameter gathered once and every gradient scattered once; TP: 4 all-reduces of A a layer (2
forward, 2 backward); PP: an activation forward and a gradient back per micro-batch per boundary; EP: dispatch
and combine, forward and backward; CP (derived here, the seeds name it without a formula): Ulysses
all-to-alls Q, K, V in and the output back per layer (4, forward; 4 of their gradients, backward), ring
attention passes K and V around its C-1 neighbours per layer forward and K, V and their gradients backward
(A per rank: its share of the sequence; K and V of A each, as multi-head attention; grouped queries move
less).

A = activation elements per micro-batch (tokens per micro-batch x h: stated, else the TP or PP calls' own
size), L_stage = L / pp, m micro-batches, k top-k, boundaries = 2V - [first stage] - [last stage]. The ratio
is the median over (rank, step) of measured / expected (for EP, whose uneven splits give each rank its own
share, the mean measured over the mean expected); `CAUSE_RULES` (`_volume_causes`, first match) says what a
ratio means, and a dimension whose priced calls are mostly latency (k alpha of T_pred, `LATENCY_BOUND`) is
called latency-bound.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import field

import polars as pl

from traceview.core.costmodel import bus_factor_expr
from traceview.core.records import record
from traceview.dimensions._volume_causes import cause_of


@record
class Input:
    """One input of the expected volumes: its value (None: unknown), where it came from, how to give it."""

    name: str
    value: float | None
    source: str
    give: str = ""


@record
class VolumeInputs:
    """The inputs of the formulas, and per rank its pipeline stage (`stages`: rank, stage, stages)."""

    params: Input
    activation: Input
    layers: Input
    micro_batches: Input
    top_k: Input
    moe_layers: Input
    virtual_stages: int = 1
    sizes: dict[str, float] = field(default_factory=dict)  # group size of each named dimension
    stages: pl.DataFrame = field(default_factory=pl.DataFrame)

    def size(self, dimension: str) -> float:
        """The group size of `dimension` in this run (1 when the run has no such dimension)."""
        return self.sizes.get(dimension, 1.0)


@record
class VolumeRule:
    """The expected bus bytes of one dimension's calls of some collectives, per rank per step."""

    dimension: str
    collectives: tuple[str, ...]
    needs: tuple[str, ...]  # VolumeInputs fields
    formula: str
    per_element: Callable[[VolumeInputs], pl.Expr]  # bus elements per rank per step (times e gives bytes)
    statistic: str = "median"  # of measured / expected over (rank, step); "mean": of each, then their ratio


def _ring(n: pl.Expr, factor: float) -> pl.Expr:
    return factor * (n - 1) / n


def _layers_per_stage(i: VolumeInputs) -> float:
    return float(i.layers.value or 0.0) / i.size("pp")


def _boundaries(i: VolumeInputs) -> pl.Expr:
    v = i.virtual_stages
    return (
        2 * v
        - (pl.col("stage") == 0).cast(pl.Float64)
        - (pl.col("stage") == pl.col("stages") - 1).cast(pl.Float64)
    )


VOLUME_RULES: tuple[VolumeRule, ...] = (
    VolumeRule(
        "dp",
        ("AllReduce",),
        ("params",),
        "2(K-1)/K x P_rep x e",
        lambda i: (
            _ring(pl.col("n"), 2) * (i.params.value or 0) / (i.size("tp") * i.size("pp") * i.size("fsdp"))
        ),
    ),
    VolumeRule(
        "fsdp",
        ("AllGather",),
        ("params",),
        "(F-1)/F x P_local x e",
        lambda i: _ring(pl.col("n"), 1) * (i.params.value or 0) / (i.size("tp") * i.size("pp")),
    ),
    VolumeRule(
        "fsdp",
        ("ReduceScatter",),
        ("params",),
        "(F-1)/F x P_local x e",
        lambda i: _ring(pl.col("n"), 1) * (i.params.value or 0) / (i.size("tp") * i.size("pp")),
    ),
    VolumeRule(
        "tp",
        ("AllReduce", "AllGather", "ReduceScatter"),
        ("layers", "activation", "micro_batches"),
        "8(T-1)/T x L_stage x m x A x e",
        lambda i: (
            _ring(pl.col("n"), 8)
            * _layers_per_stage(i)
            * (i.micro_batches.value or 0)
            * (i.activation.value or 0)
        ),
    ),
    VolumeRule(
        "pp",
        ("SendRecv", "Send", "Recv"),
        ("activation", "micro_batches"),
        "2 x boundaries x m x A x e",
        lambda i: 2 * _boundaries(i) * (i.micro_batches.value or 0) * (i.activation.value or 0),
    ),
    VolumeRule(
        "ep",
        ("AllToAll",),
        ("layers", "activation", "micro_batches", "top_k"),
        "4(E-1)/E x L_moe x m x A x k x e",
        lambda i: (
            _ring(pl.col("n"), 4)
            * (float(i.moe_layers.value or i.layers.value or 0) / i.size("pp"))
            * (i.micro_batches.value or 0)
            * (i.activation.value or 0)
            * (i.top_k.value or 0)
        ),
        "mean",
    ),
    VolumeRule(  # Ulysses: Q, K, V in and the output back per layer, forward and backward
        "cp",
        ("AllToAll",),
        ("layers", "activation", "micro_batches"),
        "8(C-1)/C x L_stage x m x A x e (Ulysses)",
        lambda i: (
            _ring(pl.col("n"), 8)
            * _layers_per_stage(i)
            * (i.micro_batches.value or 0)
            * (i.activation.value or 0)
        ),
    ),
    VolumeRule(  # ring attention: K and V around the ring forward; K, V and their gradients backward
        "cp",
        ("SendRecv", "Send", "Recv"),
        ("layers", "activation", "micro_batches"),
        "6(C-1) x L_stage x m x A x e (ring attention)",
        lambda i: (
            6
            * (pl.col("n") - 1)
            * _layers_per_stage(i)
            * (i.micro_batches.value or 0)
            * (i.activation.value or 0)
        ),
    ),
)
"""One row per (dimension, collectives) the seeds price (module docstring), and context parallelism's two
schemes (derived here: the seeds name them without a formula)."""


def _measured(calls: pl.LazyFrame, rule: VolumeRule) -> pl.LazyFrame:
    """Per (rank, step) of the rule's dimension: bus bytes and calls of its collectives, n and e."""
    mine = calls.filter(
        (pl.col("dimension") == rule.dimension) & pl.col("collective").is_in(list(rule.collectives))
    )
    bus = bus_factor_expr(pl.col("collective"), pl.col("group_size")).fill_null(1.0) * pl.col("size_bytes")
    sized = pl.col("size_bytes").is_null().sum() == 0
    return mine.group_by("rank", "step").agg(
        pl.when(sized).then(bus.sum()).alias("measured"),
        pl.col("size_bytes").is_null().sum().alias("unsized"),
        pl.len().alias("calls"),
        pl.col("size_bytes").median().alias("call_bytes"),
        pl.col("group_size").median().cast(pl.Float64).alias("n"),
        pl.col("elem_size").median().cast(pl.Float64).alias("e"),
    )


def measured_volumes(calls: pl.DataFrame, rules: Sequence[VolumeRule]) -> list[pl.DataFrame]:
    """Each rule's per-(rank, step) volume of `calls` (`_measured`), every rule in one query."""
    return pl.collect_all([_measured(calls.lazy(), rule) for rule in rules])


def rule_row(measured: pl.DataFrame, rule: VolumeRule, inputs: VolumeInputs) -> dict[str, object] | None:
    """The rule's row from its `measured_volumes`: medians of calls, call size, measured and expected volume,
    their ratio, what it lacks."""
    if measured.height == 0:
        return None
    missing = [getattr(inputs, name) for name in rule.needs if getattr(inputs, name).value is None]
    if rule.dimension == "pp" and inputs.stages.height == 0:
        missing.append(Input("stages", None, "default", "the pipeline group's ranks (its order of stages)"))
    frame = measured.join(inputs.stages, on="rank", how="left") if inputs.stages.height else measured
    expected = None if missing else rule.per_element(inputs) * pl.col("e")
    unsized = int(measured.get_column("unsized").sum())
    if unsized:  # the measured volume is unknown, never zero
        give = f"the trace records no size for {unsized} of these calls (their bytes are unknown, not zero)"
        missing.append(Input("S", None, "trace", give))
    table = frame.with_columns(
        (expected if expected is not None else pl.lit(None, pl.Float64)).alias("expected")
    )
    table = table.with_columns(
        pl.when(pl.col("expected") > 0).then(pl.col("measured") / pl.col("expected")).alias("ratio")
    )
    medians = table.select(pl.col("calls", "call_bytes", "measured", "expected", "ratio").median()).row(
        0, named=True
    )
    if rule.statistic == "mean" and expected is not None:  # uneven splits: each rank moves its own share
        means = table.select(pl.col("measured", "expected").mean()).row(0, named=True)
        ratio = means["measured"] / means["expected"] if means["expected"] else None
        medians |= {"measured": means["measured"], "expected": means["expected"], "ratio": ratio}
    return {
        "dimension": rule.dimension,
        "collectives": ", ".join(rule.collectives),
        "formula": rule.formula,
        "calls_per_step": medians["calls"],
        "median_call_bytes": medians["call_bytes"],
        "measured_bus_bytes": medians["measured"],
        "expected_bus_bytes": medians["expected"],
        "ratio": medians["ratio"],
        "inputs": "; ".join(
            f"{i.name} = {i.value:.6g} ({i.source})"
            for i in (getattr(inputs, n) for n in rule.needs)
            if i.value is not None
        ),
        "missing": "; ".join(f"{i.name}: {i.give}" for i in missing) or None,
    }


def volume_table(calls: pl.DataFrame, inputs: VolumeInputs, latency: dict[str, float | None]) -> pl.DataFrame:
    """One row per rule whose dimension made such calls: figures, ratio and cause (`calls`: calls with their
    `dimension`, `collective`, `size_bytes`, `group_size`, `elem_size`, `rank`, `step`)."""
    measured = measured_volumes(calls, VOLUME_RULES)
    rows = [
        row
        for rule, found in zip(VOLUME_RULES, measured, strict=True)
        if (row := rule_row(found, rule, inputs)) is not None
    ]
    for row in rows:
        row["cause"] = cause_of(row, latency.get(str(row["dimension"])))
    schema = {
        "dimension": pl.Utf8,
        "collectives": pl.Utf8,
        "formula": pl.Utf8,
        "calls_per_step": pl.Float64,
        "median_call_bytes": pl.Float64,
        "measured_bus_bytes": pl.Float64,
        "expected_bus_bytes": pl.Float64,
        "ratio": pl.Float64,
        "inputs": pl.Utf8,
        "missing": pl.Utf8,
        "cause": pl.Utf8,
    }
    return pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)
