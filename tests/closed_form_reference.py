"""A reference implementation of the gamma model's data-parallel formulas, for the tests only: the
strong-scaling sweep, T_comp and the ring all-reduce, the latency crossover, what-ifs of the closed form,
and the sum form over any list of collectives priced by `traceview.core.costmodel`. The tests hold the
program's closed form and its per-call pricing against these and against the published tables they
reproduce."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import polars as pl

from traceview.core.costmodel import FLOPS_PER_PARAM_PER_EXAMPLE, Algorithm, collective_time_expr
from traceview.core.errors import UsageError
from traceview.prediction.closed_form import gamma_closed_form


def compute_time_s(
    params: float,
    local_batch: float,
    flops_per_s: float,
    flops_per_param_per_example: float = FLOPS_PER_PARAM_PER_EXAMPLE,
) -> float:
    """T_comp = 6 * P * b / R: forward and backward over the local batch (the gamma model, docs/metrics.md
    "Predicted gamma")."""
    return flops_per_param_per_example * params * local_batch / flops_per_s


def allreduce_time_s(
    params: float,
    grad_bytes_per_param: float,
    workers: int,
    bandwidth_bytes_per_s: float,
    alpha_s: float = 0.0,
) -> float:
    """T_comm = 2(K-1)/K * g * P / B + 2(K-1) * alpha: the ring all-reduce of the gradient (the gamma model's
    ring estimate, docs/metrics.md "Predicted gamma").

    With alpha = 0 (the default) this is the gamma model's bandwidth-only estimate; alpha > 0 adds the latency
    floor of docs/metrics.md, "Predicted gamma".
    """
    ring_share = 2.0 * (workers - 1) / workers
    return ring_share * params * grad_bytes_per_param / bandwidth_bytes_per_s + 2.0 * (workers - 1) * alpha_s


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


def latency_crossover_params(
    workers: int, alpha_s: float, grad_bytes_per_param: float, bandwidth_bytes_per_s: float
) -> float:
    """The parameter count P at which the ring all-reduce's latency floor equals its bandwidth term.

    2(K-1) * alpha = 2(K-1)/K * g * P / B  gives  P = K * alpha * B / g. Below it latency dominates
    (docs/metrics.md, "Predicted gamma").
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

    The frame has columns collective, group_size and size_bytes (the S of docs/metrics.md, "Collectives"), one
    row per instance.

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
    """gamma_pred = T_comm_pred / T_comp_pred, T_comm_pred the sum over the step's collectives
    (docs/metrics.md, "Predicted gamma")."""
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
