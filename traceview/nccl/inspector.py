"""NCCL Inspector's per-collective records joined to the trace's collectives (docs/metrics.md, "NCCL
Inspector"; JSON key `nccl.inspector`).

Kineto traces carry neither NCCL's communicator hash nor its sequence numbers, so the bridge is stated:

1. A process (one Inspector file) is a trace rank: the rank its world-sized communicator gives (`rank` among
   `n_ranks` = the world size), else the one rank every communicator of the file agrees on through a process
   group of its size whose listed ranks place the file's rank there. Otherwise its records stay unjoined.
2. A communicator of that process is matched to one of the rank's process groups: same size, the rank at the
   communicator's `rank` among the group's listed ranks (when listed), and the trace's calls of the group, in
   order, found once as a run of the communicator's records in `coll_sn` order, compared by (collective, size)
   (the Inspector's record of a whole job holds the few traced steps somewhere; it drops calls under its
   minimum size, so the trace's calls below the smallest record's size are left out). A communicator whose
   calls fit no group, more than one group, or one group at more than one place, and two communicators of one
   process that fit the same group, are ambiguous: never joined.
3. A joined record sits beside its call's first kernel: the Inspector's execution time and busbw beside the
   trace's duration and busbw; a ratio outside `AGREE_RATIO` is a disagreement, said per (collective, size).

NCCL_DEBUG init lines are not used for the bridge yet.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import polars as pl

from traceview.core.errors import TraceviewError
from traceview.core.records import record

AGREE_RATIO = 1.25
"""Inspector busbw / trace busbw (and time) within [1/AGREE_RATIO, AGREE_RATIO] agree."""

CALL_KEYS = ("collective", "size_bytes")

JOINED_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64(),
    "pg_key": pl.Utf8(),
    "comm_id": pl.Utf8(),
    "coll_sn": pl.Int64(),
    "collective": pl.Utf8(),
    "size_bytes": pl.Int64(),
    "start_us": pl.Float64(),
    "trace_dur_us": pl.Float64(),
    "trace_busbw_Bps": pl.Float64(),
    "inspector_exec_time_us": pl.Float64(),
    "inspector_busbw_Bps": pl.Float64(),
    "timing_source": pl.Utf8(),
}


@record
class InspectorJoin:
    """The Inspector files read and how their records met the trace.

    `communicators`: per (file, comm_id) its name, size, the file's trace rank, the process group joined
    (null: none) and why (`bridge`); `joined`: one row per joined record (`JOINED_SCHEMA`); `comparison`: per
    (collective, size_bytes) the joined count and the medians of both sides, `agrees`; `disagreements`: one
    sentence per (collective, size) whose medians differ by more than `AGREE_RATIO`."""

    files: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]
    format_version: str
    records: int
    communicators: pl.DataFrame
    joined: pl.DataFrame
    comparison: pl.DataFrame
    disagreements: tuple[str, ...]

    @property
    def joined_share(self) -> float | None:
        """Joined records over the records read (None without records)."""
        return self.joined.height / self.records if self.records else None


def read_inspector_files(paths: Sequence[Path]) -> tuple[pl.DataFrame, tuple[tuple[str, str], ...]]:
    """(every record of the files that could be read, (path, reason) of each that could not)."""
    from traceview.parsers.nccl_inspector import RECORD_SCHEMA, read_inspector

    frames, skipped = [pl.DataFrame(schema=RECORD_SCHEMA)], []
    for path in paths:
        try:
            frames.append(read_inspector(path))
        except TraceviewError as exc:
            skipped.append((str(path), str(exc)))
    return pl.concat(frames), tuple(skipped)


def _groups(kernels: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, pg_key): group size and listed ranks (a list; null when unlisted)."""
    return kernels.group_by("rank", "pg_key").agg(
        pl.col("group_size").drop_nulls().first(),
        pl.col("pg_ranks")
        .drop_nulls()
        .first()
        .str.extract_all(r"-?\d+")
        .cast(pl.List(pl.Int64))
        .alias("listed"),
    )


