"""The trace model: frozen dataclasses holding polars frames, one `RankTrace` per rank and a `Run` of ranks.

Times are microseconds (float64) in the trace's own time base, exactly as Kineto writes them: when the
document has `baseTimeNanoseconds`, `ts` is relative to it and `RankTrace.meta.base_time_ns` keeps it.
`traceview.model.time_base.aligned_ranks` puts every rank on one base. Integer-microsecond timestamps up to
2**53 are exact in float64.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import field, replace

import polars as pl

from traceview.core.errors import ParseWarning, RunError, TraceviewError
from traceview.core.frames import labelled
from traceview.core.records import record

COMM_ARG_SCHEMA: Mapping[str, pl.DataType] = {
    "collective_name": pl.Utf8(),
    "in_nelems": pl.Int64(),
    "out_nelems": pl.Int64(),
    "dtype": pl.Utf8(),
    "group_size": pl.Int64(),
    "pg_name": pl.Utf8(),
    "pg_desc": pl.Utf8(),
    "pg_ranks": pl.Utf8(),
    "seq": pl.Int64(),
    "in_split": pl.Utf8(),
    "out_split": pl.Utf8(),
}
"""Collective-call arguments (docs/metrics.md, "Collectives") as recorded on `record_param_comms` and, in
newer traces, on the communication kernel itself. `pg_name` also holds the older `Process Group ID`."""

GPU_SCHEMA: Mapping[str, pl.DataType] = {
    "kind": pl.Utf8(),  # kernel | memcpy | memset
    "name": pl.Utf8(),
    "start_us": pl.Float64(),
    "end_us": pl.Float64(),
    "device": pl.Int64(),
    "stream": pl.Int64(),
    "correlation": pl.Int64(),
    "external_id": pl.Int64(),
    **COMM_ARG_SCHEMA,
}
"""Device activity: kernels and memory operations (docs/metrics.md section 2), one row each."""

CPU_SCHEMA: Mapping[str, pl.DataType] = {
    "kind": pl.Utf8(),  # op | annotation | runtime
    "name": pl.Utf8(),
    "start_us": pl.Float64(),
    "end_us": pl.Float64(),
    "pid": pl.Utf8(),
    "tid": pl.Utf8(),
    "correlation": pl.Int64(),
    "external_id": pl.Int64(),
    "flops": pl.Float64(),
    "input_dims": pl.Utf8(),
    "input_types": pl.Utf8(),
    "concrete_inputs": pl.Utf8(),  # `Concrete Inputs` (PyTorch 2.x): scalar arguments as text, e.g. a stride
    **COMM_ARG_SCHEMA,
}
"""Host events: operators, user annotations and runtime calls (launches carry `correlation`)."""

SYNC_SCHEMA: Mapping[str, pl.DataType] = {
    "name": pl.Utf8(),  # Stream Sync | Event Sync | Context Sync | Stream Wait Event
    "start_us": pl.Float64(),
    "end_us": pl.Float64(),
    "stream": pl.Int64(),  # the stream synchronised or made to wait; -1 for a context sync
    "correlation": pl.Int64(),  # the runtime call's (cudaStreamSynchronize, cudaStreamWaitEvent, ...)
    "wait_on_stream": pl.Int64(),  # an event's: the stream it was recorded on
    "wait_on_record_correlation": pl.Int64(),  # an event's: the cudaEventRecord call's correlation
}
"""CUDA sync events (`cuda_sync`, written with the profiler's `enable_cuda_sync_events`): the host's waits on
the device and the streams' waits on events (docs/metrics.md, "Critical path"); empty without them."""

CALL_KEY = ("rank", "correlation")
"""What ties a device event to the runtime call that launched it, in frames of stacked ranks."""

STEP_SCHEMA: Mapping[str, pl.DataType] = {
    "step": pl.Int64(),
    "start_us": pl.Float64(),
    "end_us": pl.Float64(),
    "source": pl.Utf8(),  # gpu | cpu
}
"""`ProfilerStep#N` windows as written in the trace, every candidate: the GPU-side annotations (`source` gpu)
and the host ones (`source` cpu). `traceview.steps.windows.choose_steps` picks one set per rank by
evidence."""


@record
class ProcessGroupConfig:
    """One entry of `distributedInfo.pg_config`: a process group as PyTorch created it."""

    name: str
    description: str
    size: int
    ranks: tuple[int, ...]
    backend: str = ""


@record
class TraceMeta:
    """What a trace says about itself: who wrote it, on what, and how its clock reads."""

    rank: int
    rank_source: str  # distributedInfo | file name | assumed
    world_size: int | None = None
    backend: str = ""
    hostname: str = ""
    nccl_version: str = ""
    pytorch_version: str = ""
    devices: tuple[str, ...] = ()
    base_time_ns: int = 0
    process_groups: tuple[ProcessGroupConfig, ...] = ()
    events_total: int = 0
    timeline: str = "device"  # device | host: what the analysis reads as the rank's timeline (host_timeline)
    device_count: int = 0  # entries of deviceProperties: the GPUs the process saw on its node (0: unknown)
    local_device: int | None = None  # the device id most of the rank's device events ran on
    grad_mode: str = ""  # off | on | "" (unknown): what the trace's metadata says of autograd (inference)


def empty_frame(schema: Mapping[str, pl.DataType]) -> pl.DataFrame:
    """An empty frame with exactly `schema`."""
    return pl.DataFrame(schema=dict(schema))


def _check_schema(frame: pl.DataFrame, schema: Mapping[str, pl.DataType], what: str) -> None:
    present = dict(zip(frame.columns, frame.dtypes, strict=True))  # `frame.schema` costs 20 us more
    missing = [name for name in schema if name not in present]
    if missing:
        raise TraceviewError(f"{what}: missing columns {missing}")
    wrong = [n for n, dtype in schema.items() if present[n] != dtype]
    if wrong:
        raise TraceviewError(f"{what}: wrong column types for {wrong}")


_CHECKED_PARTS = ("gpu", "cpu", "steps")
_TRACE = "_trace"
_INTERVAL_FAULTS = (
    (pl.col("end_us") < pl.col("start_us")).sum().alias("bad"),
    pl.col("start_us").is_null().any().alias("unstarted"),
)
_FAULTY = (pl.col("bad") > 0) | pl.col("unstarted")
STACKED_ROWS = 1 << 16
"""Frames are checked stacked, one query for as many as hold this many rows together (a run's thousands of
compact traces in one); a larger frame alone, its columns never copied."""


def _interval_columns(frame: pl.DataFrame) -> pl.DataFrame:
    """`start_us` and `end_us` of `frame` (no query: an eager `select` is one)."""
    return pl.DataFrame([frame.get_column("start_us"), frame.get_column("end_us")])


def _groups(frames: Sequence[pl.DataFrame]) -> list[list[int]]:
    """The positions of `frames` in groups of consecutive frames of at most `STACKED_ROWS` rows together (a
    larger frame alone)."""
    groups: list[list[int]] = []
    rows = 0
    for i, frame in enumerate(frames):
        if not groups or rows + frame.height > STACKED_ROWS:
            groups.append([])
            rows = 0
        groups[-1].append(i)
        rows += frame.height
    return groups


def _fault_plan(frames: Sequence[pl.DataFrame], group: list[int]) -> pl.LazyFrame:
    """Per frame of `group` (positions in `frames`) with a fault: its position, `bad` (events ending before
    they start) and `unstarted` (any event without a start)."""
    if len(group) == 1:
        alone = _interval_columns(frames[group[0]]).lazy()
        return alone.select(pl.lit(group[0], pl.Int64).alias(_TRACE), *_INTERVAL_FAULTS).filter(_FAULTY)
    stacked = labelled([_interval_columns(frames[i]) for i in group], _TRACE, group)
    return stacked.lazy().group_by(_TRACE).agg(_INTERVAL_FAULTS).filter(_FAULTY)


def _interval_faults(traces: Sequence[RankTrace]) -> dict[int, str]:
    """Per position in `traces` of a trace with an event that does not start, or that ends before it starts:
    its first fault (gpu, cpu, steps; ends before starts first). One query per group of frames (`_groups`: a
    run of thousands of compact ranks checked in three, not a query per rank), run together. The frames'
    schemas are checked."""
    frames = [[getattr(trace, part) for trace in traces] for part in _CHECKED_PARTS]
    plans = [[_fault_plan(part, group) for group in _groups(part)] for part in frames]
    found = iter(pl.collect_all([plan for part in plans for plan in part]))
    faults = [{row[0]: row[1:] for _ in part for row in next(found).iter_rows()} for part in plans]
    said: dict[int, str] = {}
    for part, faults_of in reversed(list(zip(_CHECKED_PARTS, faults, strict=True))):  # the first part wins
        for position, (bad, _) in faults_of.items():  # a fault without `bad` is one without a start
            where = f"{traces[position].path} (rank {traces[position].rank}) {part}"
            said[position] = (
                f"{where}: {bad} events end before they start"
                if bad
                else f"{where}: events without a start time"
            )
    return said


def checked(traces: Sequence[RankTrace]) -> list[RankTrace | TraceviewError]:
    """Each of `traces` where its check passes, else the error it meets (`RankTrace.validate` raises it): its
    schemas, its step source, then the events' intervals, those of all the traces checked together (a batch's
    files, a run's ranks: one query per kind of frame, not one per trace)."""
    results: list[RankTrace | TraceviewError] = []
    for trace in traces:
        try:
            trace._check_schemas()
            trace._check_step_source()
            results.append(trace)
        except TraceviewError as error:
            results.append(error)
    sound = [i for i, result in enumerate(results) if isinstance(result, RankTrace)]
    faults = _interval_faults([traces[i] for i in sound])
    for k, message in faults.items():
        results[sound[k]] = TraceviewError(message)
    return results


NO_SYNCS = empty_frame(SYNC_SCHEMA)
"""A trace without CUDA sync events (one frame shared: polars frames are not changed in place)."""


@record
class RankTrace:
    """Everything one rank's trace holds that the analyses use."""

    path: str
    meta: TraceMeta
    gpu: pl.DataFrame
    cpu: pl.DataFrame
    steps: pl.DataFrame
    step_source: str  # gpu | cpu | none: the candidates present, GPU first (traceview.steps.windows chooses)
    warnings: tuple[ParseWarning, ...] = ()
    truncated_at_byte: int | None = None
    compact: bool = False  # the map's compact trace (traceview.map.rank_summary): few host rows, no device
    syncs: pl.DataFrame = field(default_factory=lambda: NO_SYNCS)  # shared: never changed in place

    @property
    def rank(self) -> int:
        """The global rank this trace was recorded on."""
        return self.meta.rank

    def validate(self) -> RankTrace:
        """Check schemas and interval sanity; returns self so it chains. Raises `TraceviewError`."""
        outcome = checked([self])[0]
        if isinstance(outcome, TraceviewError):
            raise outcome
        return self

    def _check_schemas(self) -> None:
        where = f"{self.path} (rank {self.rank})"
        _check_schema(self.gpu, GPU_SCHEMA, f"{where} gpu")
        _check_schema(self.cpu, CPU_SCHEMA, f"{where} cpu")
        _check_schema(self.steps, STEP_SCHEMA, f"{where} steps")

    def _check_step_source(self) -> None:
        if self.step_source not in ("gpu", "cpu", "none"):
            raise TraceviewError(f"{self.path} (rank {self.rank}): unknown step source {self.step_source!r}")

    def shifted(self, delta_us: float) -> RankTrace:
        """The same trace with every time moved by `delta_us` (used to put ranks on one time base)."""
        if delta_us == 0:
            return self
        move = [pl.col("start_us") + delta_us, pl.col("end_us") + delta_us]
        return replace(
            self,
            gpu=self.gpu.with_columns(move),
            cpu=self.cpu.with_columns(move),
            steps=self.steps.with_columns(move),
            syncs=self.syncs.with_columns(move) if self.syncs.height else self.syncs,
        )


@record
class SkippedInput:
    """An input file that could not be used, and why (the run goes on without it)."""

    path: str
    reason: str
    not_a_trace: bool = False
    """Readable, and recognisably not a trace (a job's sidecar JSON, another tool's file): found beside the
    traces by listing a folder, a glob or a prefix, it is no part of the run, ignored rather than skipped
    (`traceview.load.non_traces`); named by a run.json or given alone, it is a skipped input."""


@record
class Run:
    """The ranks of one job, in rank order, plus what was skipped on the way in."""

    ranks: tuple[RankTrace, ...]
    skipped: tuple[SkippedInput, ...] = ()
    source: str = ""
    extra_warnings: tuple[ParseWarning, ...] = field(default=())
    own_clocks: bool = False
    """A batch of the map (`traceview.map.rank_summary.summarize_many`): each rank stays on its own clock
    (`traceview.model.time_base.aligned_ranks` moves none)."""
    stacked_frames: dict[str, pl.DataFrame] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """The frames of every rank stacked, by part, made once for the run's analyses
    (`traceview.model.stacking.ranked_frame`; the ranks never change, so neither do they)."""

    def __iter__(self) -> Iterator[RankTrace]:
        return iter(self.ranks)

    def __len__(self) -> int:
        return len(self.ranks)

    @property
    def rank_ids(self) -> list[int]:
        """Global rank numbers present in the run."""
        return [trace.rank for trace in self.ranks]

    @property
    def warnings(self) -> list[ParseWarning]:
        """Every parse warning of every rank, then the run's own."""
        return [w for trace in self.ranks for w in trace.warnings] + list(self.extra_warnings)

    def validate(self) -> Run:
        """Validate every rank (`checked`: each rank's schemas and step source, the events' intervals of all
        ranks in one query per kind of frame) and check that no two files claim the same rank; the first
        problem, in rank order, raised."""
        seen: dict[int, str] = {}
        for trace, outcome in zip(self.ranks, checked(self.ranks), strict=True):
            if isinstance(outcome, TraceviewError):
                raise outcome
            if trace.rank in seen:
                raise RunError(f"{trace.path}: rank {trace.rank} is also claimed by {seen[trace.rank]}")
            seen[trace.rank] = trace.path
        return self


RANK_FRAMES: Mapping[str, Mapping[str, pl.DataType]] = {
    "gpu": GPU_SCHEMA,
    "cpu": CPU_SCHEMA,
    "steps": STEP_SCHEMA,
}
"""The per-rank frames of a `RankTrace`, by attribute, and their schemas."""
