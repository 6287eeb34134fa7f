"""What a Kineto trace says about the rank that wrote it: its header, with absurd values read as unknown
(docs/metrics.md, "Input limits": a rank or world size no job has, a base time outside 2000-2100, a string
longer than `ParseLimits.max_name_chars`), its step candidates and the device it ran on."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

import polars as pl
from traceview.parsers.kineto._schema import NO_ARGS, DistributedInfo, Header, PgConfig
from traceview.parsers.kineto.limits import BASE_TIME_RANGE_NS, MAX_WORLD_SIZE, ParseLimits, cut_text

from traceview.core.errors import ParseWarning
from traceview.core.location import Location
from traceview.model.trace import STEP_SCHEMA, SYNC_SCHEMA, ProcessGroupConfig, TraceMeta

if TYPE_CHECKING:
    from traceview.parsers.kineto._io import CompleteEvent

STEP_NAME = r"^ProfilerStep#(\d+)$"
RANK_IN_FILE_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)
UNKNOWN_BASE = "this rank's clock is aligned by its collectives"
MAX_DEVICE_NAMES = 64
"""Distinct device names one rank may list (a node has at most a few dozen devices); the rest are dropped."""


class HeaderChecks:
    """Reads header values for `TraceMeta`, noting what it had to set aside."""

    def __init__(
        self, path: Location, max_name_chars: int, cut: Counter[str], truncated: bool = False
    ) -> None:
        self.path = path
        self.truncated = truncated
        self.max_name_chars = max_name_chars
        self.notes: list[str] = []
        self.cut = cut

    def warnings(self) -> list[ParseWarning]:
        """One warning per value set aside (the strings cut are counted in the `cut` given)."""
        return [ParseWarning(str(self.path), note) for note in self.notes]

    def text(self, value: str | None) -> str:
        """A header string ("" when absent), cut to `max_name_chars`."""
        return cut_text(value or "", self.max_name_chars, self.cut)

    def devices(self, names: Sequence[str | None]) -> tuple[str, ...]:
        """The distinct device names, sorted, at most `MAX_DEVICE_NAMES` (a note says how many
        were dropped)."""
        distinct = sorted({self.text(name) for name in names if name})
        if len(distinct) > MAX_DEVICE_NAMES:
            self.notes.append(
                f"{len(distinct)} distinct device names: kept the first {MAX_DEVICE_NAMES} (sorted)"
            )
        return tuple(distinct[:MAX_DEVICE_NAMES])

    def rank(self, declared: int | None) -> tuple[int, str]:
        """The rank and where it came from: `distributedInfo`, the file name, or assumed 0."""
        if declared is not None and 0 <= declared < MAX_WORLD_SIZE:
            return declared, "distributedInfo"
        if declared is not None:
            self.notes.append(f"distributedInfo.rank {declared} is not a rank (0 to 2^24): ignored")
        found = RANK_IN_FILE_NAME.findall(self.path.name)
        if found:
            return int(found[-1]), "file name"
        self.notes.append("no rank in distributedInfo or the file name; taken as rank 0")
        return 0, "assumed"

    def world_size(self, declared: int | None) -> int | None:
        """The world size, or None when absent or outside 1 to 2^24."""
        if declared is None or 1 <= declared <= MAX_WORLD_SIZE:
            return declared
        self.notes.append(f"distributedInfo.world_size {declared} is not a world size (1 to 2^24): ignored")
        return None

    def base_time_ns(self, declared: int | None) -> int:
        """baseTimeNanoseconds, or 0 (unknown) when absent or not a date between 2000 and 2100."""
        low, high = BASE_TIME_RANGE_NS
        if declared is None:
            why = (
                "the document is cut short, and the base is written last"
                if self.truncated
                else "the document is complete: older profilers write none"
            )
            self.notes.append(f"no baseTimeNanoseconds ({why}): {UNKNOWN_BASE}")
            return 0
        if not low <= declared < high:
            self.notes.append(
                f"baseTimeNanoseconds {declared} is not a time between 2000 and 2100: unknown; {UNKNOWN_BASE}"
            )
            return 0
        return declared

    def process_groups(
        self, configs: Sequence[PgConfig] | None, world_size: int | None = None
    ) -> tuple[ProcessGroupConfig, ...]:
        """`distributedInfo.pg_config`. A group can hold no more ranks than the world (`world_size`, else
        2^24): a rank list past that, or naming a rank outside it, is dropped; a size outside 1 to the
        world is replaced by the number of ranks listed; each noted."""
        return tuple(self._group(config, world_size or MAX_WORLD_SIZE) for config in configs or ())

    def _group(self, config: PgConfig, world: int) -> ProcessGroupConfig:
        name = self.text(str(config.pg_name) if config.pg_name is not None else "")
        ranks = tuple(config.ranks or ())
        if len(ranks) > world or (ranks and not 0 <= min(ranks) <= max(ranks) < world):
            self.notes.append(
                f"process group {name[:64]!r} lists {len(ranks)} rank(s) outside a world of {world}: "
                "its rank list is unknown"
            )
            ranks = ()
        size = config.pg_size if config.pg_size is not None and 1 <= config.pg_size <= world else len(ranks)
        if config.pg_size is not None and size != config.pg_size:
            self.notes.append(
                f"process group {name[:64]!r} size {config.pg_size} is not in [1, {world}]: read as {size}, "
                "the ranks it lists"
            )
        description, backend = self.text(config.pg_desc), self.text(config.backend_config)
        return ProcessGroupConfig(name=name, description=description, size=size, ranks=ranks, backend=backend)


def step_candidates(
    gpu_steps: pl.DataFrame | None, cpu: pl.DataFrame, keys: tuple[str, ...] = ()
) -> pl.LazyFrame:
    """Every ProfilerStep candidate, GPU annotations (`source` gpu, `gpu_steps`: their `annotation_rows`,
    None without any) then CPU ones (`source` cpu); `traceview.steps.windows.choose_steps` decides which set
    to use (`first_source`). With `keys` (columns naming each row's file, a batch's files stacked; the
    annotations' rows carry them too), the candidates of each file apart, keyed."""
    on_cpu = _step_windows(cpu.lazy().select(*keys, "name", "start_us", "end_us"), "cpu", keys)
    if gpu_steps is None:  # most traces: no plan for an empty set
        return on_cpu
    return pl.concat([_step_windows(gpu_steps.lazy(), "gpu", keys), on_cpu])


def annotation_rows(gpu_annotations: list[CompleteEvent]) -> pl.DataFrame | None:
    """The GPU annotations as rows of `name`, `start_us`, `end_us`; None without any."""
    if not gpu_annotations:
        return None
    return pl.DataFrame(
        {
            "name": [e.name or "" for e in gpu_annotations],
            "start_us": [e.ts for e in gpu_annotations],
            "end_us": [(e.ts or 0.0) + (e.dur or 0.0) for e in gpu_annotations],
        },
        schema={"name": pl.Utf8, "start_us": pl.Float64, "end_us": pl.Float64},
    )


def sync_rows(syncs: list[CompleteEvent]) -> pl.DataFrame:
    """The CUDA sync events as rows of `SYNC_SCHEMA` (an argument that is not an integer is null)."""
    args = [e.args or NO_ARGS for e in syncs]
    return pl.DataFrame(
        {
            "name": [(e.name or "")[:SYNC_NAME_CHARS] for e in syncs],
            "start_us": [e.ts for e in syncs],
            "end_us": [(e.ts or 0.0) + (e.dur or 0.0) for e in syncs],
            **{column: [_integer(getattr(a, field)) for a in args] for column, field in _SYNC_ARGS.items()},
        },
        schema=dict(SYNC_SCHEMA),
    )


SYNC_NAME_CHARS = 64
"""A sync event's name is one of a few short words (`Stream Sync`, ...): a longer one is cut."""
_SYNC_ARGS = {
    "stream": "stream",
    "correlation": "correlation",
    "wait_on_stream": "wait_on_stream",
    "wait_on_record_correlation": "wait_on_record_correlation",
}


def _integer(value: object) -> int | None:
    """`value` as a 64-bit integer, or None."""
    return value if isinstance(value, int) and -(2**63) <= value < 2**63 else None


def first_source(candidates: pl.DataFrame) -> str:
    """The first source of step candidates present: gpu, cpu or none."""
    sources = candidates.get_column("source")
    return "gpu" if (sources == "gpu").any() else "cpu" if candidates.height else "none"


def _step_windows(candidates: pl.LazyFrame, source: str, keys: tuple[str, ...] = ()) -> pl.LazyFrame:
    return (
        candidates.with_columns(step=pl.col("name").str.extract(STEP_NAME, 1).cast(pl.Int64))
        .drop_nulls("step")
        .group_by(*keys, "step")
        .agg(pl.col("start_us").min(), pl.col("end_us").max())
        .sort(*keys, "step")
        .with_columns(pl.lit(source, dtype=pl.Utf8).alias("source"))
        .select(*keys, *STEP_SCHEMA)
    )


def rank_meta(
    path: Location,
    header: Header,
    events_total: int,
    limits: ParseLimits,
    notes: Counter[str],
    truncated: bool = False,
) -> tuple[TraceMeta, list[ParseWarning]]:
    """What the header says of the rank (`TraceMeta`), absurd values read as unknown, and the warnings
    (`truncated`: the document was cut short, which explains a missing base time)."""
    info = header.distributedInfo or DistributedInfo()
    checks = HeaderChecks(path, limits.max_name_chars, notes, truncated)
    rank, rank_source = checks.rank(info.rank)
    world_size = checks.world_size(info.world_size)
    devices = header.deviceProperties or header.computeProperties or []
    meta = TraceMeta(
        rank=rank,
        rank_source=rank_source,
        world_size=world_size,
        backend=checks.text(info.backend),
        hostname=checks.text(header.host_name or header.hostname),
        nccl_version=checks.text(info.nccl_version),
        pytorch_version=checks.text(header.torch_version),
        devices=checks.devices([d.name for d in devices]),
        base_time_ns=checks.base_time_ns(header.baseTimeNanoseconds),
        process_groups=checks.process_groups(info.pg_config, world_size),
        events_total=events_total,
        device_count=len(devices),
        grad_mode=grad_mode(header),
    )
    return meta, checks.warnings()


GRAD_OFF = frozenset({"inference_mode", "inference", "no_grad", "false", "off", "disabled", "0"})
"""Metadata values that say autograd was off while recording (docs/metrics.md, "Verdict", run kinds)."""
GRAD_ON = frozenset({"enabled", "true", "on", "1", "grad", "training"})


def grad_mode(header: Header) -> str:
    """What the trace's metadata says of autograd: `off` (a top-level `grad_mode` of `inference_mode`,
    `no_grad` or false, or `inference_mode` true), `on`, or "" when it says nothing."""
    said = header.grad_mode
    if said is None and header.inference_mode is not None:
        inference = str(header.inference_mode).lower()
        said = "inference_mode" if inference in GRAD_ON else "enabled" if inference in GRAD_OFF else None
    value = str(said).lower() if said is not None else ""
    return "off" if value in GRAD_OFF else "on" if value in GRAD_ON else ""


def local_device(gpu: pl.DataFrame, keys: tuple[str, ...] = ()) -> pl.LazyFrame:
    """The device id most of the rank's device events ran on (the lowest among equals; null without any);
    with `keys`, per file of a batch stacked (a file without device events has no row)."""
    device = pl.col("device").drop_nulls().mode().min()
    return gpu.lazy().group_by(*keys).agg(device) if keys else gpu.lazy().select(device)
