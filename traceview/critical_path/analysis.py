"""The critical path of a run (docs/metrics.md, "Critical path"): the map's per-(rank, step) rows joined with
the peers' waits the reduce resolves, the medians per rank and over the run, and the holders per rank.

A collective is an open node in the map (`traceview.critical_path.nodes`): its time on the path is
`comm_transfer`. The reduce resolves it from the instance matched across ranks: the member waited from its
entry until the last member arrived (the latest aligned entry of the instance less its own), and that wait,
up to the communication the path holds between the member's entry and exit, moves from `comm_transfer` to
`peer_wait` (a wait hidden under compute is not on the path); per (rank, step) at most the step's
`comm_transfer`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import field

import polars as pl

from traceview.core.records import record
from traceview.critical_path.attribution import CALL_SCHEMA, attributed_calls, held_by_groups, waits_for
from traceview.critical_path.categories import (
    CATEGORIES,
    CATEGORY_COLUMNS,
    COMM_TRANSFER,
    IDLE_CATEGORIES,
    PEER_WAIT,
)
from traceview.critical_path.holders import HOLDER_SCHEMA, REST
from traceview.critical_path.nodes import at_calls
from traceview.critical_path.sweep import PER_STEP_SCHEMA

KEYS = ["rank", "step"]
LISTED_RANKS = 64
"""Ranks whose holders a page lists in its table (the JSON keeps every rank's)."""
SMALL_SHARE = 0.03
"""A holder below this share of the median step is not a cause worth advice (docs/metrics.md)."""
_COMM, _WAIT = f"{COMM_TRANSFER}_us", f"{PEER_WAIT}_us"


@record
class CriticalPath:
    """What held each step: `per_step` (rank, step, step_us and a `<category>_us` column per category,
    summing to step_us), `per_rank` (rank, steps, the medians of those columns and `median_step`, its step
    nearest the median: the drill-down's link), `holders` (rank,
    category, name, us_per_step, share of the rank's median step, calls_per_step, steps, longest_step:
    at most `HOLDERS_PER_RANK` per rank by name plus one `rest` row), `run_median` (each column's median over
    every (rank, step)) and `notes` (the edges inferred, said once per run)."""

    per_step: pl.DataFrame
    per_rank: pl.DataFrame
    holders: pl.DataFrame
    run_median: dict[str, float | None]
    notes: tuple[str, ...]
    calls: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=CALL_SCHEMA))
    """Per matched call of the counted steps, the peer wait it moved and the transfer it held on its rank's
    path (`traceview.critical_path.attribution`): what the advice reads per rank and per process group."""

    def waits_for(self, rank: int) -> float:
        """The time per step the peers' paths wait for `rank` (mean over their counted (rank, step))."""
        return waits_for(self.calls, self.per_rank, rank)

    def held_by_groups(self, groups: list[str], column: str = "transfer_us") -> float:
        """The time per step the collectives of `groups` hold on the path (`transfer_us`: communication not
        waiting for a peer; `wait_us`: peer waits), the mean over every counted (rank, step)."""
        return held_by_groups(self.calls, self.per_rank, groups, column)

    @property
    def categories(self) -> tuple[str, ...]:
        """The categories in display order."""
        return CATEGORIES

    @property
    def listed_holders(self) -> pl.DataFrame:
        """The holders a page lists: those of the first `LISTED_RANKS` ranks (every rank of most runs; at
        cluster scale the stacked bars and the JSON hold every rank)."""
        ranks: list[int] = self.per_rank.get_column("rank").head(LISTED_RANKS).to_list()
        return self.holders.filter(pl.col("rank").is_in(ranks))

    def run_share(self, category: str) -> float | None:
        """The run-median time of `category` over the run-median step (None without steps)."""
        step = self.run_median.get("step_us")
        held = self.run_median.get(f"{category}_us")
        return None if not step or held is None else held / step

    def idle_holders(self, rank: int | None = None) -> pl.DataFrame:
        """The holders of the device's idle (host categories and `other`), most time first; of one rank or
        of every rank."""
        found = self.holders.filter(pl.col("category").is_in(list(IDLE_CATEGORIES)))
        found = found if rank is None else found.filter(pl.col("rank") == rank)
        return found.sort("us_per_step", descending=True)


