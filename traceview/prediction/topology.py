"""Which ranks share a node, from what the run shows (docs/metrics.md, "Predicted gamma", "Topology").

The model needs the GPUs per node: a group whose ranks fall on two nodes (rank // GPUs per node) crosses the
NIC, others stay on the scale-up link. Each row of `EVIDENCE` reads one kind of fact into an `Evidence`: an
exact ranks-per-node value, a lower bound, or nothing. The first exact value in table order is used; every
other piece of evidence that disagrees with it is one line of `Topology.conflicts` ("GPUs per node 8
(default) although ..."), so a default is never used against evidence silently.

Facts, in order: the command line (`--gpus-per-node`), the manifest (`ranks_per_host`,
`hardware.gpus_per_node`, the hosts of its `traces`), the NCCL logs' hosts per rank, the traces' hostnames,
hostnames in trace file names (`<host>_<pid>.<ms>.pt.trace.json`, PyTorch's `tensorboard_trace_handler`),
hosts the cross-rank analysis grouped, device ids that repeat every k ranks, the clock alignment's groups
(ranks whose clocks differ sit on different hosts), and the GPUs `deviceProperties` lists; else the default.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import field
from pathlib import Path

import polars as pl

from traceview.across_ranks.analysis import CrossRank
from traceview.core.records import record
from traceview.model.trace import Run

DEFAULT_RANKS_PER_NODE = 8
"""GPUs per node when nothing in the run says: an HGX/DGX board."""

ASSUMED_HOSTS = "one rank per host (assumed)"
"""The clock alignment's host source when it had no host for a rank (`traceview.across_ranks.clocks`)."""
SAME_CLOCK_US = 50.0
"""Two ranks whose clock offsets differ by more than this (and by more than twice their summed spreads) run on
two hosts; ranks of one host share a clock, so their offsets differ only by the alignment's noise."""

FILE_HOST = re.compile(
    r"^(?P<host>[A-Za-z0-9][A-Za-z0-9.\-]*)_(?P<pid>\d+)\.\d{10,}\.pt\.trace\.json(?:\.gz)?$"
)
"""PyTorch's `tensorboard_trace_handler` names a file `<hostname>_<pid>.<time ms>.pt.trace.json[.gz]`."""
NOT_A_HOST = re.compile(r"(?i)^(?:rank|worker|trace)?[-_]?\d*$")


@record
class RunFacts:
    """What the run says about where its ranks run (every mapping keyed by global rank)."""

    ranks: tuple[int, ...]
    world_size: int | None = None
    stated_ranks_per_node: int | None = None
    stated_source: str = "command line"
    stated_hosts: Mapping[int, str] = field(default_factory=dict)
    log_hosts: Mapping[int, str] = field(default_factory=dict)
    trace_hosts: Mapping[int, str] = field(default_factory=dict)
    file_hosts: Mapping[int, str] = field(default_factory=dict)
    grouped_hosts: Mapping[int, str] = field(default_factory=dict)
    grouped_source: str = ""
    local_devices: Mapping[int, int] = field(default_factory=dict)
    device_counts: Mapping[int, int] = field(default_factory=dict)
    clock_groups: tuple[tuple[int, ...], ...] = ()


@record
class Evidence:
    """What one kind of fact says: an exact ranks per node, or a lower bound, with a one-line description."""

    source: str
    detail: str
    ranks_per_node: int | None = None
    at_least: int | None = None


@record
class Topology:
    """GPUs per node with its source and detail, every piece of evidence read, and the lines where the value
    used disagrees with evidence; `hosts` the number of nodes the traced ranks fill, when known."""

    ranks_per_node: int
    source: str
    detail: str
    evidence: tuple[Evidence, ...]
    conflicts: tuple[str, ...]
    hosts: int | None = None

    @property
    def known(self) -> bool:
        """Whether the value comes from the run (or the user), not the default."""
        return self.source != "default"


def _span(ranks: list[int]) -> str:
    ranks = sorted(ranks)
    contiguous = ranks == list(range(ranks[0], ranks[-1] + 1))
    return f"{ranks[0]}-{ranks[-1]}" if contiguous and len(ranks) > 1 else ", ".join(map(str, ranks))


