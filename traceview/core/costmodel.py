"""The alpha-beta cost model of collectives (docs/metrics.md, "Collectives" and "Predicted gamma").

One collective of S bytes over a group of n ranks, on links of latency alpha and bandwidth B, takes

    T_pred = k(n) * alpha + f(n) * S / B

with f(n) the nccl-tests bus factor of docs/metrics.md, "Collectives" and k(n) the number of latency-bound
steps of the algorithm. Both come from one data table, `COLLECTIVE_COSTS`, used by the scalar functions and by
the polars expressions.

The data-parallel closed form built on it is `traceview.prediction.closed_form`.

Units: seconds, bytes, bytes per second, FLOP/s. Everything here is pure: no I/O, no printing.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from typing import Literal

import polars as pl

from traceview.core.errors import UsageError
from traceview.core.records import record

Algorithm = Literal["ring", "tree"]

FLOPS_PER_PARAM_PER_EXAMPLE = 6.0
"""Training FLOPs per parameter per example: 2 forward + 4 backward (the gamma model, docs/metrics.md
"Predicted gamma")."""


@record
class CollectiveCost:
    """The cost coefficients of one collective (one row of the table).

    Bus factor: f(n) = bus_per_peer * (n-1)/n + bus_const.
    Latency steps: ring k(n) = steps_per_peer * (n-1) + steps_const;
    tree k(n) = tree_passes * log2(n) + steps_const, or no tree algorithm when `tree_passes` is None.
    """

    bus_per_peer: float
    bus_const: float
    steps_per_peer: float
    steps_const: float
    tree_passes: float | None


_POINT_TO_POINT = CollectiveCost(0, 1, 0, 1, 0)

COLLECTIVE_COSTS: Mapping[str, CollectiveCost] = {
    # name:          CollectiveCost(bus_per_peer, bus_const, steps_per_peer, steps_const, tree_passes)
    # AllReduce: f = 2(n-1)/n; ring k = 2(n-1) (reduce-scatter then all-gather); tree k = log2 n
    # (docs/metrics.md, "Predicted gamma").
    "AllReduce": CollectiveCost(2, 0, 2, 0, 1),
    "AllGather": CollectiveCost(1, 0, 1, 0, None),
    "ReduceScatter": CollectiveCost(1, 0, 1, 0, None),
    # AllToAll: n-1 pairwise exchanges.
    "AllToAll": CollectiveCost(1, 0, 1, 0, None),
    # Broadcast and Reduce: a pipelined chain of n-1 hops; tree log2 n.
    "Broadcast": CollectiveCost(0, 1, 1, 0, 1),
    "Reduce": CollectiveCost(0, 1, 1, 0, 1),
    # Point to point: one message, whatever the algorithm.
    "SendRecv": _POINT_TO_POINT,
    "Send": _POINT_TO_POINT,
    "Recv": _POINT_TO_POINT,
    # Barrier: moves no bytes, but pays the latency of an all-reduce.
    "Barrier": CollectiveCost(0, 0, 2, 0, 1),
    # Gather and Scatter (not in docs/metrics.md, "Collectives"; nccl-tests' factor (n-1)/n): the root
    # exchanges with n-1 peers.
    "Gather": CollectiveCost(1, 0, 1, 0, None),
    "Scatter": CollectiveCost(1, 0, 1, 0, None),
}
"""f(n) and k(n) of every collective, keyed by the canonical names of docs/metrics.md, "Collectives"."""


def collective_key(name: str) -> str:
    """The lookup key of a collective name: lower case, letters only ("All_Reduce" -> "allreduce")."""
    return re.sub(r"[^a-z]", "", name.lower())


_BY_KEY: Mapping[str, tuple[str, CollectiveCost]] = {
    collective_key(name): (name, cost) for name, cost in COLLECTIVE_COSTS.items()
}


def collective_cost(collective: str) -> CollectiveCost:
    """The table row of `collective` (case and underscores ignored); UsageError when it is not a known one."""
    found = _BY_KEY.get(collective_key(collective))
    if found is None:
        known = ", ".join(COLLECTIVE_COSTS)
        raise UsageError(f"unknown collective {collective!r}: known collectives are {known}")
    return found[1]


def _check_group_size(n: int) -> None:
    if n < 1:
        raise UsageError(f"group size must be at least 1, got {n}")


def bus_factor(collective: str, n: int) -> float:
    """f(n) of docs/metrics.md, "Collectives", with which busbw = algbw * f(n) and the model's bandwidth term
    is f(n) * S / B.

    AllReduce 2(n-1)/n; AllGather, ReduceScatter, AllToAll (n-1)/n; Broadcast, Reduce, SendRecv/Send/Recv 1;
    Barrier 0 (it moves no bytes); Gather and Scatter (n-1)/n as nccl-tests counts them.
    """
    _check_group_size(n)
    cost = collective_cost(collective)
    return cost.bus_per_peer * (n - 1) / n + cost.bus_const


def latency_steps(collective: str, n: int, algorithm: Algorithm = "ring") -> float:
    """k(n): how many times a collective pays the link latency alpha (docs/metrics.md, "Predicted gamma").

    Ring: AllReduce 2(n-1); AllGather, ReduceScatter, AllToAll n-1; Broadcast, Reduce n-1 (a pipelined chain);
    SendRecv 1; Barrier 2(n-1) (an all-reduce of nothing); Gather, Scatter n-1. Tree: log2 n for AllReduce,
    Broadcast, Reduce and Barrier, following docs/metrics.md's "log2 n for trees". A tree all-reduce is a
    reduce up the tree then a broadcast down, which textbooks count as 2*log2 n; NCCL pipelines the two
    phases, and the metrics contract counts one pass. The number of passes is `tree_passes` in
    `COLLECTIVE_COSTS`, one place to change. AllGather, ReduceScatter and AllToAll have no tree algorithm:
    UsageError.
    """
    _check_group_size(n)
    cost = collective_cost(collective)
    if algorithm == "ring":
        return cost.steps_per_peer * (n - 1) + cost.steps_const
    if cost.tree_passes is None:
        raise UsageError(f"collective {collective!r} has no tree algorithm: use algorithm='ring'")
    return cost.tree_passes * math.log2(n) + cost.steps_const


def collective_time_s(
    collective: str,
    n: int,
    size_bytes: float,
    alpha_s: float,
    bandwidth_bytes_per_s: float,
    *,
    algorithm: Algorithm = "ring",
) -> float:
    """T_pred = k(n) * alpha + f(n) * S / B for one collective (docs/metrics.md, "Predicted gamma").

    S is the nccl-tests size of docs/metrics.md, "Collectives" (AllReduce: the buffer; AllGather: the gathered
    output; ReduceScatter: the full input; AllToAll: the full buffer). B is the unidirectional per-GPU
    bandwidth of the links the group spans (the figure nccl-tests busbw is compared with).
    """
    steps = latency_steps(collective, n, algorithm)
    return steps * alpha_s + bus_factor(collective, n) * size_bytes / bandwidth_bytes_per_s


def _coefficient(collective: pl.Expr, table_field: str) -> pl.Expr:
    """Map a column of collective names to one coefficient of the table (null for unknown names). Of a plain
    column, the expression is a constant, built at its first use (`_column_coefficient`)."""
    if collective.meta.is_column():
        return _column_coefficient(collective.meta.output_name(), table_field)
    return _coefficient_of(collective, table_field)


@functools.cache
def _column_coefficient(column: str, table_field: str) -> pl.Expr:
    """`_coefficient` of the column named `column` (polars expressions are immutable: one serves every
    plan)."""
    return _coefficient_of(pl.col(column), table_field)


def _coefficient_of(collective: pl.Expr, table_field: str) -> pl.Expr:
    key = collective.str.to_lowercase().str.replace_all("[^a-z]", "")
    return key.replace_strict(_column(table_field), default=None, return_dtype=pl.Float64)


def _column(table_field: str) -> dict[str, float | None]:
    return {key: getattr(cost, table_field) for key, (_, cost) in _BY_KEY.items()}


def _as_expr(value: pl.Expr | float) -> pl.Expr:
    return value if isinstance(value, pl.Expr) else pl.lit(float(value))


def bus_factor_expr(collective: pl.Expr, n: pl.Expr) -> pl.Expr:
    """`bus_factor` as a polars expression over columns of collective names and group sizes.

    Null where the collective is unknown or n < 1.
    """
    size = n.cast(pl.Float64)
    factor = _coefficient(collective, "bus_per_peer") * (size - 1) / size + _coefficient(
        collective, "bus_const"
    )
    return pl.when(size >= 1).then(factor).otherwise(None)


def bandwidth_exprs(
    collective: pl.Expr, n: pl.Expr, size_bytes: pl.Expr, duration_us: pl.Expr
) -> tuple[pl.Expr, pl.Expr]:
    """(algbw, busbw) in bytes/s, the nccl-tests convention of docs/metrics.md, "Collectives", the one place
    the project computes them (per kernel in `traceview.collectives.kernels`, per call in
    `traceview.prediction.pricing`):

        algbw = S / t        busbw = algbw * f(n)

    S the nccl-tests size of the collective (AllGather: the gathered output; ReduceScatter: the full input;
    every other one: the buffer), t the duration. Null where t <= 0, S is unknown, or f(n) is unknown; f is
    taken without n where it does not depend on n (Broadcast, Reduce, point to point).
    """
    without_n = pl.when(
        bus_factor_expr(collective, pl.lit(1)) == bus_factor_expr(collective, pl.lit(2))
    ).then(bus_factor_expr(collective, pl.lit(2)))
    factor = pl.coalesce(bus_factor_expr(collective, n), without_n)
    algbw = pl.when(duration_us > 0).then(size_bytes.cast(pl.Float64) / (duration_us * 1e-6))
    return algbw, algbw * factor


def latency_steps_expr(collective: pl.Expr, n: pl.Expr, algorithm: Algorithm = "ring") -> pl.Expr:
    """`latency_steps` as a polars expression; null for unknown collectives, n < 1, or no tree algorithm."""
    size = n.cast(pl.Float64)
    const = _coefficient(collective, "steps_const")
    if algorithm == "ring":
        steps = _coefficient(collective, "steps_per_peer") * (size - 1) + const
    else:
        steps = _coefficient(collective, "tree_passes") * size.log(2) + const
    return pl.when(size >= 1).then(steps).otherwise(None)


def collective_time_expr(
    collective: pl.Expr,
    n: pl.Expr,
    size_bytes: pl.Expr,
    alpha_s: pl.Expr | float,
    bandwidth_bytes_per_s: pl.Expr | float,
    *,
    algorithm: Algorithm = "ring",
) -> pl.Expr:
    """`collective_time_s` as a polars expression over a frame of collectives (one row per instance)."""
    latency = latency_steps_expr(collective, n, algorithm) * _as_expr(alpha_s)
    transfer = bus_factor_expr(collective, n) * size_bytes.cast(pl.Float64) / _as_expr(bandwidth_bytes_per_s)
    return latency + transfer


SIZE_RULES: Mapping[str, tuple[str, str]] = {
    "AllGather": ("out_bytes", "in_bytes"),
    "ReduceScatter": ("in_bytes", "out_bytes"),
}
"""S of docs/metrics.md, "Collectives" where it is not simply the buffer: collective -> (the buffer S is, the
shard that n times gives it). AllGather: the gathered output; ReduceScatter: the full input. Every other
collective: the input buffer (its output when only that is known)."""


def size_expr() -> pl.Expr:
    """S of docs/metrics.md, "Collectives" (`SIZE_RULES`)."""
    n, collective = pl.col("group_size"), pl.col("collective")
    by_rule = [
        pl.when(collective == name).then(pl.coalesce(pl.col(buffer), pl.col(shard) * n))
        for name, (buffer, shard) in SIZE_RULES.items()
    ]
    default = pl.coalesce(pl.col("in_bytes"), pl.col("out_bytes"))
    return (
        pl.when(collective.is_in(list(SIZE_RULES)))
        .then(pl.coalesce(by_rule))
        .otherwise(default)
        .alias("size_bytes")
    )


HIERARCHICAL_PASSES: Mapping[str, float] = {"AllReduce": 2.0, "AllGather": 1.0, "ReduceScatter": 1.0}
"""Collectives run hierarchically across nodes (the seeds' hierarchical all-reduce): c, the ring passes of
each stage (AllReduce: a reduce-scatter and an all-gather; AllGather, ReduceScatter: one)."""


def hierarchical_time_s(
    collective: str,
    size_bytes: float,
    per_node: int,
    nodes: int,
    intra: tuple[float, float],
    inter: tuple[float, float],
    nics_per_node: int,
) -> float:
    """T of a collective over `nodes` nodes of `per_node` ranks (g and N), a ring inside each node on the
    scale-up link then rail-aligned rings across nodes, each of the node's g ranks on its own NIC (at most
    `nics_per_node` NICs carry the node's share in parallel):

        T = c [(g-1) alpha_intra + (N-1) alpha_inter]
            + c [(g-1)/g S / B_intra + (N-1)/N S / (min(m, g) B_nic)]

    `intra` and `inter` are (alpha s, B bytes/s); c is `HIERARCHICAL_PASSES` (UsageError for others)."""
    passes = HIERARCHICAL_PASSES.get(COLLECTIVE_NAMES.get(collective_key(collective), ""))
    if passes is None:
        raise UsageError(f"collective {collective!r} has no hierarchical algorithm")
    g, n_nodes = per_node, nodes
    latency = passes * ((g - 1) * intra[0] + (n_nodes - 1) * inter[0])
    rails = min(nics_per_node, g)
    transfer = passes * (
        (g - 1) / g * size_bytes / intra[1] + (n_nodes - 1) / n_nodes * size_bytes / (rails * inter[1])
    )
    return latency + transfer


COLLECTIVE_NAMES: Mapping[str, str] = {key: name for key, (name, _) in _BY_KEY.items()}
"""The canonical name of every lookup key."""


def hierarchical_exprs(
    collective: pl.Expr,
    size_bytes: pl.Expr,
    per_node: pl.Expr,
    nodes: pl.Expr,
    intra: tuple[pl.Expr, pl.Expr],
    inter: tuple[pl.Expr, pl.Expr],
    rails: pl.Expr,
) -> tuple[pl.Expr, pl.Expr]:
    """(latency s, transfer s) of `hierarchical_time_s` as polars expressions (`rails` = min(m, g)); null
    where the collective has no hierarchical algorithm."""
    key = collective.str.to_lowercase().str.replace_all("[^a-z]", "")
    passes = key.replace_strict(
        {collective_key(name): c for name, c in HIERARCHICAL_PASSES.items()},
        default=None,
        return_dtype=pl.Float64,
    )
    g, n_nodes, size = per_node.cast(pl.Float64), nodes.cast(pl.Float64), size_bytes.cast(pl.Float64)
    latency = passes * ((g - 1) * intra[0] + (n_nodes - 1) * inter[0])
    transfer = passes * ((g - 1) / g * size / intra[1] + (n_nodes - 1) / n_nodes * size / (rails * inter[1]))
    return latency, transfer
