"""Collectives priced by the algorithm an NCCL or RCCL log says ran (docs/metrics.md, "Predicted gamma",
Links): the tree and recursive halving-doubling of the alpha-beta model beside the ring of
`traceview.core.costmodel`.

One collective of S bytes over n ranks on a link of latency alpha and bandwidth B takes

    T = (l_log * L(n)) * alpha + (b_log * L(n) + b_peer * (n-1)/n) * S / B,    L(n) = ceil(log2 n)

with the coefficients of `ALGORITHM_COSTS`: the tree all-reduce, a reduce up a binary tree then a broadcast
down, each of L(n) steps that carry the whole buffer (2 L alpha + 2 L S / B); recursive halving-doubling
(Rabenseifner's all-reduce: a reduce-scatter by recursive halving then an all-gather by recursive doubling,
2 L alpha + 2 (n-1)/n S / B; all-gather or reduce-scatter alone, one of the two phases). `LOGGED_ALGORITHMS`
turns the names the logs write (NCCL_DEBUG's TUNING lines) into the model's. Pure: no I/O.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import polars as pl

from traceview.core.costmodel import COLLECTIVE_NAMES, collective_key
from traceview.core.records import record


@record
class AlgorithmCost:
    """The coefficients of one (collective, algorithm): latency steps l_log L(n); bus factor
    b_log L(n) + b_peer (n-1)/n."""

    l_log: float
    b_log: float
    b_peer: float


ALGORITHM_COSTS: Mapping[tuple[str, str], AlgorithmCost] = {
    # (collective, algorithm):            AlgorithmCost(l_log, b_log, b_peer)
    ("AllReduce", "tree"): AlgorithmCost(2, 2, 0),  # reduce up, broadcast down: the whole S each step
    ("AllReduce", "halving_doubling"): AlgorithmCost(2, 0, 2),  # recursive halving, then doubling
    ("AllGather", "halving_doubling"): AlgorithmCost(1, 0, 1),  # recursive doubling
    ("ReduceScatter", "halving_doubling"): AlgorithmCost(1, 0, 1),  # recursive halving
}
"""The named algorithms the model prices, by canonical collective name (`costmodel.COLLECTIVE_COSTS`)."""

LOGGED_ALGORITHMS: Mapping[str, str] = {
    "RING": "ring",
    "TREE": "tree",
    "PAT": "halving_doubling",  # NCCL 2.23+'s log-step AllGather / ReduceScatter (one rank per node)
}
"""An algorithm as NCCL or RCCL logs name it (upper case) -> the model's algorithm. Others (CollNet, NVLS)
are priced as the ring or the hierarchical collective, as when no log names one."""


def steps(n: int) -> int:
    """L(n) = ceil(log2 n): the steps of a binary tree or of recursive halving over n ranks (0 for n = 1)."""
    return (n - 1).bit_length() if n >= 1 else 0


def algorithm_time_s(
    collective: str, algorithm: str, n: int, size_bytes: float, alpha_s: float, bandwidth_bytes_per_s: float
) -> float | None:
    """T of `collective` run as `algorithm` (module docstring); None when the table has no such row."""
    cost = ALGORITHM_COSTS.get((COLLECTIVE_NAMES.get(collective_key(collective), collective), algorithm))
    if cost is None:
        return None
    depth = steps(n)
    factor = cost.b_log * depth + cost.b_peer * (n - 1) / n
    return cost.l_log * depth * alpha_s + factor * size_bytes / bandwidth_bytes_per_s


def _coefficient(collective: pl.Expr, algorithm: pl.Expr, field: str) -> pl.Expr:
    """One coefficient of `ALGORITHM_COSTS` per row (null where the table has no such row). Of plain
    columns, the expression is a constant, built at its first use (`_column_coefficient`)."""
    if collective.meta.is_column() and algorithm.meta.is_column():
        columns = (collective.meta.output_name(), algorithm.meta.output_name())
        return _column_coefficient(*columns, field)
    return _coefficient_of(collective, algorithm, field)


@functools.cache
def _column_coefficient(collective: str, algorithm: str, field: str) -> pl.Expr:
    """`_coefficient` of the columns so named (polars expressions are immutable: one serves every plan)."""
    return _coefficient_of(pl.col(collective), pl.col(algorithm), field)


def _coefficient_of(collective: pl.Expr, algorithm: pl.Expr, field: str) -> pl.Expr:
    name = collective.str.to_lowercase().str.replace_all("[^a-z]", "")
    key = pl.concat_str(name, pl.lit("/"), algorithm)
    table = {f"{collective_key(c)}/{a}": getattr(cost, field) for (c, a), cost in ALGORITHM_COSTS.items()}
    return key.replace_strict(table, default=None, return_dtype=pl.Float64)


def algorithm_exprs(
    collective: pl.Expr,
    algorithm: pl.Expr,
    n: pl.Expr,
    size_bytes: pl.Expr,
    alpha_s: pl.Expr,
    bandwidth_Bps: pl.Expr,  # noqa: N803 - B of the alpha-beta model
) -> tuple[pl.Expr, pl.Expr]:
    """(latency s, transfer s) of `algorithm_time_s` as polars expressions over canonical collective names;
    null where the table has no row."""
    size = n.cast(pl.Float64)
    depth = pl.when(size > 1).then(size.log(2).ceil()).otherwise(0.0)
    latency = _coefficient(collective, algorithm, "l_log") * depth * alpha_s
    factor = (
        _coefficient(collective, algorithm, "b_log") * depth
        + _coefficient(collective, algorithm, "b_peer") * (size - 1) / size
    )
    return latency, factor * size_bytes.cast(pl.Float64) / bandwidth_Bps
