"""What a dimension's volume ratio means (docs/metrics.md, "Parallelism dimensions", volumes): the first
`CAUSE_RULES` row whose dimension, collectives and band match it, then whether its calls are latency-bound."""

from __future__ import annotations

from traceview.core.records import record

LATENCY_BOUND = 0.25
"""A dimension whose model time is at least this share latency (k alpha) makes too many small calls."""
LATENCY_CALLS_MIN = 16


@record
class CauseRule:
    """What a ratio in [low, high) of a dimension's collectives means."""

    dimension: str
    collectives: tuple[str, ...]
    low: float
    high: float
    cause: str


_ANY = float("inf")
CAUSE_RULES: tuple[CauseRule, ...] = (
    CauseRule(
        "fsdp",
        ("AllGather",),
        0.9,
        1.1,
        "each parameter is gathered once per step (no resharding after forward)",
    ),
    CauseRule(
        "fsdp",
        ("AllGather",),
        1.8,
        2.2,
        "FSDP gathers {ratio:.1f}x the parameters per step: resharding after forward gathers them "
        "again in backward (the seeds' 3N; reshard_after_forward=False halves it for more memory)",
    ),
    CauseRule(
        "fsdp",
        ("AllGather",),
        2.8,
        3.2,
        "FSDP gathers {ratio:.1f}x the parameters per step: resharding plus activation checkpointing, "
        "whose recomputed forward gathers them a third time",
    ),
    CauseRule(
        "dp",
        ("AllReduce",),
        1.8,
        _ANY,
        "the gradients are all-reduced {ratio:.1f} times per step: gradient accumulation without "
        "no_sync() reduces every micro-batch",
    ),
    CauseRule(
        "dp",
        ("AllReduce",),
        0.0,
        0.9,
        "only {ratio:.0%} of the parameters' gradients are all-reduced: frozen or unused "
        "parameters, or P counts parameters this group does not replicate",
    ),
    CauseRule(
        "tp",
        ("AllReduce", "AllGather", "ReduceScatter"),
        1.4,
        1.6,
        "TP moves {ratio:.1f}x the activations of L layers: activation "
        "recomputation repeats the forward's collectives (6 a layer instead of 4)",
    ),
    CauseRule(
        "pp",
        ("SendRecv", "Send", "Recv"),
        1.8,
        _ANY,
        "the pipeline moves {ratio:.1f}x the activations a stage boundary needs: more boundaries per "
        "rank (interleaved stages: give --virtual-stages) or more micro-batches than stated",
    ),
    CauseRule(
        "ep",
        ("AllToAll",),
        1.1,
        _ANY,
        "the all-to-alls move {ratio:.1f}x the routed tokens: a capacity factor above 1 pads them",
    ),
    CauseRule(
        "ep",
        ("AllToAll",),
        0.0,
        0.9,
        "the all-to-alls move {ratio:.0%} of the routed tokens: tokens dropped at capacity",
    ),
)
"""Causes of a gap, first match wins; a ratio in no band within 10% of 1 is as expected."""


def _latency_clause(row: dict[str, object], latency_share: float | None) -> str | None:
    """ "DP makes 140 calls of 1 MiB per step: latency-bound ..." when the dimension's calls are many and
    mostly latency in the model (`LATENCY_BOUND`), else None."""
    calls = row["calls_per_step"]
    if latency_share is None or latency_share < LATENCY_BOUND or not isinstance(calls, float):
        return None
    if calls < LATENCY_CALLS_MIN:
        return None
    size = float(row["median_call_bytes"] or 0.0)  # type: ignore[arg-type]
    fix = (
        "raise the bucket size (bucket_cap_mb)" if row["dimension"] == "dp" else "fuse them into fewer calls"
    )
    return (
        f"{str(row['dimension']).upper()} makes {calls:.0f} calls of {size / 2**20:.2g} MiB per step: "
        f"latency-bound ({latency_share:.0%} of their model time is latency); {fix}"
    )


def _ratio_cause(row: dict[str, object]) -> str:
    ratio = row["ratio"]
    if not isinstance(ratio, float):
        return f"not computed: needs {row['missing']}" if row.get("missing") else "not computed"
    collectives = tuple(str(row["collectives"]).split(", "))
    for rule in CAUSE_RULES:
        if (
            rule.dimension == row["dimension"]
            and rule.collectives == collectives
            and rule.low <= ratio < rule.high
        ):
            return rule.cause.format(ratio=ratio)
    if abs(ratio - 1) <= 0.1:
        return "as the formula expects"
    return f"{ratio:.2f}x the formula's volume: check the stated inputs ({row['inputs'] or 'none'})"


def cause_of(row: dict[str, object], latency_share: float | None) -> str:
    """What the row's ratio means in words (`CAUSE_RULES`), then whether its calls are latency-bound."""
    latency = _latency_clause(row, latency_share)
    return _ratio_cause(row) + (f"; {latency}" if latency else "")
