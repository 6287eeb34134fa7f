"""NCCL_DEBUG logs joined to a run's traces (docs/metrics.md, "NCCL log").

Several logs (one per host, per process or one for the job) are read together: a process is `host:pid`
(`log<i>:pid` where the poster stripped the host), a communicator across processes is its `commId` (NCCL
2.16+), else `nranks=N #k`, the k-th communicator of N ranks each process created (`ambiguous` when two of its
processes claim one rank: several communicators lumped, so its rank set is not used). A process's global rank is
its rank in the largest communicator (the world), trusted only when that is at least as large as every process
group of the traces. Each communicator is matched to one process group of the traces, the first method that
decides winning (`METHODS`): PyTorch's `ProcessGroupNCCL created ncclComm_ 0x...` line naming the group; the
rank set and size (the communicator's global ranks inside the group's ranks, nranks = group size, exactly one
such group); the call sequence (the share of the group's (collective, S) signatures that the communicator's
COLL lines also show, at least `MIN_SEQUENCE_SHARE`, one best group). A group whose communicators run over a
transport of `LINK_OVERRIDES` gets that hardware link's B for the prediction, with provenance "nccl log", and
every degraded transport is a verdict flag.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import polars as pl

from traceview.collective_tables import CollectiveAnalysis, size_bucket_exprs
from traceview.hardware import LinkSpec, link
from traceview.nccl import NcclLog, empty_frame, warning_counts
from traceview.verdict import Verdict
from traceview.vocab import canonical_collective_expr

PROVENANCE = "nccl log"
METHODS = ("ProcessGroupNCCL line", "rank set and size", "call sequence")
MIN_SEQUENCE_SHARE = 0.5
"""Least share of a group's (collective, S) signatures a communicator's COLL lines must show to match it."""
PER_RANK_COUNT_OPS = ("AllGather", "ReduceScatter")
"""COLL `count` of these is one rank's share: S (SPEC 3) = count x element size x nranks."""
LINK_OVERRIDES: tuple[tuple[str, str], ...] = (("NET/Socket", "tcp_socket"),)
"""Degraded transport kind -> hardware-table link whose B replaces the table's for a group that uses it."""
PROCESS = ["process", "comm"]


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class NcclJoin:
    """NCCL logs read together and joined to the traces; renderers read it and never compute.

    `members`: one row per (process, communicator): comm_key, process, host, pid, comm, comm_id, nranks,
    comm_rank, global_rank, cuda_dev, bus_id, n_nodes. `communicators`: one row per comm_key (nranks, pointers,
    global ranks, hosts, GPUs, nodes, transports, degraded reason, ring/tree channels, algo/proto choices, the
    group matched and how). `groups`: per traced process group its communicators, nodes, hosts, transports,
    degraded reason and the B override. `calls`: COLL lines per (comm_key, op, dtype). `algorithms`: TUNING
    choices per (op, message size, algo, proto). `topology`: per host its processes and GPUs.
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

    @property
    def link_override(self) -> LinkOverride | None:
        """The override of the largest group that has one (the data-parallel closed form's B), else None."""
        ranked = sorted(self.link_overrides, key=lambda o: (-o.group_size, o.bandwidth_bytes_per_s))
        return ranked[0] if ranked else None


def _stacked(logs: Sequence[NcclLog], name: str) -> pl.DataFrame:
    """Frame `name` of every log, one above the other, with `log` (index) and `process`."""
    frames = [empty_frame(name).with_columns(log=pl.lit(0, pl.Int64))]
    frames += [log.frame(name).with_columns(log=pl.lit(index, pl.Int64)) for index, log in enumerate(logs)]
    host = pl.coalesce(pl.col("host"), pl.format("log{}", pl.col("log")))
    process = pl.format("{}:{}", host, pl.col("pid").cast(pl.Utf8).fill_null("?"))
    return pl.concat(frames).with_columns(process=process)


def members_frame(logs: Sequence[NcclLog], world_size: int | None = None) -> pl.DataFrame:
    """One row per (process, communicator) with its comm_key and the process's global rank (module doc)."""
    comms = _stacked(logs, "communicators").unique(PROCESS, keep="first", maintain_order=True)
    ordinal = pl.col("line").rank("ordinal").over("process", "nranks").cast(pl.Int64) - 1
    comms = comms.with_columns(
        comm_key=pl.coalesce(
            pl.format("commId {}", "comm_id"), pl.format("nranks={} #{}", "nranks", ordinal)
        ),
        comm_rank=pl.col("rank"),
    )
    largest = comms.get_column("nranks").max()
    trusted = largest is not None and (world_size is None or int(largest) >= world_size)  # type: ignore[arg-type]
    world = comms.filter(pl.lit(trusted) & (pl.col("nranks") == largest)).sort("line")
    ranks = world.group_by("process").agg(global_rank=pl.col("comm_rank").first())
    columns = ["comm_key", "process", "host", "pid", "comm", "comm_id", "nranks", "comm_rank"]
    return comms.join(ranks, on="process", how="left").select(
        *columns, "global_rank", "cuda_dev", "bus_id", "n_nodes", "init_state",
        ambiguous=pl.col("comm_rank").is_duplicated().over("comm_key"),
    )  # fmt: skip


def _owned(logs: Sequence[NcclLog], name: str, members: pl.DataFrame) -> pl.DataFrame:
    """Frame `name` of every log with the comm_key of the communicator each row belongs to."""
    return _stacked(logs, name).join(members.select(*PROCESS, "comm_key"), on=PROCESS, how="inner")


def communicator_table(logs: Sequence[NcclLog], members: pl.DataFrame) -> pl.DataFrame:
    """One row per communicator across logs (see `NcclJoin`), without the match columns."""
    links = _owned(logs, "transports", members).group_by("comm_key").agg(
        transports=pl.col("kind").unique().sort(),
        degraded=pl.col("degraded").any(),
        degraded_reason=pl.col("degraded_reason").drop_nulls().first(),
    )
    rings = _owned(logs, "rings", members).group_by("comm_key").agg(ring_channels=pl.col("channel").n_unique())
    trees = _owned(logs, "trees", members).group_by("comm_key").agg(tree_channels=pl.col("channel").n_unique())
    tuning = _owned(logs, "tuning", members).group_by("comm_key").agg(
        algo_proto=pl.format("{}/{}", "algo", "proto").unique().sort()
    )
    gpu = pl.format("{}[{}]", pl.col("host").fill_null("?"), pl.col("cuda_dev").cast(pl.Utf8).fill_null("?"))
    table = members.group_by("comm_key", maintain_order=True).agg(
        pl.col("comm_id").drop_nulls().first(),
        pl.col("nranks").max(),
        pointers=pl.col("comm").unique().sort(),
        ranks_seen=pl.col("comm_rank").n_unique().cast(pl.Int64),
        ambiguous=pl.col("ambiguous").any(),
        global_ranks=pl.col("global_rank").filter(~pl.col("ambiguous").any()).drop_nulls().unique().sort(),
        hosts=pl.col("host").drop_nulls().unique().sort(),
        gpus=gpu.unique().sort(),
        nodes=pl.coalesce(pl.col("n_nodes").max(), pl.col("host").drop_nulls().n_unique().cast(pl.Int64)),
        init_complete=(pl.col("init_state") == "COMPLETE").sum().cast(pl.Int64),
    )
    for extra in (links, rings, trees, tuning):
        table = table.join(extra, on="comm_key", how="left")
    return table.with_columns(pl.col("degraded").fill_null(value=False))


def call_table(logs: Sequence[NcclLog], members: pl.DataFrame) -> pl.DataFrame:
    """COLL lines per (comm_key, op, dtype): calls, bytes (count x element size), and S per SPEC 3."""
    colls = _owned(logs, "collectives", members)
    collective = canonical_collective_expr(pl.col("op"))
    per_rank = collective.is_in(PER_RANK_COUNT_OPS)
    size = pl.when(per_rank).then(pl.col("bytes") * pl.col("nranks")).otherwise(pl.col("bytes"))
    return colls.with_columns(collective=collective, size_bytes=size)


def call_summary(calls: pl.DataFrame) -> pl.DataFrame:
    """The per-collective call table: per (comm_key, op, dtype) calls, total bytes, smallest and largest S."""
    return (
        calls.group_by("comm_key", "op", "dtype")
        .agg(
            calls=pl.len().cast(pl.Int64),
            bytes=pl.col("bytes").sum(),
            min_size_bytes=pl.col("size_bytes").min(),
            max_size_bytes=pl.col("size_bytes").max(),
        )
        .sort("comm_key", "calls", descending=[False, True])
    )


def trace_groups(collectives: CollectiveAnalysis | None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(groups, signatures): per process group its name, size and ranks; its distinct (collective, S)."""
    schema = {"group": pl.Utf8, "pg_name": pl.Utf8, "pg_desc": pl.Utf8, "size": pl.Int64, "ranks": pl.List(pl.Int64)}
    sig_schema = {"group": pl.Utf8, "collective": pl.Utf8, "size_bytes": pl.Int64}
    if collectives is None:
        return pl.DataFrame(schema=schema), pl.DataFrame(schema=sig_schema)
    listed = pl.col("pg_ranks").str.extract_all(r"-?\d+").cast(pl.List(pl.Int64))
    seen = pl.col("ranks_seen").str.extract_all(r"-?\d+").cast(pl.List(pl.Int64))
    groups = collectives.per_process_group.select(
        group=pl.col("pg_key"), pg_name=pl.col("pg_name"), pg_desc=pl.col("pg_desc"),
        size=pl.coalesce("group_size", listed.list.len().cast(pl.Int64)),
        ranks=pl.when(pl.col("pg_ranks").is_not_null()).then(listed)
        .when(seen.list.len() == pl.col("group_size")).then(seen),
    )  # fmt: skip
    kernels = collectives.kernels.filter(
        pl.col("first_in_call") & pl.col("collective").is_not_null() & pl.col("size_bytes").is_not_null()
    )
    signatures = kernels.select(group=pl.col("pg_key"), collective="collective", size_bytes="size_bytes")
    return groups.cast(schema), signatures.unique().cast(sig_schema)  # type: ignore[arg-type]


def _sequence_shares(calls: pl.DataFrame, signatures: pl.DataFrame) -> pl.DataFrame:
    """Per (comm_key, group): share of the group's distinct signatures the communicator's COLL lines show."""
    logged = calls.select("comm_key", "collective", "size_bytes").unique()
    totals = signatures.group_by("group").agg(total=pl.len())
    shared = signatures.join(logged, on=["collective", "size_bytes"]).group_by("comm_key", "group").agg(
        shared=pl.len()
    )
    return shared.join(totals, on="group").select("comm_key", "group", share=pl.col("shared") / pl.col("total"))


def _pg_line_matches(logs: Sequence[NcclLog], members: pl.DataFrame, groups: pl.DataFrame) -> pl.DataFrame:
    """comm_key -> group from `ProcessGroupNCCL created ncclComm_ 0x...` lines (pointer, and pid when given)."""
    lines = _stacked(logs, "pg_comms").filter(pl.col("pg").is_not_null()).select("comm", "pg", line_pid="pid")
    found = members.join(lines, on="comm").filter(pl.col("line_pid").is_null() | (pl.col("line_pid") == pl.col("pid")))
    named = found.join(groups.select("group", "pg_name"), left_on="pg", right_on="pg_name")
    named = named.select("comm_key", "group").unique(maintain_order=True)
    return named.filter(pl.len().over("comm_key") == 1).with_columns(
        method=pl.lit(METHODS[0]), share=pl.lit(None, pl.Float64)
    )


def match_groups(comms: pl.DataFrame, groups: pl.DataFrame, shares: pl.DataFrame) -> pl.DataFrame:
    """comm_key -> group by rank set and size, else by call sequence (module doc): comm_key, group, method,
    share."""
    pairs = comms.select("comm_key", "nranks", "global_ranks").join(groups, how="cross")
    inside = pl.col("global_ranks").list.set_difference(pl.col("ranks")).list.len() == 0
    pairs = pairs.filter(pl.col("nranks") == pl.col("size")).with_columns(
        by_ranks=(pl.col("global_ranks").list.len() > 0) & pl.col("ranks").is_not_null() & inside
    )
    pairs = pairs.with_columns(rank_hits=pl.col("by_ranks").sum().over("comm_key"))
    candidates = pairs.filter(pl.col("by_ranks") | (pl.col("rank_hits") == 0)).join(
        shares, on=["comm_key", "group"], how="left"
    )
    candidates = candidates.with_columns(
        pl.col("share").fill_null(0.0), count=pl.len().over("comm_key")
    ).with_columns(best=pl.col("share").max().over("comm_key"))
    ties = ((pl.col("share") == pl.col("best")).sum().over("comm_key")) == 1
    by_ranks = candidates.filter(pl.col("by_ranks") & (pl.col("count") == 1)).with_columns(method=pl.lit(METHODS[1]))
    by_sequence = candidates.filter(
        ((pl.col("count") > 1) | ~pl.col("by_ranks")) & (pl.col("share") == pl.col("best"))
        & (pl.col("share") >= MIN_SEQUENCE_SHARE) & ties
    ).with_columns(method=pl.lit(METHODS[2]))  # fmt: skip
    return pl.concat([by_ranks, by_sequence]).select("comm_key", "group", "method", "share")


def group_table(groups: pl.DataFrame, comms: pl.DataFrame, hosts: Mapping[int, str]) -> pl.DataFrame:
    """Per process group: communicators, method, nodes, hosts, transports, degraded reason (comms matched)."""
    matched = comms.filter(pl.col("group").is_not_null()).group_by("group").agg(
        comm_keys=pl.col("comm_key").sort(),
        method=pl.col("method").first(),
        nodes=pl.col("nodes").max(),
        transports=pl.col("transports").flatten().drop_nulls().unique().sort(),
        degraded=pl.col("degraded").any(),
        degraded_reason=pl.col("degraded_reason").drop_nulls().first(),
    )
    rank_host = pl.DataFrame({"rank": list(hosts), "host": list(hosts.values())}, schema={"rank": pl.Int64, "host": pl.Utf8})
    spans = groups.select("group", rank=pl.col("ranks")).explode("rank").join(rank_host, on="rank")
    spanned = spans.group_by("group").agg(hosts=pl.col("host").unique().sort())
    table = groups.join(matched, on="group", how="left").join(spanned, on="group", how="left")
    return table.with_columns(
        pl.col("degraded").fill_null(value=False),
        nodes=pl.coalesce(pl.col("nodes"), pl.col("hosts").list.len().cast(pl.Int64)),
    ).sort("group")


def link_overrides(groups: pl.DataFrame) -> tuple[LinkOverride, ...]:
    """A `LinkOverride` for every group whose communicators use a transport of `LINK_OVERRIDES`."""
    found: list[LinkOverride] = []
    for kind, key in LINK_OVERRIDES:
        using = groups.filter(pl.col("degraded") & pl.col("transports").list.contains(kind))
        found += [
            LinkOverride(row["group"], row["size"], link(key), row["degraded_reason"] or kind)
            for row in using.iter_rows(named=True)  # one per group: a handful, not per event
        ]
    return tuple(found)


def _flags(comms: pl.DataFrame, groups: pl.DataFrame, overrides: Sequence[LinkOverride]) -> tuple[str, ...]:
    """One verdict flag per degraded group (with the B used) and per degraded unmatched communicator."""
    by_group = {o.group: o for o in overrides}
    flags = []
    for row in groups.filter(pl.col("degraded")).iter_rows(named=True):
        override = by_group.get(row["group"])
        b_text = (
            f"; the prediction's B is {override.bandwidth_bytes_per_s / 1e9:.2f} GB/s ({override.link.name}, "
            f"from the {PROVENANCE})" if override else ""
        )
        flags.append(f"NCCL log: process group {row['group']} uses {row['degraded_reason']}{b_text}.")
    for row in comms.filter(pl.col("degraded") & pl.col("group").is_null()).iter_rows(named=True):
        flags.append(f"NCCL log: communicator {row['comm_key']} ({row['nranks']} ranks) uses {row['degraded_reason']}.")
    return tuple(flags)


def _hosts(members: pl.DataFrame) -> tuple[dict[int, str], tuple[str, ...]]:
    """Global rank -> host, and a note for every rank the logs place on two hosts (the first is kept)."""
    pairs = members.filter(pl.col("global_rank").is_not_null() & pl.col("host").is_not_null())
    per_rank = pairs.group_by("global_rank").agg(pl.col("host").unique().sort()).sort("global_rank")
    hosts = dict(zip(per_rank["global_rank"].to_list(), [h[0] for h in per_rank["host"].to_list()], strict=True))
    notes = tuple(
        f"NCCL logs place rank {rank} on several hosts ({', '.join(names)}); using {names[0]}"
        for rank, names in per_rank.filter(pl.col("host").list.len() > 1).iter_rows()
    )
    return hosts, notes


def algorithm_mix(logs: Sequence[NcclLog]) -> pl.DataFrame:
    """TUNING choices per (op, message-size bucket of NCCL's byte count, algo, proto): choices."""
    tuning = _stacked(logs, "tuning").with_columns(pl.col("op").fill_null("any"), *size_bucket_exprs(pl.col("bytes")))
    return (
        tuning.group_by("op", "size_bucket", "size_bucket_bytes", "algo", "proto")
        .agg(choices=pl.len().cast(pl.Int64))
        .sort("op", "size_bucket_bytes", "choices", descending=[False, False, True])
    )


def topology(members: pl.DataFrame) -> pl.DataFrame:
    """Per host: processes and the CUDA devices its communicators ran on."""
    return (
        members.group_by(pl.col("host").fill_null("unknown"))
        .agg(processes=pl.col("process").n_unique().cast(pl.Int64), gpus=pl.col("cuda_dev").drop_nulls().unique().sort())
        .sort("host")
    )


def _warnings(logs: Sequence[NcclLog]) -> pl.DataFrame:
    schema = {"kind": pl.Utf8, "count": pl.Int64, "example": pl.Utf8}
    counted = pl.concat([pl.DataFrame(schema=schema), *(warning_counts(log).cast(schema) for log in logs)])  # type: ignore[arg-type]
    return counted.group_by("kind", maintain_order=True).agg(pl.col("count").sum(), pl.col("example").first())


def _settings(logs: Sequence[NcclLog]) -> dict[str, str]:
    names = sorted({name for log in logs for name in log.settings})
    return {name: ", ".join(sorted({log.settings[name] for log in logs if name in log.settings})) for name in names}


def join_nccl(
    collectives: CollectiveAnalysis | None,
    logs: Sequence[NcclLog],
    skipped: Sequence[tuple[str, str]] = (),
) -> NcclJoin:
    """Read `logs` together and join them to the run's process groups (`collectives`, None: logs only)."""
    groups, signatures = trace_groups(collectives)
    sizes = groups.get_column("size").drop_nulls()
    members = members_frame(logs, int(sizes.max()) if sizes.len() else None)  # type: ignore[arg-type]
    calls = call_table(logs, members)
    comms = communicator_table(logs, members)
    found = pl.concat([
        _pg_line_matches(logs, members, groups),
        match_groups(comms, groups, _sequence_shares(calls, signatures)),
    ]).unique("comm_key", keep="first", maintain_order=True)  # fmt: skip
    comms = comms.join(found, on="comm_key", how="left")
    hosts, notes = _hosts(members)
    table = group_table(groups, comms, hosts)
    overrides = link_overrides(table)
    unmatched = comms.filter(pl.col("group").is_null()).get_column("comm_key").to_list()
    lumped = comms.filter(pl.col("ambiguous")).get_column("comm_key").to_list()
    if lumped:
        notes += (f"NCCL communicators without commId that cannot be told apart: {', '.join(lumped)}",)
    if collectives is not None and unmatched:
        notes += (f"NCCL communicators matched to no process group: {', '.join(unmatched)}",)
    return NcclJoin(
        paths=tuple(log.path for log in logs),
        versions=tuple(sorted({v for log in logs for v in log.versions.get_column("version").to_list()})),
        settings=_settings(logs),
        skipped=tuple(skipped),
        members=members,
        communicators=comms,
        groups=table,
        calls=call_summary(calls),
        algorithms=algorithm_mix(logs),
        topology=topology(members),
        warnings=_warnings(logs),
        degraded=_stacked(logs, "transports").filter(pl.col("degraded")),
        hosts_by_rank=hosts,
        link_overrides=overrides,
        verdict_flags=_flags(comms, table, overrides),
        notes=notes,
    )


def log_hosts(rank_hosts: Sequence[tuple[int, str]], nccl: NcclJoin | None) -> dict[int, str]:
    """Rank -> host for clock alignment: the NCCL logs' hosts, overridden by hosts the user gave."""
    return {**(dict(nccl.hosts_by_rank) if nccl else {}), **dict(rank_hosts)}


def flag_verdict(verdict: Verdict, nccl: NcclJoin | None) -> Verdict:
    """The verdict with the NCCL log's flags (degraded transports, B overrides) appended to its sentence."""
    if nccl is None or not nccl.verdict_flags:
        return verdict
    return replace(verdict, sentence=" ".join((verdict.sentence, *nccl.verdict_flags)))
