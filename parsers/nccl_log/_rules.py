"""Rules over the records of an NCCL_DEBUG log (docs/metrics.md, "NCCL log"), used when its model is built:
which network a process uses (`NETWORK_RULES`), and S of a COLL call by the project's one S rule
(`with_call_size`).
"""

from __future__ import annotations

import polars as pl

from traceview.core.costmodel import SIZE_RULES
from traceview.core.costmodel import size_expr as size_rule_expr
from traceview.core.vocab import canonical_collective_expr

# A network's name as NCCL prints it (`Using network X`, `NCCL_NET=X`, `P2P plugin X`) -> its kind: the first
# matching regex wins. IBext (the SHARP/HPC-X plugin) and other IB-verbs plugins run over IB.
NETWORK_NAME_KINDS: tuple[tuple[str, str], ...] = (
    ("IB", r"(?i)^IB"),
    ("Socket", r"(?i)^Socket"),
    ("Plugin", r"."),
)

# Which network a process uses (`NcclLog.networks`), from its "network" records (source, detail) and its
# `NCCL_X set by environment` records (source = the variable, detail = its value): (evidence, rank, condition,
# kind). The row of lowest rank decides (the last line among equals); `kind` None: by `NETWORK_NAME_KINDS` of
# the detail. NCCL tries a net plugin, then IB, then sockets, printing each one's init.
NETWORK_RULES: tuple[tuple[str, int, pl.Expr, str | None], ...] = (
    ("Using network", 0, pl.col("source").is_null(), None),
    ("Assigned NET plugin", 0, pl.col("source") == "Assigned NET plugin", None),
    ("NCCL_NET", 1, pl.col("source") == "NCCL_NET", None),
    (
        "NET/Socket : Using",
        2,
        (pl.col("source") == "NET/Socket") & pl.col("detail").str.starts_with("Using"),
        "Socket",
    ),
    ("NET/IB : Using", 2, (pl.col("source") == "NET/IB") & pl.col("detail").str.starts_with("Using"), "IB"),
    ("P2P plugin", 2, pl.col("source") == "P2P plugin", None),
    ("Initialized NET plugin", 2, pl.col("source") == "Initialized NET plugin", None),
    (
        "NET/Plugin : Loaded",
        2,
        (pl.col("source") == "NET/Plugin") & pl.col("detail").str.contains("(?i)loaded"),
        "Plugin",
    ),
    (
        "NET/<plugin>",
        2,
        pl.col("source").str.contains(r"^NET/")
        & ~pl.col("source").is_in(["NET/IB", "NET/Socket", "NET/Plugin"]),
        "Plugin",
    ),
    ("NET/Socket", 3, pl.col("source") == "NET/Socket", "Socket"),
    (
        "external network plugin",
        3,
        pl.col("source") == "Successfully loaded external network plugin",
        "Plugin",
    ),
    ("NCCL_IB_DISABLE=1", 4, (pl.col("source") == "NCCL_IB_DISABLE") & (pl.col("detail") == "1"), "Socket"),
    (
        "NET/IB : No device found",
        5,
        (pl.col("source") == "NET/IB") & pl.col("detail").str.starts_with("No device"),
        "Socket",
    ),
)


def with_call_size(frame: pl.DataFrame, count_bytes: str) -> pl.DataFrame:
    """`frame` (COLL rows: op, nranks) with `collective` (canonical name) and `size_bytes`: S of the call in
    the nccl-tests convention, by the project's one S rule (`traceview.core.costmodel.SIZE_RULES`).

    A COLL line's `count` (column `count_bytes` = count x element size) is the count the API call was given,
    in every NCCL and RCCL generation: for the collectives of `SIZE_RULES` that is the shard (AllGather's
    sendcount, ReduceScatter's recvcount: one rank's share, S = count x size x nranks), for every other one
    the input buffer (AllReduce, Broadcast, Reduce, Send, Recv: S = count x size).
    """
    collective = canonical_collective_expr(pl.col("op"))
    buffer: pl.Expr = pl.lit("in_bytes")
    for name, (_, shard) in SIZE_RULES.items():
        buffer = pl.when(collective == name).then(pl.lit(shard)).otherwise(buffer)
    counted = pl.col(count_bytes)
    shaped = frame.with_columns(
        collective=collective,
        group_size=pl.col("nranks"),
        in_bytes=pl.when(buffer == "in_bytes").then(counted),
        out_bytes=pl.when(buffer == "out_bytes").then(counted),
    )
    return shaped.with_columns(size_rule_expr()).drop("group_size", "in_bytes", "out_bytes")
