"""NCCL_DEBUG logs joined to a run's traces (docs/metrics.md, "NCCL log").

Several logs (one per host, per process or one for the job) are read together: a process is `host:pid`
(`log<i>:pid` where the poster stripped the host), a rank is one GPU of a process (`host:pid[cudaDev]`), a
communicator across processes is its `commId` (NCCL 2.16+), else `nranks=N #k`, the k-th communicator of N
ranks each GPU's process created (`ambiguous` when two of its processes claim one rank: several communicators
lumped, so its rank set is not used). A GPU's global rank is its rank in the largest communicator (the world),
trusted only when that is at least as large as every process group of the traces. Each communicator is matched
to one process group of the traces, the first method that decides winning (`METHODS`): PyTorch's
`ProcessGroupNCCL created ncclComm_ 0x...` line naming the group; the rank set and size (the communicator's
global ranks inside the group's ranks, nranks = group size, exactly one such group); the call sequence (the
share of the group's (collective, S) signatures that the communicator's COLL lines also show, at least
`MIN_SEQUENCE_SHARE`, one best group; read from the COLL lines each log kept as rows, its first
`traceview.parsers.nccl_log.MAX_CALL_ROWS`: a communicator's first calls are the ones that identify it, and
the call table counts every line). A group whose communicators run over a transport of `LINK_OVERRIDES` gets
that hardware link's B for the prediction, with provenance "nccl log", and every degraded transport is a
verdict flag.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import field

import polars as pl

from traceview.collectives.tables import CollectiveAnalysis
from traceview.core.hardware import LinkSpec, link
from traceview.core.records import record
from traceview.model.nccl_log import NcclLog
from traceview.model.trace import Run
from traceview.nccl._group_matching import (
    match_groups,
    pg_line_matches,
    sequence_shares,
    trace_groups,
)
from traceview.nccl.foreign import TraceFacts, log_notes, split_foreign
from traceview.nccl.join_tables import (
    algorithm_mix,
    call_summary,
    call_table,
    communicator_table,
    degraded_table,
    inter_network,
    members_frame,
    merged_settings,
    socket_evidence,
    topology,
    warning_table,
    with_socket_network,
)

PROVENANCE = "nccl log"
LINK_OVERRIDES: tuple[tuple[str, str, str], ...] = (("uses_socket", "NET/Socket", "tcp_socket"),)
"""(group flag column, what it means, hardware-table link whose B replaces the table's for a group flagged
so). `uses_socket`: a `via NET/Socket` connection, or the log's socket network across nodes
(`traceview.nccl.join_tables.with_socket_network`)."""


@record
class LinkOverride:
    """The link a process group's traffic really takes, read from the NCCL log: B for the prediction."""

    group: str
    group_size: int
    link: LinkSpec
    reason: str
    provenance: str = PROVENANCE

    @property
    def bandwidth_bytes_per_s(self) -> float:
        """B of the alpha-beta model on this link (one direction, per GPU)."""
        return self.link.bandwidth_bytes_per_s


@record
class NcclJoin:
    """NCCL logs read together and joined to the traces; renderers read it and never compute.

    `members`: one row per (process, communicator): comm_key, process, host, pid, comm, comm_id, nranks,
    comm_rank, global_rank, cuda_dev, bus_id, n_nodes. `communicators`: one row per comm_key (nranks,
    pointers, global ranks, hosts, GPUs, nodes, transports, degraded reason, ring/tree channels, algo/proto
    choices, the group matched and how). `groups`: per traced process group its communicators, nodes, hosts,
    transports, degraded reason and the B override (link, bandwidth_Bps, bandwidth_source; null: the hardware
    table's). `calls`: COLL lines per (comm_key, op, dtype). `algorithms`: TUNING choices per (op, message
    size, algo, proto). `topology`: per host its processes and GPUs. `foreign`: (path, reasons) of the logs
    set apart as another job's (`traceview.nccl.foreign`); `paths` are the logs joined.
    """

    paths: tuple[str, ...]
    versions: tuple[str, ...]
    settings: Mapping[str, str]
    skipped: tuple[tuple[str, str], ...]
    members: pl.DataFrame
    communicators: pl.DataFrame
    groups: pl.DataFrame
    calls: pl.DataFrame
    algorithms: pl.DataFrame
    topology: pl.DataFrame
    warnings: pl.DataFrame
    degraded: pl.DataFrame
    hosts_by_rank: Mapping[int, str]
    link_overrides: tuple[LinkOverride, ...]
    verdict_flags: tuple[str, ...]
    notes: tuple[str, ...] = field(default=())
    foreign: tuple[tuple[str, str], ...] = field(default=())
    inter_network: str | None = None  # "Socket" when the logs say NCCL crosses nodes over TCP sockets
    inter_network_evidence: str = ""

    @property
    def spans_nodes(self) -> dict[str, bool]:
        """Process group -> whether its communicators span nodes (nodes > 1), for the groups the logs show."""
        known = self.groups.filter(pl.col("nodes").is_not_null())
        return dict(zip(known["group"].to_list(), (known["nodes"] > 1).to_list(), strict=True))

    @property
    def ranks_per_node(self) -> int | None:
        """The most common number of ranks per host in `hosts_by_rank` (None without hosts)."""
        counts = Counter(Counter(self.hosts_by_rank.values()).values())
        return max(counts, key=lambda k: (counts[k], -k)) if counts else None

    @property
    def link_override(self) -> LinkOverride | None:
        """The override of the largest group that has one (the data-parallel closed form's B), else None."""
        ranked = sorted(self.link_overrides, key=lambda o: (-o.group_size, o.bandwidth_bytes_per_s))
        return ranked[0] if ranked else None