def call_waits(calls: pl.DataFrame, nodes: pl.DataFrame) -> pl.DataFrame:
    """Per matched call (instance, rank, step): `waited_us`, from its entry to the last member's arrival (the
    latest aligned entry of its instance less its own), `comm_on_path_us`, the communication the path holds
    between its entry and exit (its node's, `traceview.critical_path.nodes`; null without one), and
    `peer_wait_us`, the former up to the latter (0 without a node), and `last_rank`, the instance's last
    arrival (of equal entries, the highest rank). `calls`: the matched members (instance, rank, step,
    start_us and end_us on the rank's clock, aligned_start_us; `group` carried where given)."""
    last = pl.col("aligned_start_us").max().over("instance")
    last_rank = pl.col("rank").sort_by("aligned_start_us", "rank").last().over("instance")
    group = [pl.col("group").cast(pl.Utf8)] if "group" in calls.columns else []
    on_path = (pl.col("exit_comm_us") - pl.col("entry_comm_us")).clip(lower_bound=0.0)
    waited = (last - pl.col("aligned_start_us")).clip(lower_bound=0.0)
    moved = pl.when(on_path.is_not_null()).then(pl.min_horizontal(waited, on_path)).otherwise(0.0)
    return at_calls(calls.filter(pl.col("step").is_not_null()), nodes).select(
        "instance",
        "rank",
        "step",
        "start_us",
        waited.alias("waited_us"),
        on_path.alias("comm_on_path_us"),
        moved.alias("peer_wait_us"),
        last_rank.alias("last_rank"),
        *group,
    )


def step_waits(per_call: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, step): its matched collectives' wait for their last member on the path (`wait_us`: the sum
    of `call_waits`' `peer_wait_us`)."""
    return per_call.group_by(KEYS).agg(pl.col("peer_wait_us").sum().alias("wait_us")).sort(KEYS)


def collective_waits(calls: pl.DataFrame, nodes: pl.DataFrame) -> pl.DataFrame:
    """`step_waits` of the matched calls' `call_waits`."""
    return step_waits(call_waits(calls, nodes))


def with_peer_waits(per_step: pl.DataFrame, waits: pl.DataFrame) -> pl.DataFrame:
    """`per_step` with each (rank, step)'s collectives' wait for their peers (`waits`: rank, step, wait_us)
    moved from `comm_transfer_us` to `peer_wait_us`, up to the former."""
    if waits.height == 0:
        return per_step
    moved = pl.min_horizontal(pl.col("wait_us").fill_null(0.0).clip(lower_bound=0.0), pl.col(_COMM))
    return (
        per_step.join(waits.select(*KEYS, "wait_us"), on=KEYS, how="left")
        .with_columns(moved.alias("_moved"))
        .with_columns(
            (pl.col(_COMM) - pl.col("_moved")).alias(_COMM), (pl.col(_WAIT) + pl.col("_moved")).alias(_WAIT)
        )
        .select(list(PER_STEP_SCHEMA))
    )


def _holders(holders: pl.DataFrame, per_rank: pl.DataFrame) -> pl.DataFrame:
    """Holders per step of their rank (over its steps), with their share of its median step."""
    steps = per_rank.select("rank", pl.col("steps").alias("_steps"), pl.col("step_us").alias("_median"))
    per_step = (pl.col("held_us") / pl.col("_steps")).alias("us_per_step")
    return (
        holders.join(steps, on="rank", how="inner")
        .with_columns(per_step, (pl.col("calls") / pl.col("_steps")).alias("calls_per_step"))
        .with_columns(
            pl.when(pl.col("_median") > 0).then(pl.col("us_per_step") / pl.col("_median")).alias("share")
        )
        .select("rank", "category", "name", "us_per_step", "share", "calls_per_step", "steps", "longest_step")
        .sort(["rank", pl.col("category") == REST, "us_per_step"], descending=[False, False, True])
    )


def critical_path(
    per_step: pl.DataFrame,
    holders: pl.DataFrame,
    waits: pl.DataFrame,
    unlinked_ranks: Sequence[int] = (),
    counted: pl.DataFrame | None = None,
    syncs: Mapping[int, tuple[int, int]] | None = None,
    per_call: pl.DataFrame | None = None,
) -> CriticalPath:
    """The run's critical path from the map's rows (`per_step`, `holders`), the peers' waits per (rank,
    step) and the ranks whose launches the trace does not tie to device work. `counted`: the (rank, step)
    the medians read (the budget's: graph capture steps left out), all when None; `syncs`: per rank, its
    recorded CUDA sync events (host waits, cross-stream waits), for the notes; `per_call`: the matched
    calls' waits (`call_waits`), attributed to the counted rows (`CriticalPath.calls`)."""
    per_step = with_peer_waits(per_step.cast(PER_STEP_SCHEMA), waits)  # type: ignore[arg-type]
    read = per_step if counted is None else per_step.join(counted.select(KEYS), on=KEYS, how="semi")
    read = read if read.height else per_step
    columns = ["step_us", *CATEGORY_COLUMNS]
    per_rank = (
        read.group_by("rank")
        .agg(pl.len().alias("steps"), pl.col(columns).median())
        .join(median_steps(read), on="rank", how="left")
        .sort("rank")
    )
    medians = read.select(pl.col(columns).median())
    run_median = {c: (medians.item(0, c) if read.height else None) for c in columns}
    return CriticalPath(
        per_step=per_step,
        per_rank=per_rank,
        holders=_holders(holders.cast(HOLDER_SCHEMA), per_rank),  # type: ignore[arg-type]
        run_median=run_median,
        notes=_notes(unlinked_ranks, waits.height > 0, syncs or {}),
        calls=attributed_calls(per_call if per_call is not None else pl.DataFrame(), read),
    )


