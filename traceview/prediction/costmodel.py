"""The alpha-beta cost model of collectives and the data-parallel gamma (docs/metrics.md, "Predicted gamma") (docs/metrics.md, "Collectives" and "Predicted gamma").

One collective of S bytes over a group of n ranks, on links of latency alpha and bandwidth B, takes

    T_pred = k(n) * alpha + f(n) * S / B

with f(n) the nccl-tests bus factor of docs/metrics.md, "Collectives" and k(n) the number of latency-bound steps of the
algorithm.
Both come from one data table, `COLLECTIVE_COSTS`, used by the scalar functions and by the polars expressions.

The data-parallel closed form of the gamma model (all-reduce of g*P gradient bytes over K workers, compute 6*P*b/R):

    gamma = 2(K-1)/K * g * R / (6 * b * B)

Units: seconds, bytes, bytes per second, FLOP/s. Everything here is pure: no I/O, no printing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import polars as pl

from traceview.core.errors import UsageError

Algorithm = Literal["ring", "tree"]

FLOPS_PER_PARAM_PER_EXAMPLE = 6.0
"""Training FLOPs per parameter per example: 2 forward + 4 backward (the gamma model, docs/metrics.md "Predicted gamma")."""


@dataclass(frozen=True)
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
    # AllReduce: f = 2(n-1)/n; ring k = 2(n-1) (reduce-scatter then all-gather); tree k = log2 n (docs/metrics.md, "Predicted gamma").
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
    # Gather and Scatter (not in docs/metrics.md, "Collectives"; nccl-tests' factor (n-1)/n): the root exchanges with n-1 peers.
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
    """f(n) of docs/metrics.md, "Collectives", with which busbw = algbw * f(n) and the model's bandwidth term is f(n) * S / B.

    AllReduce 2(n-1)/n; AllGather, ReduceScatter, AllToAll (n-1)/n; Broadcast, Reduce, SendRecv/Send/Recv 1;
    Barrier 0 (it moves no bytes); Gather and Scatter (n-1)/n as nccl-tests counts them.
    """
    _check_group_size(n)
    cost = collective_cost(collective)
    return cost.bus_per_peer * (n - 1) / n + cost.bus_const


def latency_steps(collective: str, n: int, algorithm: Algorithm = "ring") -> float:
    """k(n): how many times a collective pays the link latency alpha (docs/metrics.md, "Predicted gamma").

    Ring: AllReduce 2(n-1); AllGather, ReduceScatter, AllToAll n-1; Broadcast, Reduce n-1 (a pipelined chain);
    SendRecv 1; Barrier 2(n-1) (an all-reduce of nothing); Gather, Scatter n-1.
    Tree: log2 n for AllReduce, Broadcast, Reduce and Barrier, following docs/metrics.md's "log2 n for trees". A
    tree all-reduce is a reduce up the tree then a broadcast down, which textbooks count as 2*log2 n; NCCL
    pipelines the two phases, and the metrics contract counts one pass. The number of passes is `tree_passes` in
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

    S is the nccl-tests size of docs/metrics.md, "Collectives" (AllReduce: the buffer; AllGather: the gathered output;
    ReduceScatter: the full input; AllToAll: the full buffer). B is the unidirectional per-GPU bandwidth of
    the links the group spans (the figure nccl-tests busbw is compared with).
    """
    steps = latency_steps(collective, n, algorithm)
    return steps * alpha_s + bus_factor(collective, n) * size_bytes / bandwidth_bytes_per_s


def _coefficient(collective: pl.Expr, values: Mapping[str, float | None]) -> pl.Expr:
    """Map a column of collective names to one coefficient of the table (null for unknown names)."""
    key = collective.str.to_lowercase().str.replace_all("[^a-z]", "")
    return key.replace_strict(dict(values), default=None, return_dtype=pl.Float64)


def _column(table_field: str) -> dict[str, float | None]:
    return {key: getattr(cost, table_field) for key, (_, cost) in _BY_KEY.items()}


def _as_expr(value: pl.Expr | float) -> pl.Expr:
    return value if isinstance(value, pl.Expr) else pl.lit(float(value))


def bus_factor_expr(collective: pl.Expr, n: pl.Expr) -> pl.Expr:
    """`bus_factor` as a polars expression over columns of collective names and group sizes.

    Null where the collective is unknown or n < 1.
    """
    size = n.cast(pl.Float64)
    factor = _coefficient(collective, _column("bus_per_peer")) * (size - 1) / size + _coefficient(
        collective, _column("bus_const")
    )
    return pl.when(size >= 1).then(factor).otherwise(None)


def bandwidth_exprs(
    collective: pl.Expr, n: pl.Expr, size_bytes: pl.Expr, duration_us: pl.Expr
) -> tuple[pl.Expr, pl.Expr]:
    """(algbw, busbw) in bytes/s, the nccl-tests convention of docs/metrics.md, "Collectives", the one place the project computes them
    (per kernel in `traceview.collectives.kernels`, per call in `traceview.prediction.pricing`):

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
    const = _coefficient(collective, _column("steps_const"))
    if algorithm == "ring":
        steps = _coefficient(collective, _column("steps_per_peer")) * (size - 1) + const
    else:
        steps = _coefficient(collective, _column("tree_passes")) * size.log(2) + const
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


