"""ZeRO-1/2/3 against DDP: memory per rank and communication per rank per step (docs/metrics.md, "Parallelism
dimensions", ZeRO stages; the seeds' section 8.2 and 8.4).

With N the parameters one data-parallel replica holds (P / (tp x pp): P the whole model, "Predicted gamma"
inputs) and F the data-parallel group's size (the run's fsdp group, else its dp group), mixed precision as the
seeds count it (parameters 4N bytes, gradients 2N, optimizer states 12N: fp32 master weights and Adam's m, v):

| stage | sharded | memory per rank (bytes) | bus elements per rank per step |
|---|---|---|---|
| DDP | nothing | 4N + 2N + 12N = 18N | 2 (F-1)/F N (all-reduce) |
| ZeRO-1 | optimizer states | 4N + 2N + 12N / F | 2 (F-1)/F N (as DDP) |
| ZeRO-2 | + gradients | 4N + (2N + 12N) / F | 2 (F-1)/F N (reduce-scatter, all-gather) |
| ZeRO-3 / FSDP | + parameters | (4N + 2N + 12N) / F | 3 (F-1)/F N (gather twice, scatter) |

The bus bytes are the elements times e, the element size of the run's gradient calls. Null with the reason
when N or F is unknown.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

ZERO_STAGES: tuple[tuple[str, str, tuple[float, float, float], float], ...] = (
    # (stage, what it shards, (parameter, gradient, optimizer) bytes per parameter sharded by F or not: 1
    # when sharded, 0 when replicated), bus elements per parameter per step as a multiple of (F-1)/F
    ("DDP", "nothing", (0.0, 0.0, 0.0), 2.0),
    ("ZeRO-1", "optimizer states", (0.0, 0.0, 1.0), 2.0),
    ("ZeRO-2", "optimizer states and gradients", (0.0, 1.0, 1.0), 2.0),
    ("ZeRO-3 / FSDP", "optimizer states, gradients and parameters", (1.0, 1.0, 1.0), 3.0),
)
"""Each stage: what it shards and its communication factor (seeds 8.2, 8.4)."""
STATE_BYTES = (4.0, 2.0, 12.0)
"""Bytes per parameter of the parameters, gradients and optimizer states, as the seeds count them (8.2)."""
ZERO_SCHEMA: Mapping[str, pl.DataType] = {
    "stage": pl.Utf8(),
    "shards": pl.Utf8(),
    "params_per_replica": pl.Float64(),
    "group_size": pl.Float64(),
    "memory_bytes_per_rank": pl.Float64(),
    "bus_bytes_per_step": pl.Float64(),
    "missing": pl.Utf8(),
}


def _memory(n: float, f: float, sharded: tuple[float, float, float]) -> float:
    """Bytes per rank: each state's bytes per parameter x N, divided by F where the stage shards it."""
    return sum(b * n / (f if s else 1.0) for b, s in zip(STATE_BYTES, sharded, strict=True))


def zero_table(n: float | None, f: float | None, e: float | None, why: str = "") -> pl.DataFrame:
    """One row per stage (`ZERO_STAGES`) for N parameters per replica over F ranks with gradients of e bytes;
    figures null, `missing` saying why, when N or F is unknown (e unknown: the bus bytes alone)."""
    rows = []
    for stage, shards, sharded, factor in ZERO_STAGES:
        memory = bus = None
        if n is not None and f is not None and f >= 1:
            memory = _memory(n, f, sharded)
            bus = None if e is None else factor * (f - 1) / f * n * e
        missing = why or (None if bus is not None else "e: no gradient call of a known element size")
        rows.append((stage, shards, n, f, memory, bus, missing))
    return pl.DataFrame(rows, schema=dict(ZERO_SCHEMA), orient="row")


def run_zero(params: float | None, sizes: Mapping[str, float], elem_size: float | None) -> pl.DataFrame:
    """The ZeRO table of the run: N = P / (tp x pp group sizes), F = its fsdp group's size, else its dp
    group's; the reason when P or the data-parallel group is unknown."""
    f = sizes.get("fsdp", sizes.get("dp"))
    reasons = [
        text
        for text, absent in (
            ("P: --params or run.json model.params (the whole model)", params is None),
            ("F: no data-parallel (dp or fsdp) group named in the run", f is None),
        )
        if absent
    ]
    n = None if params is None else params / (sizes.get("tp", 1.0) * sizes.get("pp", 1.0))
    return zero_table(n, f, elem_size, "; ".join(reasons))
