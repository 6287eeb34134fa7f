"""What-ifs from the same alpha-beta model (docs/metrics.md, "Predicted gamma"; docs/metrics.md, "Predicted
gamma"): gamma at twice the local batch, on the next interconnect, and the
strong-scaling curve of gamma against the worker count K at the run's global batch (the gamma model's
figure, section 4.1).

Every scenario re-prices the calls of one representative (rank, step) (the lower median of gamma_pred):
the data-parallel group's calls (`ModelInputs.grad_group`) get n = K and span nodes when K exceeds the GPUs
per node; other groups keep theirs. Strong scaling at a fixed global batch divides each worker's compute by
the worker factor; a larger local batch multiplies it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import polars as pl

from traceview.core.hardware import GpuSpec, table
from traceview.core.records import record
from traceview.prediction.closed_form import break_even_workers, gamma_closed_form
from traceview.prediction.inputs import Link, ModelInputs
from traceview.prediction.pricing import price, spans_nodes

WORKER_COUNTS = tuple(2**power for power in range(1, 13))
"""K of the strong-scaling curve: 2 to 4096 (the run's own K is added)."""

NEXT_LINK = {
    "pcie_gen3": "pcie_gen4",
    "pcie_gen4": "pcie_gen5",
    "ib_hdr": "ib_ndr",
    "ib_ndr": "ib_xdr",
    "roce_100": "roce_200",
    "roce_200": "roce_400",
    "eth_100g": "eth_200g",
    "eth_200g": "eth_400g",
    "tcp_socket": "eth_100g",
}
"""The next generation of a table link; a scale-up link's next is the same vendor's next faster one."""


@record
class WhatIf:
    """`table`: scenario, detail, gamma_pred, vs_now (ratio to now). `curve`: K, local_batch_factor,
    spans_nodes, gamma_pred. `closed_form_gamma`: the gamma model's 2(K-1)/K g R / (6 b B) when b, R, B, g
    known; `break_even_workers`: the K at which that closed form reaches 1 at the run's global batch
    (strong scaling), 1 + 3 G B / (g R) with G = K b."""

    rank: int
    step: int
    workers: int
    table: pl.DataFrame
    curve: pl.DataFrame
    closed_form_gamma: float | None
    break_even_workers: float | None = None


def representative_step(per_step: pl.DataFrame) -> tuple[int, int] | None:
    """(rank, step) of the lower median gamma_pred, None when no step has one."""
    known = per_step.filter(pl.col("gamma_pred").is_not_null()).sort("gamma_pred", "rank", "step")
    if known.height == 0:
        return None
    row = known.row((known.height - 1) // 2, named=True)
    return int(row["rank"]), int(row["step"])


def gamma_at(
    calls: pl.DataFrame,
    inputs: ModelInputs,
    comp_pred_us: float,
    workers_factor: float = 1.0,
    batch_factor: float = 1.0,
) -> float | None:
    """gamma_pred of `calls` (one step) with the data-parallel group `workers_factor` times larger at a
    fixed global batch, the local batch `batch_factor` times larger, on `inputs`' links."""
    return gammas_at(calls, inputs, comp_pred_us, [(workers_factor, batch_factor)])[0]


def gammas_at(
    calls: pl.DataFrame,
    inputs: ModelInputs,
    comp_pred_us: float,
    scenarios: Sequence[tuple[float, float]],
) -> list[float | None]:
    """`gamma_at` of each (workers_factor, batch_factor) of `scenarios`, the calls priced once per distinct
    workers factor (the local batch changes T_comp only; the table's "now" and "2x local batch" are the
    curve's K = workers)."""
    spanned = calls.with_columns(spans_nodes(inputs.ranks_per_node).alias("_spans"))
    comm = {factor: _comm_us(spanned, inputs, factor) for factor in dict.fromkeys(w for w, _ in scenarios)}
    gammas: list[float | None] = []
    for workers_factor, batch_factor in scenarios:
        comp = comp_pred_us * batch_factor / workers_factor
        gammas.append(float(comm[workers_factor] / comp) if comp > 0 else None)
    return gammas


def _comm_us(calls: pl.DataFrame, inputs: ModelInputs, factor: float) -> float:
    """Sum of T_pred of `calls` (with `_spans`, whether each spans nodes as traced) with the data-parallel
    group (`ModelInputs.grad_group`) `factor` times larger: n = round(n * factor), spanning nodes past a
    node's ranks. Priced on a frame of its own: the scenarios stacked in one frame would differ in the last
    bit (polars divides a column of one value by its reciprocal, a mixed column exactly), so each distinct
    factor is one query. No calls cost nothing: the sum of none, 0, without a query."""
    if calls.height == 0:
        return 0.0
    data_parallel = pl.col("pg_key") == (inputs.grad_group or "")
    size = (pl.col("group_size") * factor).round(0).cast(pl.Int64)
    changed = data_parallel & pl.lit(factor != 1.0)
    frame = calls.with_columns(
        pl.when(changed).then(size > inputs.ranks_per_node).otherwise(pl.col("_spans")).alias("spans_nodes"),
        pl.when(changed).then(size).otherwise(pl.col("group_size")).alias("group_size"),
    )
    return float(price(frame.drop("_spans"), inputs)["t_pred_us"].sum())


def _next_scale_up(gpu: GpuSpec | None, current: Link) -> Link | None:
    if gpu is None:
        return None
    faster = [
        other
        for other in table().gpus.values()
        if other.vendor == gpu.vendor
        and other.scale_up
        and (other.scale_up_uni_bytes_per_s or 0) > current.bandwidth_Bps
    ]
    if not faster:
        return None
    best = min(faster, key=lambda other: other.scale_up_uni_bytes_per_s or 0)
    name = f"{best.scale_up} (as on {best.name})"
    return Link(
        "intra",
        name,
        best.scale_up_uni_bytes_per_s or 0,
        best.intra_node_alpha_s,
        "hardware table",
        "hardware table",
        best.source,
    )


def next_link(inputs: ModelInputs, scope: str) -> Link | None:
    """The next interconnect of `scope` ("intra" or "inter"), None when the table knows none."""
    current = inputs.intra if scope == "intra" else inputs.inter
    if current is None:
        return None
    following = NEXT_LINK.get(current.key)
    if following is not None:
        spec = table().links[following]
        return Link(
            scope,
            spec.name,
            spec.bandwidth_bytes_per_s,
            spec.alpha_s,
            "hardware table",
            "hardware table",
            spec.source,
            spec.key,
        )
    return (
        _next_scale_up(inputs.gpu, current)
        if scope == "intra" and current.key.endswith(".scale_up")
        else None
    )


def _busiest_scope(priced: pl.DataFrame) -> str:
    inter = priced.filter(pl.col("spans_nodes").fill_null(False))["t_pred_us"].sum()
    intra = priced.filter(~pl.col("spans_nodes").fill_null(False))["t_pred_us"].sum()
    return "inter" if inter > intra else "intra"


TABLE_SCENARIOS = (
    ("now", "the run as traced", 1.0, 1.0),
    ("2x local batch", "twice the local batch (T_comp doubles, the gradient bytes do not change)", 1.0, 2.0),
)
"""The table's scenarios on the run's own links: name, detail, workers factor, local batch factor (twice the
workers is the replay's ranks:2K lever, and `curve`)."""


def _rows(
    gammas: Sequence[float | None],
    priced: pl.DataFrame,
    calls: pl.DataFrame,
    inputs: ModelInputs,
    comp: float,
) -> list[dict[str, object]]:
    """The table's rows: `gammas` of `TABLE_SCENARIOS`, then the next interconnect of the busiest scope."""
    rows = [
        (name, detail, gamma) for (name, detail, _, _), gamma in zip(TABLE_SCENARIOS, gammas, strict=True)
    ]
    scope = _busiest_scope(priced)
    upgrade = next_link(inputs, scope)
    if upgrade is not None:
        faster = replace(inputs, intra=upgrade) if scope == "intra" else replace(inputs, inter=upgrade)
        detail = f"{upgrade.name} ({upgrade.bandwidth_Bps / 1e9:.4g} GB/s per GPU)"
        rows.append(("next interconnect", detail, gamma_at(calls, faster, comp)))
    now = gammas[0]
    return [
        {"scenario": s, "detail": d, "gamma_pred": g, "vs_now": (g / now if g is not None and now else None)}
        for s, d, g in rows
    ]


def what_if(priced: pl.DataFrame, per_step: pl.DataFrame, inputs: ModelInputs) -> WhatIf | None:
    """The what-if table and the strong-scaling curve, None when no step has a predicted gamma. The table's
    scenarios on the run's links and the curve are priced in one query (`gammas_at`)."""
    chosen = representative_step(per_step)
    if chosen is None:
        return None
    rank, step = chosen
    chosen_calls = priced.filter((pl.col("rank") == rank) & (pl.col("step") == step))
    calls = chosen_calls.drop("spans_nodes")
    comp = float(per_step.filter((pl.col("rank") == rank) & (pl.col("step") == step))["comp_pred_us"][0])
    workers = inputs.workers or 1
    counts = sorted({*WORKER_COUNTS, workers})
    table_scenarios = [(w, b) for _, _, w, b in TABLE_SCENARIOS]
    gammas = gammas_at(calls, inputs, comp, [*table_scenarios, *((k / workers, 1.0) for k in counts)])
    curve = pl.DataFrame(
        {"K": counts, "gamma_pred": gammas[len(table_scenarios) :]},
        schema={"K": pl.Int64, "gamma_pred": pl.Float64},
    ).with_columns((pl.col("K") > inputs.ranks_per_node).alias("spans_nodes"))
    table_rows = pl.DataFrame(_rows(gammas[: len(table_scenarios)], chosen_calls, calls, inputs, comp))
    return WhatIf(rank, step, workers, table_rows, curve, *closed_form(inputs))


def closed_form(inputs: ModelInputs) -> tuple[float | None, float | None]:
    """The data-parallel closed form 2(K-1)/K * g * R / (6 b B) for the run's K, g, b, R and the B of its
    data- parallel group (intra-node when K fits a node), and the K at which it reaches 1 at the run's
    global batch; (None, None) when any input is unknown."""
    link = inputs.intra if (inputs.workers or 0) <= inputs.ranks_per_node else inputs.inter
    rate, values = inputs.sustained_flops, (inputs.workers, inputs.grad_bytes_per_param, inputs.local_batch)
    if rate is None or link is None or any(v is None for v in values) or (inputs.workers or 0) < 2:
        return None, None
    workers, grad, batch = inputs.workers or 0, inputs.grad_bytes_per_param or 0, inputs.local_batch or 0
    gamma = gamma_closed_form(workers, grad, rate, batch, link.bandwidth_Bps)
    return gamma, break_even_workers(workers * batch, grad, rate, link.bandwidth_Bps)