def group_table(
    groups: pl.DataFrame, comms: pl.DataFrame, hosts: Mapping[int, str], socket_evidence: str | None = None
) -> pl.DataFrame:
    """Per process group: communicators, method, nodes, hosts, transports, degraded reason (comms matched).

    A group no communicator was matched to, spanning nodes, uses sockets when every log names the socket
    network (`socket_evidence`: the lines that say so, `socket_evidence`; None: not every log does)."""
    matched = (
        comms.filter(pl.col("group").is_not_null())
        .group_by("group")
        .agg(
            comm_keys=pl.col("comm_key").sort(),
            method=pl.col("method").first(),
            nodes=pl.col("nodes").max(),
            transports=pl.col("transports")
            .list.explode(keep_nulls=False, empty_as_null=False)
            .unique()
            .sort(),
            degraded=pl.col("degraded").any(),
            degraded_reason=pl.col("degraded_reason").drop_nulls().first(),
            uses_socket=pl.col("uses_socket").any(),
        )
    )
    rank_host = pl.DataFrame(
        {"rank": list(hosts), "host": list(hosts.values())}, schema={"rank": pl.Int64, "host": pl.Utf8}
    )
    spans = groups.select("group", rank=pl.col("ranks")).explode("rank").join(rank_host, on="rank")
    spanned = spans.group_by("group").agg(hosts=pl.col("host").unique().sort())
    table = groups.join(matched, on="group", how="left").join(spanned, on="group", how="left")
    table = table.with_columns(
        pl.col("degraded").fill_null(value=False),
        nodes=pl.coalesce(pl.col("nodes"), pl.col("hosts").list.len().cast(pl.Int64)),
    )
    unmatched = pl.col("comm_keys").is_null()
    by_log = with_socket_network(
        table.filter(unmatched).with_columns(
            networks=pl.lit(["Socket"] if socket_evidence else [], pl.List(pl.Utf8)),
            network_evidence=pl.lit(socket_evidence, pl.Utf8),
        )
    ).drop("networks", "network_evidence")
    return pl.concat([table.filter(~unmatched), by_log], how="diagonal_relaxed").sort("group")


def link_overrides(groups: pl.DataFrame) -> tuple[LinkOverride, ...]:
    """A `LinkOverride` for every group whose communicators use a transport of `LINK_OVERRIDES`."""
    found: list[LinkOverride] = []
    for column, kind, key in LINK_OVERRIDES:
        using = groups.filter(pl.col(column).fill_null(value=False))
        found += [
            LinkOverride(row["group"], row["size"], link(key), row["degraded_reason"] or kind)
            for row in using.iter_rows(named=True)  # one per group: a handful, not per event
        ]
    return tuple(found)


def _override_frame(overrides: Sequence[LinkOverride]) -> pl.DataFrame:
    """group, link (hardware-table key), bandwidth_Bps and bandwidth_source of every override."""
    return pl.DataFrame(
        [(o.group, o.link.key, o.bandwidth_bytes_per_s, o.provenance) for o in overrides],
        schema={"group": pl.Utf8, "link": pl.Utf8, "bandwidth_Bps": pl.Float64, "bandwidth_source": pl.Utf8},
        orient="row",
    )


def _flags(
    comms: pl.DataFrame, groups: pl.DataFrame, degraded: pl.DataFrame, overrides: Sequence[LinkOverride]
) -> tuple[str, ...]:
    """One verdict flag per degraded group (with the B used), per degraded unmatched communicator, and per
    reason of degraded connections whose communicator the logs do not show."""
    by_group = {o.group: o for o in overrides}
    merged: dict[tuple[str, str], list[str]] = {}
    for group, reason in groups.filter(pl.col("degraded")).select("group", "degraded_reason").iter_rows():
        override = by_group.get(group)
        b_text = (
            f"; the prediction's B for them is {override.bandwidth_bytes_per_s / 1e9:.2f} GB/s "
            f"(hardware table row {override.link.key}, provenance: {PROVENANCE})"
            if override
            else ""
        )
        merged.setdefault((reason, b_text), []).append(group)
    flags = [
        f"NCCL log: process group(s) {', '.join(names)} use {reason}{b_text}."
        for (reason, b_text), names in merged.items()
    ]
    for row in comms.filter(pl.col("degraded") & pl.col("group").is_null()).iter_rows(named=True):
        flags.append(
            f"NCCL log: communicator {row['comm_key']} ({row['nranks']} ranks) uses {row['degraded_reason']}."
        )
    orphans = (
        degraded.filter(pl.col("comm_key").is_null())
        .group_by("degraded_reason", maintain_order=True)
        .agg(pl.col("connections").sum())
    )
    for reason, connections in orphans.iter_rows():
        flags.append(
            f"NCCL log: {connections} connection(s) of communicators the logs do not show use {reason}."
        )
    return tuple(flags)


