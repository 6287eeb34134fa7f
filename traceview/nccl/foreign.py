"""An NCCL_DEBUG log from another job, told apart before it is joined to a run (docs/metrics.md, "NCCL log").

What a log says of its job (`LogFacts`: communicator sizes, hosts, NCCL version) is checked against what the
traces say of theirs (`TraceFacts`: process-group sizes, world size, hostnames, NCCL version). Each row of
`FOREIGN_CHECKS` gives a reason or None; a log with any reason is set apart by `traceview.nccl.join.join_nccl`
(its hosts, communicators and link overrides are not used) and named in a note. A check is skipped when either
side does not state the fact.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

from traceview.core.records import record
from traceview.model.nccl_log import NcclLog
from traceview.model.trace import Run

_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def _versions(texts: Iterable[str]) -> frozenset[str]:
    """`major.minor.patch` of every version text that has one ("2.21.5+cuda12.4" -> "2.21.5")."""
    found = (_VERSION.search(text) for text in texts)
    return frozenset(".".join(match.groups()) for match in found if match is not None)


def _short_hosts(names: Iterable[str | None]) -> frozenset[str]:
    """Host names compared by their first label, case-insensitively ("Node1.cluster" and "node1" agree)."""
    return frozenset(name.split(".")[0].lower() for name in names if name)


@record
class TraceFacts:
    """What the traces say of their job: process-group sizes, world size, hostnames, NCCL versions."""

    group_sizes: frozenset[int] = frozenset()
    world_size: int | None = None
    hosts: frozenset[str] = frozenset()
    versions: frozenset[str] = frozenset()

    @classmethod
    def of_run(cls, run: Run | None, group_sizes: Iterable[int]) -> TraceFacts:
        """The facts of `run`'s trace metadata and the sizes of its traced process groups."""
        metas = [trace.meta for trace in run] if run is not None else []
        worlds = [meta.world_size for meta in metas if meta.world_size]
        return cls(
            group_sizes=frozenset(group_sizes),
            world_size=max(worlds) if worlds else None,
            hosts=_short_hosts(meta.hostname for meta in metas),
            versions=_versions(meta.nccl_version for meta in metas),
        )


@record
class LogFacts:
    """What one log says of its job: communicator sizes (init and COLL lines), hosts, NCCL versions."""

    sizes: frozenset[int]
    hosts: frozenset[str]
    versions: frozenset[str]

    @classmethod
    def of_log(cls, log: NcclLog) -> LogFacts:
        """The facts of a parsed log."""
        sizes = [
            *log.communicators.get_column("nranks").drop_nulls(),
            *log.call_totals["nranks"].drop_nulls(),
        ]
        return cls(
            sizes=frozenset(int(size) for size in sizes),
            hosts=_short_hosts(log.processes.get_column("host").to_list()),
            versions=_versions(log.versions.get_column("version").to_list()),
        )


def _sizes(log: LogFacts, traces: TraceFacts) -> str | None:
    if not log.sizes or not traces.group_sizes or log.sizes & traces.group_sizes:
        return None
    return (
        f"no communicator of its sizes ({_listed(sorted(log.sizes))}) has the size of a traced process group "
        f"({_listed(sorted(traces.group_sizes))})"
    )


def _world(log: LogFacts, traces: TraceFacts) -> str | None:
    """The log's largest communicator is the world: larger than the traces' world size, or smaller while the
    traces ran a world-sized group (whose communicator the log would show)."""
    if not log.sizes or traces.world_size is None:
        return None
    largest = max(log.sizes)
    if largest > traces.world_size or (
        largest < traces.world_size and traces.world_size in traces.group_sizes
    ):
        return f"its world size is {largest}, the traces' is {traces.world_size}"
    return None


def _hosts(log: LogFacts, traces: TraceFacts) -> str | None:
    if not log.hosts or not traces.hosts or log.hosts & traces.hosts:
        return None
    return (
        f"its hosts ({_listed(sorted(log.hosts))}) are none of the traces' ({_listed(sorted(traces.hosts))})"
    )


def _version(log: LogFacts, traces: TraceFacts) -> str | None:
    if not log.versions or not traces.versions or log.versions & traces.versions:
        return None
    return (
        f"its NCCL version {_listed(sorted(log.versions))} is not the traces' "
        f"({_listed(sorted(traces.versions))})"
    )


def _listed(items: Sequence[object], most: int = 8) -> str:
    shown = ", ".join(str(item) for item in items[:most])
    return shown + (f", ... ({len(items)} in all)" if len(items) > most else "")


FOREIGN_CHECKS: tuple[tuple[str, Callable[[LogFacts, TraceFacts], str | None]], ...] = (
    ("sizes", _sizes),
    ("world size", _world),
    ("hosts", _hosts),
    ("version", _version),
)
"""(name, check): each check gives why the log is another job's, or None."""


def foreign_reasons(log: NcclLog, traces: TraceFacts) -> tuple[str, ...]:
    """Why `log` looks like another job's than the traces' (empty: nothing says so)."""
    facts = LogFacts.of_log(log)
    return tuple(reason for _, check in FOREIGN_CHECKS if (reason := check(facts, traces)) is not None)


def split_foreign(
    logs: Sequence[NcclLog], traces: TraceFacts | None
) -> tuple[list[NcclLog], list[tuple[str, str]]]:
    """(the logs of the traces' job, (path, reasons) of the others); `traces` None: every log is kept."""
    if traces is None:
        return list(logs), []
    kept: list[NcclLog] = []
    foreign: list[tuple[str, str]] = []
    for log in logs:  # a handful of files
        reasons = foreign_reasons(log, traces)
        if reasons:
            foreign.append((log.path, "; ".join(reasons)))
        else:
            kept.append(log)
    return kept, foreign


def log_notes(logs: Sequence[NcclLog], foreign: Sequence[tuple[str, str]]) -> tuple[str, ...]:
    """The notes of every log's parse (salvaged input), and one per log set apart as another job's."""
    notes = tuple(f"NCCL log {log.path}: {note}" for log in logs for note in log.notes)
    return notes + tuple(
        f"NCCL log {path} looks like another job's ({reasons}): set apart, its hosts, communicators and "
        f"link overrides are not used"
        for path, reasons in foreign
    )