def compute_time_s(
    params: float,
    local_batch: float,
    flops_per_s: float,
    flops_per_param_per_example: float = FLOPS_PER_PARAM_PER_EXAMPLE,
) -> float:
    """T_comp = 6 * P * b / R: forward and backward over the local batch (the gamma model, docs/metrics.md "Predicted gamma")."""
    return flops_per_param_per_example * params * local_batch / flops_per_s


def allreduce_time_s(
    params: float,
    grad_bytes_per_param: float,
    workers: int,
    bandwidth_bytes_per_s: float,
    alpha_s: float = 0.0,
) -> float:
    """T_comm = 2(K-1)/K * g * P / B + 2(K-1) * alpha: the ring all-reduce of the gradient (the gamma model's ring estimate, docs/metrics.md "Predicted gamma").

    With alpha = 0 (the default) this is the gamma model's bandwidth-only estimate; alpha > 0 adds the latency floor
    of docs/metrics.md, "Predicted gamma".
    """
    ring_share = 2.0 * (workers - 1) / workers
    return ring_share * params * grad_bytes_per_param / bandwidth_bytes_per_s + 2.0 * (workers - 1) * alpha_s


def gamma_closed_form(
    workers: float,
    grad_bytes_per_param: float,
    flops_per_s: float,
    local_batch: float,
    bandwidth_bytes_per_s: float,
) -> float:
    """gamma = 2(K-1)/K * g * R / (6 * b * B): T_comm / T_comp of data-parallel training (docs/metrics.md, "Predicted gamma").

    P cancels: both phases are proportional to it.
    """
    ring_share = 2.0 * (workers - 1) / workers
    return (
        ring_share
        * grad_bytes_per_param
        * flops_per_s
        / (FLOPS_PER_PARAM_PER_EXAMPLE * local_batch * bandwidth_bytes_per_s)
    )


def strong_scaling_sweep(
    params: float,
    global_batch: float,
    flops_per_s: float,
    bandwidth_bytes_per_s: float,
    grad_bytes_per_param: float,
    *,
    workers: Sequence[int],
    alpha_s: float = 0.0,
) -> pl.DataFrame:
    """The strong-scaling sweep: a fixed global batch G split over K workers, b = G / K.

    Columns: K, local_batch (G / K, real-valued), t_comp_s, t_comm_s (with the optional latency floor
    2(K-1) * alpha of Exercise 4.1.2), gamma = t_comm_s / t_comp_s.
    """
    k = pl.col("K").cast(pl.Float64)
    ring_share = 2.0 * (k - 1) / k
    return (
        pl.DataFrame({"K": list(workers)}, schema={"K": pl.Int64})
        .with_columns(local_batch=global_batch / k)
        .with_columns(
            t_comp_s=FLOPS_PER_PARAM_PER_EXAMPLE * params * pl.col("local_batch") / flops_per_s,
            t_comm_s=ring_share * params * grad_bytes_per_param / bandwidth_bytes_per_s
            + 2.0 * (k - 1) * alpha_s,
        )
        .with_columns(gamma=pl.col("t_comm_s") / pl.col("t_comp_s"))
    )


def break_even_workers(
    global_batch: float,
    grad_bytes_per_param: float,
    flops_per_s: float,
    bandwidth_bytes_per_s: float,
) -> float:
    """The worker count K at which gamma = 1 under strong scaling (docs/metrics.md, "Predicted gamma").

    With b = G / K:
        gamma(K) = 2(K-1)/K * g * R / (6 * (G/K) * B)
                 = 2(K-1) * g * R / (6 * G * B)
                 = (K-1) * g * R / (3 * G * B)
    so gamma grows linearly in K, and gamma(K) = 1 gives
        K = 1 + 3 * G * B / (g * R).
    P never enters: it cancels from gamma before b is substituted.
    """
    return 1.0 + 3.0 * global_batch * bandwidth_bytes_per_s / (grad_bytes_per_param * flops_per_s)


