"""Tables over several NCCL_DEBUG logs read together (docs/metrics.md, "NCCL log"), for `traceview.nccl.join`.

A process is `host:pid` (`log<i>:pid` where the poster stripped the host), a rank's GPU `host:pid[cudaDev]`
(one process may drive several GPUs); a communicator across processes is its `commId` (NCCL 2.16+), else
`nranks=N #k`, the k-th communicator of N ranks each GPU's process created (`ambiguous` when two of its
processes claim one rank: several communicators lumped, so its rank set is not used). A GPU's global rank is
its rank in the largest communicator (the world), trusted only when that is at least as large as every process
group of the traces.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from traceview.collectives.tables import size_bucket_exprs
from traceview.core.vocab import canonical_collective_expr
from traceview.model.nccl_log import NcclLog, empty_frame
from traceview.nccl.log_views import warning_counts

PROCESS = ["process", "comm"]


def stacked(logs: Sequence[NcclLog], name: str) -> pl.DataFrame:
    """Frame `name` of every log, one above the other, with `log` (index) and `process`."""
    frames = [empty_frame(name).with_columns(log=pl.lit(0, pl.Int64))]
    frames += [log.frame(name).with_columns(log=pl.lit(index, pl.Int64)) for index, log in enumerate(logs)]
    host = pl.coalesce(pl.col("host"), pl.format("log{}", pl.col("log")))
    process = pl.format("{}:{}", host, pl.col("pid").cast(pl.Utf8).fill_null("?"))
    return pl.concat(frames).with_columns(process=process)


def members_frame(logs: Sequence[NcclLog], world_size: int | None = None) -> pl.DataFrame:
    """One row per (process, communicator) with its comm_key and its GPU's global rank (module doc)."""
    comms = stacked(logs, "communicators").unique(PROCESS, keep="first", maintain_order=True)
    device = pl.col("cuda_dev").cast(pl.Utf8).fill_null("?")
    comms = comms.with_columns(gpu=pl.format("{}[{}]", pl.col("process"), device))
    ordinal = pl.col("line").rank("ordinal").over("gpu", "nranks").cast(pl.Int64) - 1
    comms = comms.with_columns(
        comm_key=pl.coalesce(
            pl.format("commId {}", "comm_id"), pl.format("nranks={} #{}", "nranks", ordinal)
        ),
        comm_rank=pl.col("rank"),
    )
    largest = comms.get_column("nranks").max()
    trusted = largest is not None and (world_size is None or int(largest) >= world_size)  # type: ignore[arg-type]
    world = comms.filter(pl.col("nranks") == largest).sort("line") if trusted else comms.clear()
    ranks = world.group_by("gpu").agg(global_rank=pl.col("comm_rank").first())
    columns = ["comm_key", "process", "host", "pid", "comm", "comm_id", "nranks", "comm_rank"]
    members = comms.join(ranks, on="gpu", how="left").select(
        *columns,
        "global_rank",
        "cuda_dev",
        "bus_id",
        "n_nodes",
        "init_state",
        "log",
        ambiguous=pl.col("comm_rank").is_duplicated().over("comm_key"),
    )
    return _with_networks(logs, pl.concat([members, _call_only(logs, members)], how="diagonal_relaxed"))


def _call_only(logs: Sequence[NcclLog], members: pl.DataFrame) -> pl.DataFrame:
    """Communicators only COLL lines show (no init line names them): comm_key `comm <pointer> of
    <process>`."""
    calls = stacked(logs, "call_totals").select("process", "host", "pid", "comm", "nranks", "log")
    calls = calls.unique(PROCESS, keep="first", maintain_order=True).join(members, on=PROCESS, how="anti")
    return calls.with_columns(
        comm_key=pl.format("comm {} of {}", "comm", "process"), ambiguous=pl.lit(value=False)
    )


def _with_networks(logs: Sequence[NcclLog], members: pl.DataFrame) -> pl.DataFrame:
    """`members` with `network` and `network_evidence`: its process's (`NcclLog.networks`), else its log's
    when the log names one network for all its processes."""
    nets = stacked(logs, "networks").select("process", "log", "network", "evidence")
    own = nets.unique("process", keep="last").select("process", "network", network_evidence="evidence")
    per_log = nets.group_by("log").agg(
        log_network=pl.col("network").first(),
        log_evidence=pl.col("evidence").first(),
        kinds=pl.col("network").n_unique(),
    )
    return (
        members.join(own, on="process", how="left")
        .join(per_log.filter(pl.col("kinds") == 1), on="log", how="left")
        .with_columns(
            network=pl.coalesce("network", "log_network"),
            network_evidence=pl.coalesce("network_evidence", "log_evidence"),
        )
        .drop("log_network", "log_evidence", "kinds")
    )


