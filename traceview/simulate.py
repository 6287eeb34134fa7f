"""A scenario simulator: writes multi-rank PyTorch 2.x Kineto traces whose true answers are known.

The truth. Every time is integer nanoseconds of "true time" inside the simulator. In each step, each rank runs
its forward kernels, then its backward split in one chunk per collective it takes part in. A collective's kernel
on rank r starts when it *arrives*: `arrive[r, i] = max(launch end, the compute it depends on, the end of the
rank's previous collective)`. With `overlap` the k-th collective depends on backward chunk k (DDP buckets, on
their own stream); without it, on the end of all the step's compute. The collective ends on every member at
`end_i = max_r arrive[r, i] + transfer_i`, `transfer_i = k(n) * alpha + f(n) * S / B` (SPEC sections 3 and 5),
so rank r's kernel spans `[arrive[r, i], end_i]`, its wait is `end_i - arrive[r, i] - transfer_i`, the instance's
arrival skew is `max arrive - min arrive` and its last rank the latest arrival. A trace records true time plus
its host's clock offset (ranks on one host share it). The optimizer (if any) runs after the step's collectives,
then the host synchronises and starts the next `ProfilerStep`.

`write_run(scenario, out_dir)` writes one trace per rank and returns the `GroundTruth`; `data_parallel_scenario`
builds a run that satisfies the alpha-beta model's assumptions, so its measured gamma equals the closed form.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from traceview.errors import UsageError
from traceview.simulate_kineto import DTYPES, BASE_TIME_NS, CommCall, RankHeader, RankWriter

Collective = Literal["AllReduce", "AllGather", "ReduceScatter", "AllToAll", "Broadcast", "SendRecv"]

TRUE_ORIGIN_NS: Final = 2_000_000_000  # true time 0 of the run, relative to baseTimeNanoseconds
_LAUNCH_OFFSET_NS: Final = 3_000  # a launch starts this long after its op starts

# Ring costs: collective -> n -> (k(n) latency hops, f(n) bus factor); f from SPEC section 3, k from section 5.
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
    """A process group as PyTorch names it: `Process Group Name`, `Process Group Description` and its ranks."""

    name: str
    desc: str
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class CollectiveSpec:
    """One collective issued every step. `bytes` is S of SPEC section 3 (the size used for bandwidth: the
    AllReduce buffer, the gathered AllGather output, the full ReduceScatter input, the whole AllToAll buffer,
    the SendRecv buffer). SendRecv's group is (sender, receiver)."""

    collective: Collective
    bytes: int
    pg: ProcessGroupSpec
    dtype: str = "BFloat16"


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
class Scenario:
    """Everything a simulated run is made of. Times are microseconds, rates per second.

    `compute_us` is one rank's compute per step (`compute_us_by_rank` overrides it per rank), split into
    `forward_fraction` forward and the rest backward; `jitter` scales each compute kernel by a factor drawn
    from [1 - jitter, 1 + jitter]. `bandwidth_Bps`/`alpha_s` are the links of groups spanning hosts, the
    `intra_host_*` ones those of groups inside one host (None: the same). `host_offsets_us` holds one clock
    offset per host (ranks `h * ranks_per_host ...` are host h). `include_hostname` adds a top-level
    `"hostname"` key (real traces have none). `flops_per_step` with `with_flops` writes `flops` args on the
    `aten::mm` ops, split over them in proportion to their planned durations. `pytorch_version` is recorded in
    the ground truth only (Kineto traces do not carry it).
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
    optimizer_us: float = 0.0
    bandwidth_Bps: float = 25e9
    alpha_s: float = 10e-6
    intra_host_bandwidth_Bps: float | None = None
    intra_host_alpha_s: float | None = None
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
class ModelTruth:
    """The planted parameters of a data-parallel run and the closed form they give (SPEC section 5)."""

    workers: int
    params: int
    local_batch: int
    flops_per_s: float
    bandwidth_Bps: float
    alpha_s: float
    grad_bytes_per_param: int
    gamma_pred: float


@dataclass(frozen=True)
class StepTruth:
    """One rank's step budget (SPEC section 4). Windows are on the rank's own clock (as written, us relative
    to baseTimeNanoseconds); `idle_us` uses the CPU `ProfilerStep` window, `idle_gpu_window_us` the GPU one."""

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
    clock offset); `arrive_us` and `wait_us` follow the order of `ranks`. `seq` is the group's ordinal (0-based)
    on every rank without a planted extra call."""

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


@dataclass
class _Call:
    """One collective call of a rank in a step, while the step is being simulated."""

    index: int
    extra: bool
    seq: int
    cpu: tuple[int, int, int, int]  # op start, launch start, launch end, op end
    ready_ns: int
    arrive_ns: int = 0
    end_ns: int = 0