def latency_crossover_params(
    workers: int, alpha_s: float, grad_bytes_per_param: float, bandwidth_bytes_per_s: float
) -> float:
    """The parameter count P at which the ring all-reduce's latency floor equals its bandwidth term.

    2(K-1) * alpha = 2(K-1)/K * g * P / B  gives  P = K * alpha * B / g. Below it latency dominates (docs/metrics.md,
    "Predicted gamma").
    """
    return workers * alpha_s * bandwidth_bytes_per_s / grad_bytes_per_param


@dataclass(frozen=True)
class DataParallelShape:
    """The inputs of the closed form: K workers, local batch b, g bytes per parameter, R FLOP/s, B bytes/s."""

    workers: float
    local_batch: float
    grad_bytes_per_param: float
    flops_per_s: float
    bandwidth_bytes_per_s: float

    def gamma(self) -> float:
        """gamma_closed_form of this shape."""
        return gamma_closed_form(
            self.workers,
            self.grad_bytes_per_param,
            self.flops_per_s,
            self.local_batch,
            self.bandwidth_bytes_per_s,
        )


def gamma_with_workers(
    shape: DataParallelShape, factor: float = 2.0, hold_global_batch: bool = True
) -> float:
    """gamma with `factor` times the workers: strong scaling divides b by the factor, weak scaling keeps b."""
    local_batch = shape.local_batch / factor if hold_global_batch else shape.local_batch
    return replace(shape, workers=shape.workers * factor, local_batch=local_batch).gamma()


def gamma_with_local_batch(shape: DataParallelShape, factor: float = 2.0) -> float:
    """gamma with `factor` times the local batch (gamma scales as 1 / b)."""
    return replace(shape, local_batch=shape.local_batch * factor).gamma()


def gamma_with_bandwidth(shape: DataParallelShape, bandwidth_bytes_per_s: float) -> float:
    """gamma on links of another bandwidth (gamma scales as 1 / B)."""
    return replace(shape, bandwidth_bytes_per_s=bandwidth_bytes_per_s).gamma()


def predicted_comm_time_s(
    collectives: pl.DataFrame,
    alpha_s: float,
    bandwidth_bytes_per_s: float,
    algorithm: Algorithm = "ring",
    group_size_factor: float = 1.0,
) -> float:
    """T_comm_pred: the sum of T_pred over a frame of collectives.

    The frame has columns collective, group_size and size_bytes (the S of docs/metrics.md, "Collectives"), one row per
    instance.

    `group_size_factor` scales every group (a what-if for a purely data-parallel job). Unknown collectives
    raise UsageError rather than being dropped from the sum.
    """
    frame = collectives.select(
        pl.col("collective"),
        time_s=collective_time_expr(
            pl.col("collective"),
            (pl.col("group_size") * group_size_factor).round(0),
            pl.col("size_bytes"),
            alpha_s,
            bandwidth_bytes_per_s,
            algorithm=algorithm,
        ),
    )
    unpriced = frame.filter(pl.col("time_s").is_null())["collective"].unique().sort().to_list()
    if unpriced:
        raise UsageError(f"cannot price collectives {unpriced} with algorithm {algorithm!r}")
    return float(frame["time_s"].sum())


def gamma_sum_form(
    collectives: pl.DataFrame,
    compute_time_s: float,
    alpha_s: float,
    bandwidth_bytes_per_s: float,
    algorithm: Algorithm = "ring",
) -> float:
    """gamma_pred = T_comm_pred / T_comp_pred, T_comm_pred the sum over the step's collectives (docs/metrics.md, "Predicted gamma")."""
    return predicted_comm_time_s(collectives, alpha_s, bandwidth_bytes_per_s, algorithm) / compute_time_s


def gamma_sum_form_what_if(
    collectives: pl.DataFrame,
    compute_time_s: float,
    alpha_s: float,
    bandwidth_bytes_per_s: float,
    *,
    group_size_factor: float = 1.0,
    compute_factor: float = 1.0,
    algorithm: Algorithm = "ring",
) -> float:
    """The sum form under a change: groups `group_size_factor` times larger, compute `compute_factor` times.

    2x workers at a fixed global batch: group_size_factor=2, compute_factor=0.5. 2x local batch:
    compute_factor=2. Another bandwidth: pass it as `bandwidth_bytes_per_s`.
    """
    comm = predicted_comm_time_s(collectives, alpha_s, bandwidth_bytes_per_s, algorithm, group_size_factor)
    return comm / (compute_time_s * compute_factor)