def owned(logs: Sequence[NcclLog], name: str, members: pl.DataFrame) -> pl.DataFrame:
    """Frame `name` of every log with the comm_key of the communicator each row belongs to."""
    return stacked(logs, name).join(members.select(*PROCESS, "comm_key"), on=PROCESS, how="inner")


def communicator_table(logs: Sequence[NcclLog], members: pl.DataFrame) -> pl.DataFrame:
    """One row per communicator across logs (see `NcclJoin`), without the match columns."""
    links = (
        owned(logs, "transports", members)
        .group_by("comm_key")
        .agg(
            transports=pl.col("kind").unique().sort(),
            degraded=pl.col("degraded").any(),
            degraded_reason=pl.col("degraded_reason").drop_nulls().first(),
        )
    )
    channels = pl.col("channel").n_unique().cast(pl.Int64)
    rings = owned(logs, "rings", members).group_by("comm_key").agg(ring_channels=channels)
    trees = owned(logs, "trees", members).group_by("comm_key").agg(tree_channels=channels)
    tuning = (
        owned(logs, "tuning_totals", members)
        .group_by("comm_key")
        .agg(algo_proto=pl.format("{}/{}", "algo", "proto").unique().sort())
    )
    gpu = pl.format("{}[{}]", pl.col("host").fill_null("?"), pl.col("cuda_dev").cast(pl.Utf8).fill_null("?"))
    table = members.group_by("comm_key", maintain_order=True).agg(
        pl.col("comm_id").drop_nulls().first(),
        pl.col("nranks").max(),
        pointers=pl.col("comm").unique().sort(),
        ranks_seen=pl.col("comm_rank").drop_nulls().n_unique().cast(pl.Int64),  # ranks identified
        ambiguous=pl.col("ambiguous").any(),
        global_ranks=pl.col("global_rank").filter(~pl.col("ambiguous").any()).drop_nulls().unique().sort(),
        hosts=pl.col("host").drop_nulls().unique().sort(),
        gpus=gpu.unique().sort(),
        nodes=pl.coalesce(pl.col("n_nodes").max(), pl.col("host").drop_nulls().n_unique().cast(pl.Int64)),
        init_complete=(pl.col("init_state") == "COMPLETE").sum().cast(pl.Int64),
        networks=pl.col("network").drop_nulls().unique().sort(),
        network_evidence=pl.col("network_evidence").filter(pl.col("network") == "Socket").first(),
    )
    for extra in (links, rings, trees, tuning):
        table = table.join(extra, on="comm_key", how="left")
    return with_socket_network(table.with_columns(pl.col("degraded").fill_null(value=False)))


SOCKET_NETWORK_REASON = (
    "TCP sockets instead of IB/RoCE (the log says NCCL's network is Socket: its `{}` lines; no "
    "`via NET/Socket` connection line needed)"
)
"""Why a communicator spanning nodes is degraded when the log names the socket network (`NcclLog.networks`).
"""


def with_socket_network(table: pl.DataFrame) -> pl.DataFrame:
    """`table` (one row per communicator or group: networks, network_evidence, nodes, transports, degraded,
    degraded_reason) with `uses_socket`: a `via NET/Socket` connection, or the socket network across nodes."""
    socket_link = pl.col("transports").list.contains("NET/Socket").fill_null(value=False)
    socket_net = (pl.col("networks").list.contains("Socket") & (pl.col("nodes") > 1)).fill_null(value=False)
    reason = pl.format(SOCKET_NETWORK_REASON, pl.col("network_evidence"))
    return table.with_columns(
        uses_socket=socket_link | socket_net,
        degraded=pl.col("degraded") | socket_net,
        degraded_reason=pl.when(socket_net & ~socket_link).then(reason).otherwise(pl.col("degraded_reason")),
    )