def _file_ranks(comms: pl.DataFrame, groups: pl.DataFrame, world: int | None) -> pl.DataFrame:
    """`file`, `rank`: the trace rank of each file the bridge resolves (step 1 of the module's rules)."""
    by_world = comms.filter(pl.col("n_ranks") == world).group_by("file").agg(pl.col("comm_rank").unique())
    by_world = by_world.filter(pl.col("comm_rank").list.len() == 1).select(
        "file", pl.col("comm_rank").list.first().alias("rank")
    )
    listed = groups.drop_nulls("listed").select(pl.col("listed"), "group_size").unique()
    placed = (
        comms.join(listed, left_on="n_ranks", right_on="group_size")
        .filter(pl.col("comm_rank") < pl.col("listed").list.len())
        .select("file", "comm_id", pl.col("listed").list.get(pl.col("comm_rank")).alias("rank"))
        .unique()
    )
    agreed = (
        placed.group_by("file", "rank")
        .agg(pl.col("comm_id").n_unique().alias("_comms"))
        .join(comms.group_by("file").agg(pl.col("comm_id").n_unique().alias("_all")), on="file")
        .filter(pl.col("_comms") == pl.col("_all"))
        .filter(pl.len().over("file") == 1)
        .select("file", "rank")
    )
    return pl.concat([by_world, agreed.join(by_world, on="file", how="anti")], how="vertical_relaxed")


def _signature(collectives: list[str | None], sizes: list[int | None]) -> str:
    return "".join(f"|{c}:{s}" for c, s in zip(collectives, sizes, strict=True)) + "|"


def _offsets(records: pl.DataFrame, calls: pl.DataFrame) -> list[int]:
    """Every position of the run of `calls` (collective, size) inside `records` (in `coll_sn` order)."""
    whole = _signature(records["collective"].to_list(), records["msg_size_bytes"].to_list())
    part = _signature(calls["collective"].to_list(), calls["size_bytes"].to_list())
    starts, at = [], whole.find(part)
    while at >= 0:
        starts.append(whole[:at].count("|"))
        at = whole.find(part, at + 1)
    return starts


def _candidate_calls(kernels: pl.DataFrame, rank: int, pg_key: str, smallest: int) -> pl.DataFrame:
    return kernels.filter(
        (pl.col("rank") == rank) & (pl.col("pg_key") == pg_key) & (pl.col("size_bytes") >= smallest)
    ).sort("start_us")


def _match(
    records: pl.DataFrame, kernels: pl.DataFrame, candidates: list[str], rank: int
) -> tuple[str, object]:
    """(the bridge's word, the joined frame or the group) for one communicator of a resolved file."""
    smallest = records.select(pl.col("msg_size_bytes").min().fill_null(0)).item()
    fits = []
    for pg_key in candidates:
        calls = _candidate_calls(kernels, rank, pg_key, smallest)
        if calls.height:
            fits += [(pg_key, calls, offset) for offset in _offsets(records, calls)]
    if len(fits) != 1:
        return ("no group fits" if not fits else "ambiguous"), None
    pg_key, calls, offset = fits[0]
    joined = pl.concat(
        [
            calls.select("rank", "pg_key", *CALL_KEYS, "start_us", "dur_us", "busbw_Bps"),
            records.slice(offset, calls.height)
            .select("comm_id", "coll_sn", "exec_time_us", "busbw_Bps", "timing_source")
            .rename({"busbw_Bps": "_ibusbw"}),
        ],
        how="horizontal",
    )
    return "joined", joined.select(
        "rank",
        "pg_key",
        "comm_id",
        "coll_sn",
        *CALL_KEYS,
        "start_us",
        pl.col("dur_us").alias("trace_dur_us"),
        pl.col("busbw_Bps").alias("trace_busbw_Bps"),
        pl.col("exec_time_us").cast(pl.Float64).alias("inspector_exec_time_us"),
        pl.col("_ibusbw").alias("inspector_busbw_Bps"),
        "timing_source",
    )


def _group_candidates(groups: pl.DataFrame, rank: int, size: int, comm_rank: int) -> list[str]:
    """The rank's process groups a communicator of `size` ranks, at `comm_rank`, may be."""
    listed = pl.col("listed")
    fits = (pl.col("rank") == rank) & (pl.col("group_size") == size)
    place = listed.is_null() | (listed.list.get(comm_rank, null_on_oob=True) == rank)
    return groups.filter(fits & place.fill_null(False)).sort("pg_key")["pg_key"].to_list()