@dataclass
class _RankState:
    """A rank's clocks and counters, carried from step to step."""

    rank: int
    rng: random.Random
    writer: RankWriter
    cpu_ns: int
    gpu_ns: int = 0
    comm_free_ns: int = 0
    seq: dict[str, int] = field(default_factory=dict)
    compute: list[tuple[tuple[int, int, int, int], int, int, int, int | None]] = field(default_factory=list)
    calls: list[_Call] = field(default_factory=list)
    syncs: list[tuple[int, int]] = field(default_factory=list)
    step_start_ns: int = 0
    compute_end_ns: int = 0


def _ns(us: float) -> int:
    return round(us * 1000)


def transfer_s(collective: str, size_bytes: int, group_size: int, alpha_s: float, bandwidth_Bps: float) -> float:
    """The planted transfer time k(n) * alpha + f(n) * S / B of one collective, in seconds."""
    hops, bus_factor = COST_TABLE[collective](group_size)
    return hops * alpha_s + bus_factor * size_bytes / bandwidth_Bps


def _transfer_ns(scenario: Scenario, spec: CollectiveSpec) -> int:
    one_host = len({scenario.host_of(rank) for rank in spec.pg.ranks}) == 1
    bandwidth, alpha = scenario.bandwidth_Bps, scenario.alpha_s
    if one_host and scenario.intra_host_bandwidth_Bps is not None:
        bandwidth = scenario.intra_host_bandwidth_Bps
    if one_host and scenario.intra_host_alpha_s is not None:
        alpha = scenario.intra_host_alpha_s
    seconds = transfer_s(spec.collective, spec.bytes, len(spec.pg.ranks), alpha, bandwidth)
    return max(1, round(seconds * 1e9))


def message_nelems(spec: CollectiveSpec) -> tuple[int, int]:
    """`In msg nelems` and `Out msg nelems` of a collective of S = `spec.bytes` (SPEC section 3)."""
    total = spec.bytes // DTYPES[spec.dtype][0]
    group = len(spec.pg.ranks)
    if spec.collective == "AllGather":
        return total // group, total
    if spec.collective == "ReduceScatter":
        return total, total // group
    return total, total


def _kernel_durations(scenario: Scenario, state: _RankState, chunks: int) -> tuple[list[int], list[int | None]]:
    """Durations (ns) of the step's forward then backward kernels, and the `flops` each op records."""
    base_us = scenario.compute_us_by_rank[state.rank] if scenario.compute_us_by_rank else scenario.compute_us
    forward_us = base_us * scenario.forward_fraction
    backward_count = chunks * scenario.backward_kernels_per_chunk
    nominal = [forward_us / scenario.forward_kernels] * scenario.forward_kernels
    nominal += [(base_us - forward_us) / backward_count] * backward_count
    scale = 1.0
    straggler = scenario.straggler
    if straggler is not None and straggler.kind == "compute" and straggler.rank == state.rank:
        scale += state.rng.uniform(straggler.delay_us_min, straggler.delay_us_max) / base_us
    jitter = scenario.jitter
    durations = [_ns(us * scale * (state.rng.uniform(1 - jitter, 1 + jitter) if jitter else 1.0)) for us in nominal]
    if not (scenario.with_flops and scenario.flops_per_step > 0):
        return durations, [None] * len(durations)
    return durations, [round(scenario.flops_per_step * us / base_us) for us in nominal]


def _issue_compute(scenario: Scenario, state: _RankState, duration_ns: int, flops: int | None) -> None:
    op_start = state.cpu_ns
    launch_start = op_start + _LAUNCH_OFFSET_NS
    launch_end = launch_start + _ns(scenario.launch_us)
    op_end = max(op_start + _ns(scenario.cpu_op_us), launch_end)
    kernel_start = max(launch_end, state.gpu_ns)
    state.compute.append(((op_start, launch_start, launch_end, op_end), kernel_start, kernel_start + duration_ns,
                          len(state.compute), flops))  # fmt: skip
    state.cpu_ns, state.gpu_ns = op_end, kernel_start + duration_ns


def _issue_call(scenario: Scenario, state: _RankState, spec_index: int, extra: bool) -> None:
    """The host issues one collective once the compute it depends on is queued (a late launch waits for it)."""
    depends_on = state.gpu_ns
    straggler = scenario.straggler
    if straggler is not None and straggler.kind == "launch" and straggler.rank == state.rank:
        if state.cpu_ns < depends_on:
            state.syncs.append((state.cpu_ns, depends_on))
            state.cpu_ns = depends_on
        state.cpu_ns += _ns(state.rng.uniform(straggler.delay_us_min, straggler.delay_us_max))
    pg_name = scenario.collectives[spec_index].pg.name
    seq = state.seq.get(pg_name, 0)
    state.seq[pg_name] = seq + 1
    op_start = state.cpu_ns
    launch_start = op_start + _LAUNCH_OFFSET_NS
    launch_end = launch_start + _ns(scenario.launch_us)
    op_end = max(op_start + _ns(scenario.comm_call_us), launch_end + _LAUNCH_OFFSET_NS)
    cpu = (op_start, launch_start, launch_end, op_end)
    state.calls.append(_Call(spec_index, extra, seq, cpu, max(launch_end, depends_on)))
    state.cpu_ns = op_end