def _with_collective(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` (COLL rows with `size_bytes`, S of one call:
    `traceview.parsers.nccl_log._rules.with_call_size`) with `collective`."""
    return frame.with_columns(collective=canonical_collective_expr(pl.col("op")))


def call_table(logs: Sequence[NcclLog], members: pl.DataFrame) -> pl.DataFrame:
    """The COLL lines kept as rows (the first of each log, `NcclLog.collectives`) with comm_key and S per
    docs/metrics.md, "Collectives": what call-sequence matching reads (a communicator's first calls are the
    ones that identify it)."""
    return _with_collective(owned(logs, "collectives", members))


def call_summary(logs: Sequence[NcclLog], members: pl.DataFrame) -> pl.DataFrame:
    """The per-collective call table over every COLL line (`NcclLog.call_totals`): per (comm_key, op, dtype)
    calls, total bytes, smallest and largest S."""
    totals = _with_collective(owned(logs, "call_totals", members))
    return (
        totals.group_by("comm_key", "op", "dtype")
        .agg(
            pl.col("calls").sum(),
            pl.col("bytes").sum(),
            min_size_bytes=pl.col("size_bytes").min(),
            max_size_bytes=pl.col("size_bytes").max(),
        )
        .sort("comm_key", "calls", "op", "dtype", descending=[False, True, False, False], nulls_last=True)
    )


def degraded_table(logs: Sequence[NcclLog], members: pl.DataFrame) -> pl.DataFrame:
    """Degraded connections per (comm_key, kind, via, reason): connections and processes (comm_key null: the
    connection's communicator is not known)."""
    links = stacked(logs, "transports").filter(pl.col("degraded"))
    links = links.join(members.select(*PROCESS, "comm_key"), on=PROCESS, how="left")
    return (
        links.group_by("comm_key", "kind", "via", "degraded_reason")
        .agg(connections=pl.len().cast(pl.Int64), processes=pl.col("process").n_unique().cast(pl.Int64))
        .sort("comm_key", "kind", "via", nulls_last=True)
    )


def algorithm_mix(logs: Sequence[NcclLog]) -> pl.DataFrame:
    """TUNING choices per (op, message-size bucket of NCCL's byte count, algo, proto): choices, over every
    TUNING line (`NcclLog.tuning_totals`); `algorithm_source` `nccl_log` (what NCCL chose, unlike the name of
    a NCCL >= 2.19 kernel)."""
    tuning = stacked(logs, "tuning_totals").with_columns(
        pl.col("op").fill_null("any"), *size_bucket_exprs(pl.col("bytes"))
    )
    return (
        tuning.group_by("op", "size_bucket", "size_bucket_bytes", "algo", "proto")
        .agg(pl.col("choices").sum())
        .sort("op", "size_bucket_bytes", "choices", descending=[False, False, True])
        .with_columns(pl.lit(NCCL_LOG_SOURCE).alias("algorithm_source"))
    )


NCCL_LOG_SOURCE = "nccl_log"
"""`algorithm_source` of the algorithm and protocol NCCL_DEBUG's TUNING lines say were chosen."""


def topology(members: pl.DataFrame) -> pl.DataFrame:
    """Per host: processes and the CUDA devices its communicators ran on."""
    return (
        members.group_by(pl.col("host").fill_null("unknown"))
        .agg(
            processes=pl.col("process").n_unique().cast(pl.Int64),
            gpus=pl.col("cuda_dev").drop_nulls().unique().sort(),
        )
        .sort("host")
    )


def warning_table(logs: Sequence[NcclLog]) -> pl.DataFrame:
    """Warnings of every log per kind: count and the first text seen."""
    schema = {"kind": pl.Utf8, "count": pl.Int64, "example": pl.Utf8}
    counted = pl.concat([pl.DataFrame(schema=schema), *(warning_counts(log).cast(schema) for log in logs)])  # type: ignore[arg-type]
    return counted.group_by("kind", maintain_order=True).agg(pl.col("count").sum(), pl.col("example").first())


def merged_settings(logs: Sequence[NcclLog]) -> dict[str, str]:
    """`NCCL_X set by environment` of every log: name -> the distinct values, comma-separated."""
    names = sorted({name for log in logs for name in log.settings})
    return {
        name: ", ".join(sorted({log.settings[name] for log in logs if name in log.settings}))
        for name in names
    }


def socket_evidence(logs: Sequence[NcclLog]) -> str | None:
    """The lines that name the socket network, when every log names that network and only it (else None)."""
    if not logs or any(log.network_in_use != "Socket" for log in logs):
        return None
    labels = {label for log in logs for label in log.networks.get_column("evidence").to_list()}
    return " / ".join(sorted(labels))


def inter_network(logs: Sequence[NcclLog]) -> tuple[str | None, str]:
    """("Socket", its evidence) when the logs say NCCL crosses nodes over TCP sockets: every log names the
    socket network (`NET/IB : No device found`, `NET/Socket : Using ...`, `Using network Socket`), or every
    network connection the logs print is `via NET/Socket`; else (None, "")."""
    evidence = socket_evidence(logs)
    if evidence:
        return "Socket", evidence
    kinds = stacked(logs, "transports").get_column("kind") if logs else pl.Series("kind", [], pl.Utf8)
    network = kinds.filter(kinds.str.starts_with("NET/"))
    if network.len() and (network == "NET/Socket").all():
        return "Socket", f"{network.len()} connection line(s) `via NET/Socket`, none over another network"
    return None, ""
