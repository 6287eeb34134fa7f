"""What went wrong in NCCL logs read together (docs/metrics.md, "NCCL log", "Failures"): the failures that
head the `nccl` command's first line and the report's NCCL notes, and the figures a gate reads.

Failures, by kind: `init failed` (a communicator whose `Init START` was never followed by `Init COMPLETE` in
its process), `error` (NCCL WARN lines and error traces such as `init.cc:123 -> 5 (invalid usage)`, a
duplicate GPU, a ProcessGroupNCCL error), `timeout` and `watchdog` (collectives that never finished), `abort`
(communicators aborted); and `transport fallback` (connections NCCL made over a slower transport than it
should, `traceview.model.nccl_log.DEGRADED_RULES`: TCP sockets instead of IB/RoCE, SHM where P2P works).
`nccl_errors` counts the first five kinds, `nccl_fallbacks` the connections of the last.
"""

from __future__ import annotations

import polars as pl

from traceview.nccl.join import NcclJoin

FAILING_WARNINGS = ("error", "timeout", "watchdog", "abort")
"""Warning kinds (`traceview.model.nccl_log.WARNING_KINDS`) that are failures, not mere warnings."""
NCCL_GATE_FIGURES = ("nccl_errors", "nccl_fallbacks")
"""The figures `--fail-on` can name on NCCL logs; null (never firing) when no log was read."""
PROBLEM_SCHEMA = {"kind": pl.Utf8, "count": pl.Int64, "example": pl.Utf8}


def _init_failures(join: NcclJoin) -> pl.DataFrame:
    failed = join.members.filter(pl.col("init_state") == "START")
    if failed.is_empty():
        return pl.DataFrame(schema=PROBLEM_SCHEMA)
    first = failed.row(0, named=True)
    example = (
        f"{first['comm_key']}: rank {first['comm_rank']} of {first['nranks']} on {first['process']} started "
        "its init and never completed it"
    )
    return pl.DataFrame(
        [{"kind": "init failed", "count": failed.height, "example": example}], schema=PROBLEM_SCHEMA
    )


def _fallbacks(join: NcclJoin) -> pl.DataFrame:
    degraded = join.degraded
    if degraded.is_empty():
        return pl.DataFrame(schema=PROBLEM_SCHEMA)
    first = degraded.row(0, named=True)
    example = f"{first['kind']} via {first['via']}: {first['degraded_reason']}"
    count = int(degraded.get_column("connections").sum())
    return pl.DataFrame(
        [{"kind": "transport fallback", "count": count, "example": example}], schema=PROBLEM_SCHEMA
    )


def nccl_problems(join: NcclJoin) -> pl.DataFrame:
    """One row per kind of failure (module docstring): kind, count, the first example; failures first (init,
    then warnings by count), transport fallbacks last."""
    warnings = join.warnings.filter(pl.col("kind").is_in(FAILING_WARNINGS)).sort("count", descending=True)
    return pl.concat(
        [_init_failures(join), warnings.select(list(PROBLEM_SCHEMA)).cast(PROBLEM_SCHEMA), _fallbacks(join)]  # type: ignore[arg-type]
    )


def nccl_gate_figures(join: NcclJoin | None) -> dict[str, float | None]:
    """`nccl_errors` (failures) and `nccl_fallbacks` (degraded connections); null without NCCL logs."""
    if join is None:
        return dict.fromkeys(NCCL_GATE_FIGURES)
    problems = nccl_problems(join)
    fallback = pl.col("kind") == "transport fallback"
    return {
        "nccl_errors": float(problems.filter(~fallback).get_column("count").sum()),
        "nccl_fallbacks": float(problems.filter(fallback).get_column("count").sum()),
    }
