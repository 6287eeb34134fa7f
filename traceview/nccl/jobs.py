"""NCCL_DEBUG logs read as the jobs they come from (docs/metrics.md, "NCCL log", "Jobs"): the `nccl` command's
view of a folder of logs.

Logs are grouped into jobs by their communicators' ids: two logs whose communicators share a `commId` (NCCL
2.16+ draws it at random for each communicator and prints it on every rank's init line) are one job, and so
are logs linked through others; two jobs' logs in one folder stay two. A log that names no `commId` (older
NCCL) is one job with the other such logs of the same NCCL version and world size (the largest communicator);
one that states neither its version nor a communicator's size (a fragment) is a job of its own: nothing links
it.

Each job's logs are read together (`traceview.nccl.join.join_nccl`): each communicator's ranks merged into
one row, with the ranks seen out of its size and those missing (`7 of 8`, a rank whose log is absent), its
hosts, transports, ring and tree channels, NCCL's algorithm/protocol choices, and whether its init completed;
and the job's failures (`traceview.nccl.problems`).
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from traceview.core.records import record
from traceview.model.nccl_log import NcclLog
from traceview.nccl.join import NcclJoin, join_nccl
from traceview.nccl.problems import nccl_gate_figures, nccl_problems

COMMUNICATOR_COLUMNS = (
    "comm_key",
    "nranks",
    "ranks_seen",
    "missing_ranks",
    "init_complete",
    "init_failed",
    "hosts",
    "nodes",
    "transports",
    "degraded_reason",
    "ring_channels",
    "tree_channels",
    "algo_proto",
)
"""The columns of a job's communicator table, in order."""


@record
class NcclJob:
    """One job's logs read together: its communicators merged across ranks, its failures and the join."""

    index: int
    logs: tuple[str, ...]
    versions: tuple[str, ...]
    hosts: tuple[str, ...]
    communicators: pl.DataFrame  # COMMUNICATOR_COLUMNS
    problems: pl.DataFrame  # kind, count, example (traceview.nccl.problems)
    join: NcclJoin

    @property
    def algorithms(self) -> pl.DataFrame:
        """NCCL's algorithm and protocol choices of the job (TUNING lines), those it made."""
        return self.join.algorithms.filter(pl.col("choices") > 0)

    @property
    def errors(self) -> int:
        """Failures of the job (`nccl_errors`)."""
        return int(nccl_gate_figures(self.join)["nccl_errors"] or 0)


def _links(logs: Sequence[NcclLog]) -> list[set[str]]:
    return [set(log.communicators.get_column("comm_id").drop_nulls().to_list()) for log in logs]


def _key_without_ids(log: NcclLog, index: int) -> tuple[object, ...]:
    """What links a log without `commId`s to others: its NCCL version and world size, both stated; a log that
    lacks either is a job of its own (`index`: its place among the logs)."""
    sizes = log.communicators.get_column("nranks").drop_nulls()
    size = int(sizes.max()) if sizes.len() else None  # type: ignore[arg-type]
    if log.version is None or size is None:
        return ("alone", index)
    return ("no commId", log.version, size)


def group_logs(logs: Sequence[NcclLog]) -> list[list[NcclLog]]:
    """The logs grouped into jobs (module docstring), each job's logs in the order given, jobs in the order of
    their first log."""
    ids = _links(logs)
    owner = list(range(len(logs)))

    def root(index: int) -> int:
        while owner[index] != index:
            owner[index] = owner[owner[index]]
            index = owner[index]
        return index

    first_with: dict[object, int] = {}
    for index, log in enumerate(logs):
        keys: list[object] = list(ids[index]) or [_key_without_ids(log, index)]
        for key in keys:
            if key in first_with:
                owner[root(index)] = root(first_with[key])
            else:
                first_with[key] = index
    groups: dict[int, list[NcclLog]] = {}
    for index, log in enumerate(logs):
        groups.setdefault(root(index), []).append(log)
    return [
        groups[key] for key in sorted(groups, key=lambda k: min(i for i in range(len(logs)) if root(i) == k))
    ]


def communicator_view(join: NcclJoin) -> pl.DataFrame:
    """One row per communicator of a job (`COMMUNICATOR_COLUMNS`): its ranks seen out of its size and the
    missing ones, init completed and failed, hosts, transports, channels and NCCL's choices."""
    members = join.members.filter(pl.col("comm_rank").is_not_null())
    seen = members.group_by("comm_key").agg(
        seen=pl.col("comm_rank").unique().sort(),
        init_failed=(pl.col("init_state") == "START").sum().cast(pl.Int64),
    )
    table = join.communicators.join(seen, on="comm_key", how="left").with_columns(
        missing_ranks=pl.int_ranges(0, pl.col("nranks").fill_null(0))
        .list.set_difference(pl.col("seen").fill_null(pl.lit([], pl.List(pl.Int64))))
        .list.sort(),
        init_failed=pl.col("init_failed").fill_null(0),
    )
    present = [c for c in COMMUNICATOR_COLUMNS if c in table.columns]
    missing = [pl.lit(None).alias(c) for c in COMMUNICATOR_COLUMNS if c not in table.columns]
    return table.with_columns(missing).select(
        [*present, *(c for c in COMMUNICATOR_COLUMNS if c not in present)]
    )


def nccl_jobs(logs: Sequence[NcclLog]) -> list[NcclJob]:
    """Every job the logs hold, each read together (module docstring)."""
    jobs = []
    for index, group in enumerate(group_logs(logs)):
        join = join_nccl(None, group)
        hosts = sorted({h for log in group for h in log.processes.get_column("host").drop_nulls().to_list()})
        jobs.append(
            NcclJob(
                index=index,
                logs=tuple(log.path for log in group),
                versions=join.versions,
                hosts=tuple(hosts),
                communicators=communicator_view(join),
                problems=nccl_problems(join),
                join=join,
            )
        )
    return jobs


def jobs_gate_figures(jobs: Sequence[NcclJob]) -> dict[str, float | None]:
    """`nccl_errors` and `nccl_fallbacks` over every job (`traceview.nccl.problems`)."""
    per_job = [nccl_gate_figures(job.join) for job in jobs]
    return {name: float(sum(f[name] or 0.0 for f in per_job)) for name in ("nccl_errors", "nccl_fallbacks")}


def headline(jobs: Sequence[NcclJob], skipped: int = 0) -> str:
    """The first line of the `nccl` command: failures first (their kinds and counts, the first example),
    else the jobs, communicators and whether every init completed."""
    failures = [
        (job, row)
        for job in jobs
        for row in job.problems.iter_rows(named=True)
        if row["kind"] != "transport fallback"
    ]
    fallbacks = sum(
        row["count"]
        for job in jobs
        for row in job.problems.iter_rows(named=True)
        if row["kind"] == "transport fallback"
    )
    unread = f"; {skipped} log(s) could not be read" if skipped else ""
    fallback = f"; {fallbacks} connection(s) fell back to a slower transport" if fallbacks else ""
    if failures:
        kinds = "; ".join(f"{row['kind']} x{row['count']} (job {job.index + 1})" for job, row in failures)
        first = failures[0][1]["example"]
        return f"NCCL FAILED: {kinds}{fallback}{unread}. First: {first}"
    comms = sum(job.communicators.height for job in jobs)
    return (
        f"NCCL: {len(jobs)} job(s), {comms} communicator(s), no init error, abort or timeout in the logs"
        f"{fallback}{unread}."
    )
