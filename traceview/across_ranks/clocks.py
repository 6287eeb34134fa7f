"""Clock alignment across hosts (docs/metrics.md, "Across ranks").

Ranks on one host share a clock; hosts do not. A rank's host comes from, in order: the trace's own hostname
(`TraceMeta.hostname`), a rank -> host mapping passed in (the hook for hosts read from NCCL_DEBUG logs), the
`--ranks-per-host` option (ranks `h*k .. h*k+k-1` on host h), else every rank is its own host.

A collective ends at nearly the same instant on every member, so per matched instance and host the host's end
is the median end of its ranks there, and a host's offset is the median over shared instances of `end(host) -
end(reference)`; the reference is the host of the lowest rank (offset 0). A host that shares no instance with
the reference is reached through hosts already aligned (`end(host) - (end(other) - offset(other))`), one hop
per round. Its spread is the interquartile range of those differences; a spread above `SPREAD_WARN_US` is a
warning, because skews smaller than it cannot be trusted. Aligned time = time - offset.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from traceview.core.records import record

SPREAD_WARN_US = 100.0
"""Interquartile range of a host's end-time differences above which its offset is flagged (docs/metrics.md).
"""

FAR_OFFSET_US = 60e6
"""A host whose clock is this far (a minute) or farther from the reference host's is named in a warning with
the offset applied: synchronised clocks differ by milliseconds, a wrong time zone or a clock never set by
hours."""

ASSUMED_HOSTS = "one rank per host (assumed)"
"""`host_source` of a rank whose host nothing in the run names."""

OFFSET_SCHEMA: dict[str, pl.DataType] = {
    "host": pl.Utf8(),
    "host_source": pl.Utf8(),
    "ranks": pl.List(pl.Int64()),
    "offset_us": pl.Float64(),
    "spread_us": pl.Float64(),
    "samples": pl.Int64(),
    "via": pl.Utf8(),
}


@record
class ClockOffsets:
    """Per host: its ranks, offset against the reference host (us, null: not reachable), spread
    and samples."""

    offsets: pl.DataFrame
    reference: str
    warnings: tuple[str, ...]


def rank_hosts(
    ranks: Sequence[int],
    trace_hostnames: Mapping[int, str],
    log_hosts: Mapping[int, str] | None = None,
    ranks_per_host: int | None = None,
    per_host_source: str = "--ranks-per-host",
) -> pl.DataFrame:
    """The host of every rank and where it came from: columns rank, host, host_source (`per_host_source`
    names where `ranks_per_host` came from: the option, or the run's manifest)."""
    frame = pl.DataFrame({"rank": list(ranks)}, schema={"rank": pl.Int64})
    trace = pl.DataFrame(
        {"rank": list(trace_hostnames), "trace_host": list(trace_hostnames.values())},
        schema={"rank": pl.Int64, "trace_host": pl.Utf8},
    ).filter(pl.col("trace_host") != "")
    logs = log_hosts or {}
    log = pl.DataFrame(
        {"rank": list(logs), "log_host": list(logs.values())}, schema={"rank": pl.Int64, "log_host": pl.Utf8}
    )
    per_host = (
        pl.format("host {}", pl.col("rank") // ranks_per_host)
        if ranks_per_host
        else pl.lit(None, dtype=pl.Utf8)
    )
    sources = [
        ("trace", pl.col("trace_host")),
        ("nccl log", pl.col("log_host")),
        (per_host_source, per_host),
    ]
    source = pl.lit(ASSUMED_HOSTS)
    for name, column in reversed(sources):
        source = pl.when(column.is_not_null()).then(pl.lit(name)).otherwise(source)
    joined = frame.join(trace, on="rank", how="left").join(log, on="rank", how="left")
    return joined.select(
        "rank",
        pl.coalesce(
            pl.col("trace_host"), pl.col("log_host"), per_host, pl.format("rank {}", pl.col("rank"))
        ).alias("host"),
        source.alias("host_source"),
    ).sort("rank")


def _host_ends(calls: pl.DataFrame, hosts: pl.DataFrame) -> pl.DataFrame:
    """Per (instance, host): the median end of the host's ranks in that instance."""
    return (
        calls.join(hosts.select("rank", "host"), on="rank")
        .group_by("instance", "host")
        .agg(pl.col("end_us").median())
    )


def _round(ends: pl.DataFrame, resolved: pl.DataFrame) -> pl.DataFrame:
    """Offsets of the hosts not yet resolved that share instances with resolved ones (one hop)."""
    known = ends.join(resolved.select("host", "offset_us"), on="host").select(
        "instance", (pl.col("end_us") - pl.col("offset_us")).alias("true_end"), pl.col("host").alias("via")
    )
    pending = ends.join(resolved.select("host"), on="host", how="anti")
    diffs = pending.join(known, on="instance").with_columns(
        (pl.col("end_us") - pl.col("true_end")).alias("diff")
    )
    return diffs.group_by("host").agg(
        pl.col("diff").median().alias("offset_us"),
        (pl.col("diff").quantile(0.75, "linear") - pl.col("diff").quantile(0.25, "linear")).alias(
            "spread_us"
        ),
        pl.len().cast(pl.Int64).alias("samples"),
        pl.col("via").mode().first(),
    )


def clock_offsets(
    calls: pl.DataFrame, hosts: pl.DataFrame, spread_warn_us: float = SPREAD_WARN_US
) -> ClockOffsets:
    """Per-host clock offsets from the end times of `calls` (rows of usable instances: instance, rank,
    end_us)."""
    reference = hosts.sort("rank").get_column("host").first() if hosts.height else ""
    ends = _host_ends(calls, hosts)
    reference_samples = ends.filter(pl.col("host") == reference).height
    resolved = pl.DataFrame(
        {
            "host": [reference],
            "offset_us": [0.0],
            "spread_us": [0.0],
            "samples": [reference_samples],
            "via": [None],
        },
        schema={k: OFFSET_SCHEMA[k] for k in ("host", "offset_us", "spread_us", "samples", "via")},
    )
    for _ in range(hosts.get_column("host").n_unique()):  # one hop per round; hosts, never instances
        found = _round(ends, resolved)
        if found.height == 0:
            break
        resolved = pl.concat([resolved, found.cast(resolved.schema)])
    per_host = hosts.group_by("host").agg(pl.col("host_source").first(), pl.col("rank").sort().alias("ranks"))
    offsets = (
        per_host.join(resolved, on="host", how="left")
        .select(list(OFFSET_SCHEMA))
        .sort(pl.col("ranks").list.first())
    )
    return ClockOffsets(offsets, str(reference), _warnings(offsets, spread_warn_us, str(reference)))


def _duration(seconds: float) -> str:
    """`3 h 0 min`, `12 min 5 s`, `75 s`."""
    whole = round(abs(seconds))
    hours, minutes, rest = whole // 3600, whole % 3600 // 60, whole % 60
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def far_clock_warnings(offsets: ClockOffsets) -> tuple[str, ...]:
    """One warning per host whose clock is `FAR_OFFSET_US` or more from the reference host's, naming it, its
    ranks and the offset applied (also among `offsets.warnings`; the run's header repeats them)."""
    return tuple(_far_offsets(offsets.offsets, offsets.reference))


def _far_offsets(offsets: pl.DataFrame, reference: str) -> list[str]:
    far = offsets.filter(pl.col("offset_us").abs() >= FAR_OFFSET_US)
    return [
        f"the clock of {row['host']} (rank{'s' if len(row['ranks']) > 1 else ''} "
        f"{', '.join(map(str, row['ranks']))}) is {_duration(row['offset_us'] / 1e6)} "
        f"{'ahead of' if row['offset_us'] > 0 else 'behind'} {reference}'s: offset "
        f"{row['offset_us'] / 1e6:+.3f} s "
        "applied (aligned by the collectives' end times)"
        for row in far.iter_rows(named=True)
    ]


def _warnings(offsets: pl.DataFrame, spread_warn_us: float, reference: str) -> tuple[str, ...]:
    notes = _far_offsets(offsets, reference)
    wide = offsets.filter(pl.col("spread_us") > spread_warn_us)
    lost = offsets.filter(pl.col("offset_us").is_null())
    notes += [
        f"clock offset of {row['host']} has a spread of {row['spread_us']:.0f} us (> {spread_warn_us:.0f} "
        f"us): "
        "skews of its ranks are uncertain by about that much"
        for row in wide.iter_rows(named=True)
    ]
    notes += [
        f"{row['host']} shares no matched collective with the other hosts: its clock is not aligned"
        for row in lost.iter_rows(named=True)
    ]
    return tuple(notes)


def align(calls: pl.DataFrame, hosts: pl.DataFrame, offsets: ClockOffsets) -> pl.DataFrame:
    """`calls` with `aligned_start_us` / `aligned_end_us`: times minus their host's offset (0 when
    unknown)."""
    shift = hosts.select("rank", "host").join(
        offsets.offsets.select("host", "offset_us"), on="host", how="left"
    )
    return calls.join(shift.select("rank", "offset_us"), on="rank", how="left").with_columns(
        (pl.col("start_us") - pl.col("offset_us").fill_null(0.0)).alias("aligned_start_us"),
        (pl.col("end_us") - pl.col("offset_us").fill_null(0.0)).alias("aligned_end_us"),
    )


def rank_offsets(hosts: pl.DataFrame, offsets: ClockOffsets) -> pl.DataFrame:
    """Per rank, its host's clock offset in us (0 where the host is the reference or not reachable)."""
    return (
        hosts.select("rank", "host")
        .join(offsets.offsets.select("host", "offset_us"), on="host", how="left")
        .select("rank", pl.col("offset_us").fill_null(0.0))
    )


def shift_to_reference(frame: pl.DataFrame, per_rank: pl.DataFrame, columns: Sequence[str]) -> pl.DataFrame:
    """`frame` with `columns` (times) moved onto the reference host's clock: each row minus its
    rank's offset."""
    if frame.height == 0 or per_rank.height == 0:
        return frame
    shifted = frame.join(per_rank, on="rank", how="left").with_columns(
        [(pl.col(c) - pl.col("offset_us").fill_null(0.0)).alias(c) for c in columns]
    )
    return shifted.drop("offset_us")