def _issue_calls(scenario: Scenario, state: _RankState, step: int, indices: list[int]) -> None:
    mismatch = scenario.mismatch
    for index in indices:
        if mismatch is not None and (mismatch.kind, mismatch.rank, mismatch.step, mismatch.index) == (
            "extra", state.rank, step, index
        ):
            _issue_call(scenario, state, index, extra=True)
        _issue_call(scenario, state, index, extra=False)


def _plan_step(scenario: Scenario, state: _RankState, step: int) -> None:
    """Issue one rank's compute and collective calls for a step; arrivals are settled across ranks later."""
    mine = [index for index, spec in enumerate(scenario.collectives) if state.rank in spec.pg.ranks]
    chunks = max(1, len(mine))
    durations, flops = _kernel_durations(scenario, state, chunks)
    state.compute, state.calls, state.syncs = [], [], []
    state.step_start_ns = state.cpu_ns
    state.gpu_ns = max(state.gpu_ns, state.cpu_ns)
    forward = scenario.forward_kernels
    for duration, flop in zip(durations[:forward], flops[:forward], strict=True):
        _issue_compute(scenario, state, duration, flop)
    per_chunk = scenario.backward_kernels_per_chunk
    for chunk in range(chunks):
        start = forward + chunk * per_chunk
        for duration, flop in zip(durations[start : start + per_chunk], flops[start : start + per_chunk], strict=True):
            _issue_compute(scenario, state, duration, flop)
        if scenario.overlap and chunk < len(mine):
            _issue_calls(scenario, state, step, [mine[chunk]])
    state.compute_end_ns = state.gpu_ns
    if not scenario.overlap:
        _issue_calls(scenario, state, step, mine)


def _settle_collectives(
    scenario: Scenario, step: int, states: list[_RankState], transfers: list[int], canonical_seq: dict[str, int]
) -> list[InstanceTruth]:
    """Arrivals, ends and waits of the step's instances, in issue order (every rank issues in the same order)."""
    by_index = [{call.index: call for call in state.calls if not call.extra} for state in states]
    instances = []
    for index, spec in enumerate(scenario.collectives):
        for rank in spec.pg.ranks:  # a planted extra call runs alone, before the real one
            for call in states[rank].calls:
                if call.extra and call.index == index:
                    _occupy(states[rank], call, call.ready_ns, transfers[index])
        arrivals = [max(by_index[rank][index].ready_ns, states[rank].comm_free_ns) for rank in spec.pg.ranks]
        end_ns = max(arrivals) + transfers[index]
        for rank, arrive in zip(spec.pg.ranks, arrivals, strict=True):
            _occupy(states[rank], by_index[rank][index], arrive, end_ns - arrive)
        seq = canonical_seq.get(spec.pg.name, 0)
        canonical_seq[spec.pg.name] = seq + 1
        instances.append(_instance_truth(step, index, spec, seq, arrivals, end_ns, transfers[index]))
    return instances


def _occupy(state: _RankState, call: _Call, ready_ns: int, duration_ns: int) -> None:
    call.arrive_ns = max(ready_ns, state.comm_free_ns)
    call.end_ns = call.arrive_ns + duration_ns
    state.comm_free_ns = call.end_ns


def _instance_truth(
    step: int, index: int, spec: CollectiveSpec, seq: int, arrivals: list[int], end_ns: int, transfer_ns: int
) -> InstanceTruth:
    latest = max(arrivals)
    return InstanceTruth(
        step=step,
        index=index,
        collective=spec.collective,
        pg_name=spec.pg.name,
        seq=seq,
        bytes=spec.bytes,
        ranks=spec.pg.ranks,
        arrive_us=tuple(arrive / 1000 for arrive in arrivals),
        end_us=end_ns / 1000,
        transfer_us=transfer_ns / 1000,
        skew_us=(latest - min(arrivals)) / 1000,
        last_rank=spec.pg.ranks[arrivals.index(latest)],
        wait_us=tuple((end_ns - arrive - transfer_ns) / 1000 for arrive in arrivals),
    )


def _overlap_ns(first: list[tuple[int, int]], second: list[tuple[int, int]]) -> int:
    """Length of the intersection of two sorted lists of disjoint intervals (a two-pointer sweep)."""
    total = i = j = 0
    while i < len(first) and j < len(second):
        total += max(0, min(first[i][1], second[j][1]) - max(first[i][0], second[j][0]))
        if first[i][1] < second[j][1]:
            i += 1
        else:
            j += 1
    return total