def _host_map(hosts: Mapping[int, str], facts: RunFacts, source: str, what: str) -> Evidence | None:
    """Ranks per host of a rank -> host map: exact when it covers the world (or the world is unknown),
    else a lower bound (the most ranks seen on one host)."""
    if len(hosts) < 2:
        return None
    counts = Counter(hosts.values())
    most = max(counts.values())
    complete = facts.world_size is None or set(range(facts.world_size)) <= set(hosts)
    shape = f"{len(counts)} host(s) of up to {most} rank(s) ({what})"
    if complete:
        return Evidence(source, shape, ranks_per_node=most)
    return Evidence(source, f"{shape}; only {len(hosts)} of {facts.world_size} ranks named", at_least=most)


def _stated(facts: RunFacts) -> Evidence | None:
    value = facts.stated_ranks_per_node
    return None if value is None else Evidence(facts.stated_source, "as stated", ranks_per_node=value)


def _device_ids(facts: RunFacts) -> Evidence | None:
    """Device ids that repeat every k ranks (rank r on device r % k) put k ranks on a node; otherwise the
    largest id seen is a lower bound (a node with device d holds at least d + 1 GPUs)."""
    devices = facts.local_devices
    if not devices or max(devices.values()) == 0:
        return None  # every rank on device 0: one GPU visible to each process, or ranks sharing one
    k = max(devices.values()) + 1
    repeats = len(set(devices.values())) < len(devices)
    if repeats and all(device == rank % k for rank, device in devices.items()):
        detail = f"device ids in the traces: ranks reuse devices 0-{k - 1} every {k} ranks"
        return Evidence("trace", detail, ranks_per_node=k)
    return (
        Evidence("trace", f"device ids in the traces: device {k - 1} in use", at_least=k) if k > 1 else None
    )


def _clock_groups(facts: RunFacts) -> Evidence | None:
    """Ranks whose clocks differ run on different hosts: equal contiguous blocks of k ranks are k per node."""
    groups = [sorted(g) for g in facts.clock_groups]
    if len(groups) < 2:
        return None
    sizes = {len(g) for g in groups}
    blocks = all(g == list(range(g[0], g[0] + len(g))) and g[0] % len(g) == 0 for g in groups)
    shape = "; ".join(_span(g) for g in sorted(groups))
    detail = f"the clock alignment finds {len(groups)} clocks (ranks {shape})"
    if blocks and len(sizes) == 1:
        return Evidence("trace", detail, ranks_per_node=sizes.pop())
    return Evidence("trace", detail, at_least=max(len(g) for g in groups) if len(sizes) > 1 else None)


def _device_count(facts: RunFacts) -> Evidence | None:
    """`deviceProperties` lists the GPUs its process saw: a node of that many (capped by the world size)."""
    counts = Counter(c for c in facts.device_counts.values() if c > 1)
    if not counts:
        return None
    count = max(counts, key=lambda c: (counts[c], c))
    value = min(count, facts.world_size) if facts.world_size else count
    return Evidence("trace", f"deviceProperties lists {count} GPUs on the node", ranks_per_node=value)


EVIDENCE: tuple[tuple[str, Callable[[RunFacts], Evidence | None]], ...] = (
    ("stated", _stated),
    ("manifest hosts", lambda f: _host_map(f.stated_hosts, f, "manifest", "hosts in run.json")),
    ("nccl log hosts", lambda f: _host_map(f.log_hosts, f, "nccl log", "hosts of the NCCL log")),
    ("trace hostnames", lambda f: _host_map(f.trace_hosts, f, "trace", "hostnames in the traces")),
    ("file names", lambda f: _host_map(f.file_hosts, f, "trace", "hostnames in the trace file names")),
    ("grouped hosts", lambda f: _host_map(f.grouped_hosts, f, "trace", f.grouped_source)),
    ("device ids", _device_ids),
    ("clock groups", _clock_groups),
    ("device count", _device_count),
)
"""(name, reader) in order of precedence: the first exact value wins."""


def _conflicts(value: int, source: str, evidence: list[Evidence]) -> tuple[str, ...]:
    lines = []
    for found in evidence:
        if found.ranks_per_node is not None and found.ranks_per_node != value:
            lines.append(f"{found.detail} ({found.source}): {found.ranks_per_node} per node")
        elif found.at_least is not None and found.at_least > value:
            lines.append(f"{found.detail} ({found.source}): at least {found.at_least} per node")
    return tuple(f"GPUs per node {value} ({source}) although {line}" for line in dict.fromkeys(lines))