def _hosts(members: pl.DataFrame) -> tuple[dict[int, str], tuple[str, ...]]:
    """Global rank -> host, and a note for every rank the logs place on two hosts (the first is kept)."""
    pairs = members.filter(pl.col("global_rank").is_not_null() & pl.col("host").is_not_null())
    per_rank = pairs.group_by("global_rank").agg(pl.col("host").unique().sort()).sort("global_rank")
    hosts = dict(
        zip(per_rank["global_rank"].to_list(), [h[0] for h in per_rank["host"].to_list()], strict=True)
    )
    notes = tuple(
        f"NCCL logs place rank {rank} on several hosts ({', '.join(names)}); using {names[0]}"
        for rank, names in per_rank.filter(pl.col("host").list.len() > 1).iter_rows()
    )
    return hosts, notes


def _matching_notes(comms: pl.DataFrame, logs: Sequence[NcclLog], with_traces: bool) -> tuple[str, ...]:
    """What the join could not settle: communicators told apart by nothing, capped call rows, communicators
    matched to no process group (only said when there are traces to match)."""
    unmatched = comms.filter(pl.col("group").is_null()).get_column("comm_key").to_list()
    lumped = comms.filter(pl.col("ambiguous")).get_column("comm_key").to_list()
    notes = (
        [f"NCCL communicators without commId that cannot be told apart: {', '.join(lumped)}"]
        if lumped
        else []
    )
    notes += [
        f"NCCL log {log.path}: call-sequence matching read its first {log.collective_rows_kept} of "
        f"{log.collective_calls_seen} COLL lines; the call table counts them all"
        for log in logs
        if log.collective_rows_kept < log.collective_calls_seen
    ]
    if with_traces and unmatched:
        notes.append(f"NCCL communicators matched to no process group: {', '.join(unmatched)}")
    return tuple(notes)


def join_nccl(
    collectives: CollectiveAnalysis | None,
    logs: Sequence[NcclLog],
    skipped: Sequence[tuple[str, str]] = (),
    run: Run | None = None,
) -> NcclJoin:
    """Read `logs` together and join them to the run's process groups (`collectives`, None: logs only).

    With the traces (`collectives`), a log another job wrote (`traceview.nccl.foreign`, checked against
    `run`'s metadata and the traced groups) is set apart with a note, not joined."""
    groups, signatures = trace_groups(collectives)
    traces = None
    if collectives is not None:
        traces = TraceFacts.of_run(run, groups.get_column("size").drop_nulls().to_list())
    logs, foreign = split_foreign(logs, traces)
    sizes = groups.get_column("size").drop_nulls()
    members = members_frame(logs, int(sizes.max()) if sizes.len() else None)  # type: ignore[arg-type]
    calls = call_table(logs, members)
    comms = communicator_table(logs, members)
    found = pl.concat(
        [
            pg_line_matches(logs, members, groups),
            match_groups(comms, groups, sequence_shares(calls, signatures)),
        ]
    ).unique("comm_key", keep="first", maintain_order=True)
    comms = comms.join(found, on="comm_key", how="left")
    hosts, notes = _hosts(members)
    notes = log_notes(logs, foreign) + notes
    table = group_table(groups, comms, hosts, socket_evidence(logs))
    network, network_evidence = inter_network(logs)
    overrides = link_overrides(table)
    table = table.join(_override_frame(overrides), on="group", how="left")
    degraded = degraded_table(logs, members)
    notes += _matching_notes(comms, logs, with_traces=collectives is not None)
    return NcclJoin(
        paths=tuple(log.path for log in logs),
        versions=tuple(sorted({v for log in logs for v in log.versions.get_column("version").to_list()})),
        settings=merged_settings(logs),
        skipped=tuple(skipped),
        members=members,
        communicators=comms,
        groups=table,
        calls=call_summary(logs, members),
        algorithms=algorithm_mix(logs),
        topology=topology(members),
        warnings=warning_table(logs),
        degraded=degraded,
        hosts_by_rank=hosts,
        link_overrides=overrides,
        verdict_flags=_flags(comms, table, degraded, overrides),
        notes=notes,
        foreign=tuple(foreign),
        inter_network=network,
        inter_network_evidence=network_evidence,
    )


def log_hosts(rank_hosts: Sequence[tuple[int, str]], nccl: NcclJoin | None) -> dict[int, str]:
    """Rank -> host for clock alignment: the NCCL logs' hosts, overridden by hosts the user gave."""
    return {**(dict(nccl.hosts_by_rank) if nccl else {}), **dict(rank_hosts)}
