"""The data-parallel closed form of the gamma model (docs/metrics.md, "Predicted gamma"): all-reduce of g*P
gradient bytes over K workers against compute 6*P*b/R,

    gamma = 2(K-1)/K * g * R / (6 * b * B)

and the worker count at which it reaches 1 under strong scaling (the what-ifs' break-even K). Units: bytes,
bytes per second, FLOP/s; pure functions.
"""

from __future__ import annotations

from traceview.core.costmodel import FLOPS_PER_PARAM_PER_EXAMPLE


def gamma_closed_form(
    workers: float,
    grad_bytes_per_param: float,
    flops_per_s: float,
    local_batch: float,
    bandwidth_bytes_per_s: float,
) -> float:
    """gamma = 2(K-1)/K * g * R / (6 * b * B): T_comm / T_comp of data-parallel training (docs/metrics.md,
    "Predicted gamma").

    P cancels: both phases are proportional to it.
    """
    ring_share = 2.0 * (workers - 1) / workers
    return (
        ring_share
        * grad_bytes_per_param
        * flops_per_s
        / (FLOPS_PER_PARAM_PER_EXAMPLE * local_batch * bandwidth_bytes_per_s)
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