def _comparison(joined: pl.DataFrame) -> pl.DataFrame:
    """Per (collective, size_bytes): joined records, the medians of both sides, whether they agree."""
    ratio = pl.col("inspector_busbw_Bps") / pl.col("trace_busbw_Bps")
    return (
        joined.group_by(*CALL_KEYS)
        .agg(
            pl.len().cast(pl.Int64).alias("joined"),
            pl.col("trace_dur_us").median(),
            pl.col("inspector_exec_time_us").median(),
            pl.col("trace_busbw_Bps").median(),
            pl.col("inspector_busbw_Bps").median(),
        )
        .with_columns(ratio.alias("busbw_ratio"))
        .with_columns(pl.col("busbw_ratio").is_between(1 / AGREE_RATIO, AGREE_RATIO).alias("agrees"))
        .sort(*CALL_KEYS)
    )


def _disagreements(comparison: pl.DataFrame) -> tuple[str, ...]:
    rows = comparison.filter(~pl.col("agrees").fill_null(True)).iter_rows(named=True)
    return tuple(
        f"{row['collective']} of {row['size_bytes']} B: NCCL Inspector busbw "
        f"{row['inspector_busbw_Bps'] / 1e9:.3g} GB/s, the trace's {row['trace_busbw_Bps'] / 1e9:.3g} GB/s "
        f"(median over {row['joined']} joined calls; Inspector {row['inspector_exec_time_us']:.4g} us, trace "
        f"{row['trace_dur_us']:.4g} us)"
        for row in rows
    )


def join_inspector(
    kernels: pl.DataFrame,
    records: pl.DataFrame,
    files: Sequence[Path],
    skipped: tuple[tuple[str, str], ...],
    world_size: int | None,
) -> InspectorJoin:
    """The Inspector `records` (`traceview.parsers.nccl_inspector.RECORD_SCHEMA`, from `files`) joined to the
    collectives' `kernels` (`traceview.collectives.kernels.comm_kernels` rows) by the module's bridge."""
    from traceview.parsers.nccl_inspector import INSPECTOR_FORMAT

    calls = kernels.filter(
        pl.col("on_device") & pl.col("first_in_call") & pl.col("collective").is_not_null()
    ).drop_nulls("size_bytes")
    groups = _groups(calls)
    comms = records.group_by("file", "comm_id", maintain_order=True).agg(
        pl.col("comm_name").first(),
        pl.col("comm_rank").first(),
        pl.col("n_ranks").first(),
        pl.len().cast(pl.Int64).alias("records"),
    )
    placed = comms.join(_file_ranks(comms, groups, world_size), on="file", how="left")
    bridges, found_rows = [], []
    for comm in placed.iter_rows(named=True):  # one row per communicator of a process: a handful
        bridge, found = "process not placed", None
        if comm["rank"] is not None:
            own = records.filter((pl.col("file") == comm["file"]) & (pl.col("comm_id") == comm["comm_id"]))
            candidates = _group_candidates(groups, comm["rank"], comm["n_ranks"], comm["comm_rank"])
            bridge, found = _match(own.sort("coll_sn"), calls, candidates, comm["rank"])
        pg_key = found["pg_key"][0] if isinstance(found, pl.DataFrame) else None
        bridges.append((bridge, pg_key))
        found_rows.append(found)
    claims = [(comm["file"], pg) for comm, (_, pg) in zip(placed.iter_rows(named=True), bridges, strict=True)]
    shared = {claim for claim in claims if claim[1] is not None and claims.count(claim) > 1}
    bridges = [
        ("ambiguous", None) if claim in shared else b for claim, b in zip(claims, bridges, strict=True)
    ]
    joined = [pl.DataFrame(schema=JOINED_SCHEMA)] + [
        f.cast(JOINED_SCHEMA)  # type: ignore[arg-type]
        for f, claim in zip(found_rows, claims, strict=True)
        if isinstance(f, pl.DataFrame) and claim not in shared
    ]
    communicators = placed.with_columns(
        pl.Series("pg_key", [p for _, p in bridges], dtype=pl.Utf8),
        pl.Series("bridge", [b for b, _ in bridges], dtype=pl.Utf8),
    )
    all_joined = pl.concat(joined).sort("rank", "start_us")
    comparison = _comparison(all_joined)
    return InspectorJoin(
        files=tuple(str(path) for path in files),
        skipped=skipped,
        format_version=INSPECTOR_FORMAT,
        records=records.height,
        communicators=communicators,
        joined=all_joined,
        comparison=comparison,
        disagreements=_disagreements(comparison),
    )
