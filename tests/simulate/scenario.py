"""A scenario simulator: writes multi-rank PyTorch 2.x Kineto traces whose true answers are known.

The truth. Times are integer nanoseconds of "true time" inside the simulator. In each step each rank runs its
forward kernels, then its backward split in one chunk per collective it takes part in. A collective's kernel
on rank r starts when it *arrives*: `arrive[r, i] = max(launch end, the compute it depends on, the end of the
rank's previous collective)`. With `overlap` the k-th collective depends on backward chunk k (DDP buckets, on
their own stream); without it, on the end of the step's compute. The collective ends on every member at `end_i
= max_r arrive[r, i] + transfer_i`, `transfer_i = k(n) * alpha + f(n) * S / B` (docs/metrics.md, "Collectives"
and "Predicted gamma"; with `nics_per_host` an AllReduce, AllGather or ReduceScatter across hosts is
hierarchical, `hierarchical_transfer_s`), so rank r's kernel spans `[arrive[r, i], end_i]`, its wait is
`end_i - arrive[r, i] - transfer_i`, the instance's arrival skew is `max arrive - min arrive` and its last
rank the latest arrival. A trace records true time plus its host's clock offset (ranks on one host share it).
The optimizer (if any) runs after the step's collectives; then the host synchronises and starts the next
`ProfilerStep`.

`write_run(scenario, out_dir)` writes one trace per rank and returns the `GroundTruth`;
`data_parallel_scenario` builds a run that satisfies the alpha-beta model's assumptions, so its measured
gamma equals the closed form.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Final, Literal

from tests.simulate.kineto_writer import DTYPES
from traceview.core.errors import UsageError

Collective = Literal["AllReduce", "AllGather", "ReduceScatter", "AllToAll", "Broadcast", "SendRecv"]


# Ring costs: collective -> n -> (k(n) latency hops, f(n) bus factor); f: docs/metrics.md, "Collectives", k:
# section 5.
TRUE_ORIGIN_NS: Final = 2_000_000_000  # true time 0 of a run, relative to baseTimeNanoseconds (2 s)

COST_TABLE: Final[dict[str, Callable[[int], tuple[float, float]]]] = {
    "AllReduce": lambda n: (2 * (n - 1), 2 * (n - 1) / n),
    "AllGather": lambda n: (n - 1, (n - 1) / n),
    "ReduceScatter": lambda n: (n - 1, (n - 1) / n),
    "AllToAll": lambda n: (n - 1, (n - 1) / n),
    "Broadcast": lambda n: (n - 1, 1.0),
    "SendRecv": lambda n: (1, 1.0),
}


@dataclass(frozen=True)
class ProcessGroupSpec:
    """A process group as PyTorch names it: `Process Group Name`, `Process Group Description`, ranks."""

    name: str
    desc: str
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class CollectiveSpec:
    """One collective issued every step. `bytes` is S of docs/metrics.md, "Collectives" (the size used for
    bandwidth: the AllReduce buffer, the gathered AllGather output, the full ReduceScatter input, the whole
    AllToAll buffer, the SendRecv buffer). SendRecv's group is (sender, receiver), or `pair` = (sender,
    receiver) inside a larger group (a pipeline group of several stages).

    `phase`: issued after the forward kernels (forward: after forward kernel i for the i-th forward collective
    of the rank) or after a backward chunk (backward, the default). `splits`: an AllToAll's send matrix in
    rows of dim 0, row i what member i sends to each member (`In split size` of member i; its column is its
    `Out split size`); `row_bytes` the bytes of a row. `protocol`: NCCL's protocol in the kernel name; `link`:
    (alpha_s, bandwidth_Bps) of this collective's transfer, instead of the scenario's (a protocol's own)."""

    collective: Collective
    bytes: int
    pg: ProcessGroupSpec
    dtype: str = "BFloat16"
    phase: Literal["forward", "backward"] = "backward"
    pair: tuple[int, int] | None = None
    splits: tuple[tuple[int, ...], ...] | None = None
    row_bytes: int = 0
    protocol: str = "LL"
    link: tuple[float, float] | None = None

    @property
    def members(self) -> tuple[int, ...]:
        """The ranks that take part: the pair of a send/receive, else the group."""
        return self.pair if self.pair is not None else self.pg.ranks


@dataclass(frozen=True)
class StragglerSpec:
    """A planted straggler: each step (kind "compute") its compute is longer, or each of its collective
    launches (kind "launch") is late, by an amount drawn uniformly from [delay_us_min, delay_us_max]."""

    rank: int
    kind: Literal["compute", "launch"]
    delay_us_min: float
    delay_us_max: float


@dataclass(frozen=True)
class MismatchSpec:
    """A planted mismatch on `rank` at step `step` (0-based) for `Scenario.collectives[index]`: "extra" issues
    one more copy of that collective just before it (a call no peer joins); "bytes" records `bytes_factor`
    times its element counts (its timing is unchanged)."""

    rank: int
    kind: Literal["extra", "bytes"]
    step: int
    index: int
    bytes_factor: int = 2


@dataclass(frozen=True)
class ModelTruth:
    """The planted parameters of a data-parallel run and the closed form they give (docs/metrics.md,
    "Predicted gamma")."""

    workers: int
    params: int
    local_batch: int
    flops_per_s: float
    bandwidth_Bps: float  # noqa: N815 - B of the alpha-beta model, bytes per second
    alpha_s: float
    grad_bytes_per_param: int
    gamma_pred: float


@dataclass(frozen=True)
class Scenario:
    """Everything a simulated run is made of. Times are microseconds, rates per second.

    `compute_us` is one rank's compute per step (`compute_us_by_rank` overrides it per rank), split into
    `forward_fraction` forward and the rest backward; `jitter` scales each compute kernel by a factor drawn
    from [1 - jitter, 1 + jitter], and each instance's transfer time by one from [1 - transfer_jitter, 1 +
    transfer_jitter]. `bandwidth_Bps`/`alpha_s` are the links of groups spanning hosts, the `intra_host_*`
    ones those of groups inside one host (None: the same). `host_offsets_us` holds one clock offset per host
    (ranks `h * ranks_per_host ...` are host h). `include_hostname` adds a top-level `"hostname"` key (real
    traces have none). `flops_per_step` with `with_flops` writes `flops` args on the `aten::mm` ops, split
    over them in proportion to their planned durations. `pytorch_version` is recorded in the ground truth only
    (Kineto traces do not carry it); so is `model`, the planted alpha-beta parameters. `recorded_workload`
    (local batch, parameters) is what a recording states of the job in `run.json`, beside a run that plants no
    model.
    """

    ranks: int
    steps: int
    collectives: tuple[CollectiveSpec, ...]
    compute_us: float
    ranks_per_host: int = 8
    compute_us_by_rank: tuple[float, ...] = ()
    forward_fraction: float = 1 / 3
    forward_kernels: int = 4
    backward_kernels_per_chunk: int = 2
    jitter: float = 0.0
    transfer_jitter: float = 0.0
    optimizer_us: float = 0.0
    bandwidth_Bps: float = 25e9  # noqa: N815 - B of the alpha-beta model, bytes per second
    alpha_s: float = 10e-6
    intra_host_bandwidth_Bps: float | None = None  # noqa: N815 - B of the alpha-beta model, bytes per second
    intra_host_alpha_s: float | None = None
    nics_per_host: int | None = (
        None  # AllReduce/AllGather/ReduceScatter across hosts hierarchical; None: flat
    )
    overlap: bool = True
    host_offsets_us: tuple[float, ...] = ()
    straggler: StragglerSpec | None = None
    mismatch: MismatchSpec | None = None
    include_seq: bool = False
    with_flops: bool = False
    flops_per_step: float = 0.0
    include_hostname: bool = False
    hostnames: tuple[str, ...] = ()
    seed: int = 0
    device_name: str = "NVIDIA A100-SXM4-80GB"
    pytorch_version: str = "2.3.0"
    nccl_version: str = "2.17.1"
    cpu_op_us: float = 12.0
    launch_us: float = 5.0
    comm_call_us: float = 35.0
    step_gap_us: float = 30.0
    first_step_number: int = 1
    model: ModelTruth | None = None
    recorded_workload: tuple[float, float] | None = (
        None  # (local batch, parameters) a recorder states in run.json
    )
    recorded_per_rank: bool = False  # the recorded parameters are one rank's (a pipeline stage's), not P

    @property
    def hosts(self) -> int:
        """How many hosts the ranks fill."""
        return -(-self.ranks // self.ranks_per_host)

    def host_of(self, rank: int) -> int:
        """The host a rank runs on."""
        return rank // self.ranks_per_host

    def offset_ns(self, rank: int) -> int:
        """The planted clock offset of a rank's host, in ns."""
        return round(self.host_offsets_us[self.host_of(rank)] * 1000) if self.host_offsets_us else 0

    def hostname(self, host: int) -> str:
        """The name of host `host`."""
        return self.hostnames[host] if self.hostnames else f"node{host:03d}"


@dataclass(frozen=True)
class StepTruth:
    """One rank's step budget (docs/metrics.md section 4). Windows are on the rank's own clock (as written, us
    relative to baseTimeNanoseconds); `idle_us` uses the CPU `ProfilerStep` window, `idle_gpu_window_us`
    the GPU one."""

    rank: int
    step: int
    window_start_us: float
    window_end_us: float
    t_comp_us: float
    t_comm_us: float
    t_overlap_us: float
    idle_us: float
    idle_gpu_window_us: float


@dataclass(frozen=True)
class InstanceTruth:
    """One collective instance across its group. Times are true time (us relative to baseTimeNanoseconds, no
    clock offset); `arrive_us` and `wait_us` follow the order of `ranks`. `seq` is the group's ordinal
    (0-based) on every rank without a planted extra call."""

    step: int
    index: int
    collective: str
    pg_name: str
    seq: int
    bytes: int
    ranks: tuple[int, ...]
    arrive_us: tuple[float, ...]
    end_us: float
    transfer_us: float
    skew_us: float
    last_rank: int
    wait_us: tuple[float, ...]


@dataclass(frozen=True)
class MismatchTruth:
    """Where the planted mismatch is: the rank, the group and the sequence number it writes there."""

    rank: int
    kind: str
    pg_name: str
    seq: int


@dataclass(frozen=True)
class GroundTruth:
    """What a correct analysis of the written run must find."""

    files: tuple[Path, ...]
    ranks: int
    ranks_per_host: int
    host_offsets_us: tuple[float, ...]
    straggler_rank: int | None
    mismatch: MismatchTruth | None
    model: ModelTruth | None
    collective_bytes: tuple[int, ...]
    steps: tuple[StepTruth, ...]
    instances: tuple[InstanceTruth, ...]
    pytorch_version: str = field(default="")


def transfer_s(
    collective: str,
    size_bytes: int,
    group_size: int,
    alpha_s: float,
    bandwidth_Bps: float,  # noqa: N803
) -> float:  # the ring's k(n) alpha + f(n) S / B
    """The planted transfer time k(n) * alpha + f(n) * S / B of one collective, in seconds."""
    hops, bus_factor = COST_TABLE[collective](group_size)
    return hops * alpha_s + bus_factor * size_bytes / bandwidth_Bps


HIERARCHICAL_PASSES: Final = {"AllReduce": 2, "AllGather": 1, "ReduceScatter": 1}
"""Ring passes of the collectives NCCL runs hierarchically across nodes (reduce-scatter + all-gather: 2)."""


def hierarchical_transfer_s(
    collective: str,
    size_bytes: int,
    shape: tuple[int, int],
    intra: tuple[float, float],
    inter: tuple[float, float],
    nics_per_host: int,
) -> float:
    """The planted transfer of a collective over `shape` = (hosts N, ranks per host g), (alpha s, B bytes/s)
    `intra` and `inter`: a ring of g inside each host, then N-host rings on min(nics, g) rails in parallel,
    c [(g-1) alpha_in + (N-1) alpha_x] + c [(g-1)/g S / B_in + (N-1)/N S / (min(nics, g) B_x)]."""
    passes = HIERARCHICAL_PASSES[collective]
    hosts, per_host = shape
    rails = min(nics_per_host, per_host)
    latency = (per_host - 1) * intra[0] + (hosts - 1) * inter[0]
    inside = (per_host - 1) / per_host * size_bytes / intra[1]
    across = (hosts - 1) / hosts * size_bytes / (rails * inter[1])
    return passes * (latency + inside + across)


def message_nelems(spec: CollectiveSpec, rank: int | None = None) -> tuple[int, int]:
    """`In msg nelems` and `Out msg nelems` of a collective of S = `spec.bytes` (docs/metrics.md,
    "Collectives"); an all-to-all with splits: what `rank` sends and receives."""
    element = DTYPES[spec.dtype][0]
    if spec.splits is not None and rank is not None:
        member = spec.pg.ranks.index(rank)
        sent, received = sum(spec.splits[member]), sum(row[member] for row in spec.splits)
        return sent * spec.row_bytes // element, received * spec.row_bytes // element
    total = spec.bytes // element
    group = len(spec.pg.ranks)
    if spec.collective == "AllGather":
        return total // group, total
    if spec.collective == "ReduceScatter":
        return total, total // group
    return total, total


def _problems(scenario: Scenario) -> list[str]:
    checks = [
        (scenario.ranks >= 1 and scenario.ranks_per_host >= 1 and scenario.steps >= 1, "ranks, steps >= 1"),
        (scenario.compute_us > 0 and scenario.forward_kernels >= 1, "compute_us > 0, forward_kernels >= 1"),
        (scenario.backward_kernels_per_chunk >= 1, "backward_kernels_per_chunk >= 1"),
        (
            0 < scenario.forward_fraction < 1 and 0 <= scenario.jitter < 1,
            "forward_fraction in (0,1), jitter in [0,1)",
        ),
        (len(scenario.compute_us_by_rank) in (0, scenario.ranks), "compute_us_by_rank: one per rank"),
        (
            len(scenario.host_offsets_us) in (0, scenario.hosts),
            f"host_offsets_us: one per host ({scenario.hosts})",
        ),
        (all(offset * 1000 > -TRUE_ORIGIN_NS for offset in scenario.host_offsets_us), "offsets above -2 s"),
        (len(scenario.hostnames) in (0, scenario.hosts), "hostnames: one per host"),
        (scenario.bandwidth_Bps > 0 and scenario.alpha_s >= 0, "bandwidth_Bps > 0, alpha_s >= 0"),
    ]
    problems = [message for ok, message in checks if not ok]
    groups = {spec.pg.name: spec.pg for spec in scenario.collectives}
    problems += [
        f"group {spec.pg.name!r} defined twice"
        for spec in scenario.collectives
        if groups[spec.pg.name] != spec.pg
    ]
    for position, spec in enumerate(scenario.collectives):
        problems += [f"collectives[{position}]: {problem}" for problem in _spec_problems(scenario, spec)]
    straggler, mismatch = scenario.straggler, scenario.mismatch
    if straggler is not None and not (0 <= straggler.rank < scenario.ranks and straggler.delay_us_min >= 0):
        problems.append("straggler: rank out of range or negative delay")
    if straggler is not None and straggler.delay_us_max < straggler.delay_us_min:
        problems.append("straggler: delay_us_max < delay_us_min")
    if mismatch is not None and not (
        0 <= mismatch.step < scenario.steps
        and 0 <= mismatch.index < len(scenario.collectives)
        and mismatch.rank in scenario.collectives[mismatch.index].pg.ranks
    ):
        problems.append("mismatch: step, index or rank not in that collective's group")
    return problems


def _spec_problems(scenario: Scenario, spec: CollectiveSpec) -> list[str]:
    ranks = spec.pg.ranks
    if spec.dtype not in DTYPES:
        return [f"unknown dtype {spec.dtype!r} (one of {', '.join(DTYPES)})"]
    element = DTYPES[spec.dtype][0]
    checks = [
        (spec.collective in COST_TABLE, f"unknown collective {spec.collective!r}"),
        (len(ranks) >= 2 and len(set(ranks)) == len(ranks), "a group needs >= 2 distinct ranks"),
        (all(0 <= rank < scenario.ranks for rank in ranks), "group rank out of range"),
        (
            spec.collective != "SendRecv" or len(spec.members) == 2,
            "SendRecv takes a (sender, receiver) group or pair",
        ),
        (spec.pair is None or set(spec.pair) <= set(ranks), "a pair must be in its group"),
        (spec.splits is None or _splits_fit(spec), "splits: one row of one entry per member, row_bytes > 0"),
        (
            spec.bytes > 0 and spec.bytes % (element * _shards(spec)) == 0,
            "bytes must split into whole elements",
        ),
        (spec.pg.name != "0" or ranks == tuple(range(scenario.ranks)), 'group "0" is the default: all ranks'),
    ]
    return [message for ok, message in checks if not ok]


def _splits_fit(spec: CollectiveSpec) -> bool:
    n = len(spec.pg.ranks)
    rows = spec.splits or ()
    return (
        spec.collective == "AllToAll"
        and spec.row_bytes > 0
        and len(rows) == n
        and all(len(r) == n for r in rows)
    )


def _shards(spec: CollectiveSpec) -> int:
    return len(spec.pg.ranks) if spec.collective in ("AllGather", "ReduceScatter", "AllToAll") else 1


def validate_scenario(scenario: Scenario) -> None:
    """Raise `UsageError` naming every inconsistency in a scenario (before anything is written)."""
    problems = _problems(scenario)
    if problems:
        raise UsageError("scenario: " + "; ".join(problems))


def gamma_closed_form(
    workers: int,
    grad_bytes_per_param: int,
    flops_per_s: float,
    local_batch: int,
    bandwidth_Bps: float,  # noqa: N803
) -> float:
    """gamma_pred = 2(K-1)/K * g * R / (6 b B), the gamma model's closed form for data-parallel all-reduce."""
    return (
        2 * (workers - 1) / workers * grad_bytes_per_param * flops_per_s / (6 * local_batch * bandwidth_Bps)
    )


def data_parallel_scenario(
    workers: int,
    params: int,
    local_batch: int,
    flops_per_s: float,
    bandwidth_Bps: float,  # noqa: N803
    grad_bytes_per_param: int = 2,
    buckets: int = 4,
    *,
    steps: int = 4,
    ranks_per_host: int = 8,
    alpha_s: float = 0.0,
    with_flops: bool = True,
    seed: int = 0,
) -> Scenario:
    """A data-parallel run built to the alpha-beta model's assumptions: every rank computes 6 * P * b / R per
    step (no jitter, no straggler), then all-reduces g * P gradient bytes in `buckets` buckets over the whole
    world, serialized after compute. With alpha_s = 0 its measured gamma is the closed form exactly (up to
    ns rounding); alpha adds 2(K-1) * alpha per bucket."""
    dtype = {2: "BFloat16", 4: "Float"}.get(grad_bytes_per_param)
    if dtype is None or workers < 2 or params < buckets or buckets < 1:
        raise UsageError(
            "data_parallel_scenario: needs grad_bytes_per_param 2 or 4, workers >= 2, params >= buckets"
        )
    world = ProcessGroupSpec("0", "default_pg", tuple(range(workers)))
    per_bucket = params // buckets
    sizes = [per_bucket] * (buckets - 1) + [params - per_bucket * (buckets - 1)]
    model = ModelTruth(
        workers=workers,
        params=params,
        local_batch=local_batch,
        flops_per_s=flops_per_s,
        bandwidth_Bps=bandwidth_Bps,
        alpha_s=alpha_s,
        grad_bytes_per_param=grad_bytes_per_param,
        gamma_pred=gamma_closed_form(workers, grad_bytes_per_param, flops_per_s, local_batch, bandwidth_Bps),
    )
    return Scenario(
        ranks=workers,
        steps=steps,
        collectives=tuple(
            CollectiveSpec("AllReduce", size * grad_bytes_per_param, world, dtype) for size in sizes
        ),
        compute_us=6 * params * local_batch / flops_per_s * 1e6,
        ranks_per_host=ranks_per_host,
        overlap=False,
        bandwidth_Bps=bandwidth_Bps,
        alpha_s=alpha_s,
        with_flops=with_flops,
        flops_per_step=6 * params * local_batch,
        seed=seed,
        model=model,
    )


def ground_truth_dict(truth: GroundTruth) -> dict[str, object]:
    """The ground truth as plain JSON-ready data (file paths as strings)."""
    data = asdict(truth)
    data["files"] = [path.name for path in truth.files]
    return data