def resolve_topology(facts: RunFacts) -> Topology:
    """GPUs per node from the first exact evidence of `EVIDENCE`, else the default; the disagreements."""
    evidence = [found for _, read in EVIDENCE if (found := read(facts)) is not None]
    exact = next((found for found in evidence if found.ranks_per_node is not None), None)
    if exact is None or exact.ranks_per_node is None:
        value, source, detail = DEFAULT_RANKS_PER_NODE, "default", "an HGX/DGX board; give --gpus-per-node"
        others = evidence
    else:
        value, source = exact.ranks_per_node, exact.source
        others = [found for found in evidence if found is not exact]
        agreeing = [found.detail for found in others if found.ranks_per_node == value]
        detail = exact.detail + (f" (so do: {'; '.join(agreeing)})" if agreeing else "")
    world = facts.world_size or (max(facts.ranks) + 1 if facts.ranks else None)
    hosts = None if world is None or source == "default" else -(-world // value)
    return Topology(value, source, detail, tuple(evidence), _conflicts(value, source, others), hosts)


def file_host(path: str) -> str | None:
    """The hostname in a trace file name written by PyTorch's `tensorboard_trace_handler`, else None."""
    found = FILE_HOST.match(Path(path).name)
    if found is None or NOT_A_HOST.match(found.group("host")):
        return None
    return found.group("host")


def clock_groups(offsets: pl.DataFrame, same_clock_us: float = SAME_CLOCK_US) -> tuple[tuple[int, ...], ...]:
    """Ranks grouped by clock, from per-rank clock offsets (the alignment's `offsets` when it had one host per
    rank): sorted by offset, a new group where the step to the next offset passes `same_clock_us` and twice
    the two spreads. Ranks whose offset is unknown are left out."""
    known = (
        offsets.filter(pl.col("offset_us").is_not_null() & (pl.col("ranks").list.len() == 1))
        .select(pl.col("ranks").list.first().alias("rank"), "offset_us", pl.col("spread_us").fill_null(0.0))
        .sort("offset_us", "rank")
    )
    if known.height < 2:
        return ()
    tolerance = pl.max_horizontal(
        pl.lit(same_clock_us), 2 * (pl.col("spread_us") + pl.col("spread_us").shift(1).fill_null(0.0))
    )
    step = pl.col("offset_us").diff().fill_null(0.0)
    labelled = known.with_columns((step > tolerance).cum_sum().alias("group"))
    grouped = labelled.group_by("group").agg(pl.col("rank").sort()).sort("group")
    return tuple(tuple(ranks) for ranks in grouped["rank"].to_list())


def _grouped_hosts(crossrank: CrossRank | None) -> tuple[dict[int, str], str]:
    """Hosts the cross-rank analysis grouped by a source of its own (not the traces', the logs' or
    assumed)."""
    if crossrank is None:
        return {}, ""
    own = crossrank.hosts.filter(~pl.col("host_source").is_in([ASSUMED_HOSTS, "trace", "nccl log"]))
    source = str(own["host_source"].mode().sort()[0]) if own.height else ""
    return dict(zip(own["rank"].to_list(), own["host"].to_list(), strict=True)), source


def run_facts(
    run: Run,
    crossrank: CrossRank | None = None,
    log_hosts: Mapping[int, str] | None = None,
    stated: tuple[int | None, str] = (None, "command line"),
    stated_hosts: Mapping[int, str] | None = None,
) -> RunFacts:
    """The facts of `run`'s traces, the cross-rank analysis (its hosts and clock offsets), the NCCL logs'
    hosts and what the user stated (GPUs per node with its source, hosts per rank)."""
    worlds = [trace.meta.world_size for trace in run if trace.meta.world_size]
    grouped, grouped_source = _grouped_hosts(crossrank)
    offsets = crossrank.clocks.offsets if crossrank is not None else pl.DataFrame()
    assumed = offsets.filter(pl.col("host_source") == ASSUMED_HOSTS) if offsets.height else offsets
    return RunFacts(
        ranks=tuple(run.rank_ids),
        world_size=max(worlds) if worlds else None,
        stated_ranks_per_node=stated[0],
        stated_source=stated[1],
        stated_hosts=dict(stated_hosts or {}),
        log_hosts=dict(log_hosts or {}),
        trace_hosts={t.rank: t.meta.hostname for t in run if t.meta.hostname},
        file_hosts={t.rank: host for t in run if (host := file_host(t.path)) is not None},
        grouped_hosts=grouped,
        grouped_source=grouped_source,
        local_devices={t.rank: t.meta.local_device for t in run if t.meta.local_device is not None},
        device_counts={t.rank: t.meta.device_count for t in run if t.meta.device_count},
        clock_groups=clock_groups(assumed) if assumed.height else (),
    )