def median_steps(per_step: pl.DataFrame) -> pl.DataFrame:
    """Per rank, `median_step`: its step whose `step_us` lies nearest its median (of equals, the first): where
    the report links a rank's median bar in the step drill-down."""
    distance = (pl.col("step_us") - pl.col("step_us").median().over("rank")).abs()
    return (
        per_step.with_columns(distance.alias("_distance"))
        .sort("rank", "_distance", "step")
        .group_by("rank", maintain_order=True)
        .agg(pl.col("step").first().alias("median_step"))
    )


_ALWAYS = (
    "Critical path: launch-to-device edges by correlation and stream order; while the device idles, the path "
    "is on the thread that launched the next device work (its innermost host row: runtime call, operator, "
    "annotation); a kernel launch call of 1 ms or more is read as its module loading (lazy loading on the "
    "first call: inferred from its length, the driver's module call is recorded only with driver tracing)."
)
_INFERRED = (
    "no CUDA sync events recorded (the profiler's enable_cuda_sync_events off, or a PyTorch without it; "
    "traceview record turns them on): the host's waits on the device are inferred from the runtime call's "
    "name (cuda/hip/cu Stream, Event, Device or Ctx Synchronize or Query: blocking_sync; Memcpy: "
    "blocking_copy; Malloc or Free: blocking_alloc), and cross-stream waits (cudaStreamWaitEvent) are no "
    "edge (while any stream runs the device holds the moment)."
)


def _listed(ranks: Sequence[int]) -> str:
    shown = ", ".join(str(rank) for rank in ranks[:8])
    return shown + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")


def _sync_notes(syncs: Mapping[int, tuple[int, int]]) -> list[str]:
    """Which ranks' host waits came from recorded sync events and which were inferred from call names."""
    recorded = sorted(rank for rank, counts in syncs.items() if sum(counts) > 0)
    inferred = sorted(rank for rank in syncs if rank not in recorded)
    notes = []
    if recorded:
        host = sum(syncs[rank][0] for rank in recorded)
        cross = sum(syncs[rank][1] for rank in recorded)
        notes.append(
            f"Critical path: rank(s) {_listed(recorded)}: {host} host wait(s) read from the recorded CUDA "
            "sync events (Stream, Event or Context Sync): each an edge from the device work it waited for, "
            'named in its holder ("Stream Sync (waits for <kernel>)"), in place of the runtime call it '
            f"correlates with; {cross} cross-stream wait(s) (Stream Wait Event) read, holding no time "
            "of their own (the producer stream runs then)."
        )
    if inferred or not syncs:
        where = f"rank(s) {_listed(inferred)}" if recorded else "every rank"
        notes.append(f"Critical path: {where}: {_INFERRED}")
    return notes


def _notes(
    unlinked_ranks: Sequence[int], waits_resolved: bool, syncs: Mapping[int, tuple[int, int]]
) -> tuple[str, ...]:
    """The edges the path read and those it inferred, said once per run."""
    notes = [_ALWAYS, *_sync_notes(syncs)]
    if unlinked_ranks:
        notes.append(
            f"Critical path: rank(s) {_listed(list(unlinked_ranks))}: no launch is tied to device work by "
            "correlation; every thread's host events stand in for the launching thread."
        )
    if not waits_resolved:
        notes.append("Critical path: no collective matched across ranks; peer waits stay in comm_transfer.")
    return tuple(notes)


def empty_critical_path() -> CriticalPath:
    """The path of a run without steps."""
    return critical_path(
        pl.DataFrame(schema=PER_STEP_SCHEMA), pl.DataFrame(schema=HOLDER_SCHEMA), pl.DataFrame()
    )
