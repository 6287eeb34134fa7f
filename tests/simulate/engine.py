"""The timeline engine behind `tests.simulate.scenario.write_run`: plans each rank's step, settles every
collective's arrivals across its group, and streams the events to `tests.simulate.kineto_writer`.

See `tests.simulate.scenario` for the semantics (the truth) this engine implements. Its scratch state is
mutable and private; everything it returns is a frozen ground-truth dataclass.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from tests.simulate.kineto_writer import CommCall, RankHeader, RankWriter
from tests.simulate.scenario import (
    HIERARCHICAL_PASSES,
    TRUE_ORIGIN_NS,
    CollectiveSpec,
    GroundTruth,
    InstanceTruth,
    MismatchTruth,
    Scenario,
    StepTruth,
    hierarchical_transfer_s,
    message_nelems,
    transfer_s,
    validate_scenario,
)

_LAUNCH_OFFSET_NS: Final = 3_000  # a launch starts this long after its op starts


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


def _transfer_ns(scenario: Scenario, spec: CollectiveSpec) -> int:
    one_host = len({scenario.host_of(rank) for rank in spec.members}) == 1
    bandwidth, alpha = scenario.bandwidth_Bps, scenario.alpha_s
    if one_host and scenario.intra_host_bandwidth_Bps is not None:
        bandwidth = scenario.intra_host_bandwidth_Bps
    if one_host and scenario.intra_host_alpha_s is not None:
        alpha = scenario.intra_host_alpha_s
    if spec.link is not None:
        alpha, bandwidth = spec.link
    shape = _hierarchical_shape(scenario, spec)
    if shape is not None:
        intra = (
            scenario.intra_host_alpha_s if scenario.intra_host_alpha_s is not None else alpha,
            scenario.intra_host_bandwidth_Bps or bandwidth,
        )
        nics = scenario.nics_per_host or 1
        seconds = hierarchical_transfer_s(spec.collective, spec.bytes, shape, intra, (alpha, bandwidth), nics)
    else:
        seconds = transfer_s(spec.collective, spec.bytes, len(spec.members), alpha, bandwidth)
    return max(1, round(seconds * 1e9))


def _hierarchical_shape(scenario: Scenario, spec: CollectiveSpec) -> tuple[int, int] | None:
    """(hosts, ranks per host) of a collective the scenario runs hierarchically (`nics_per_host` set, a
    hierarchical collective on its own links across hosts, the same g > 1 ranks on each); else None."""
    per_host = Counter(scenario.host_of(rank) for rank in spec.members)
    counts = set(per_host.values())
    hierarchical = (
        scenario.nics_per_host is not None
        and spec.link is None
        and spec.collective in HIERARCHICAL_PASSES
        and len(per_host) > 1
        and len(counts) == 1
    )
    g = counts.pop() if hierarchical else 1
    return (len(per_host), g) if g > 1 else None


def _kernel_durations(
    scenario: Scenario, state: _RankState, chunks: int
) -> tuple[list[int], list[int | None]]:
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
    durations = [
        _ns(us * scale * (state.rng.uniform(1 - jitter, 1 + jitter) if jitter else 1.0)) for us in nominal
    ]
    if not (scenario.with_flops and scenario.flops_per_step > 0):
        return durations, [None] * len(durations)
    return durations, [round(scenario.flops_per_step * us / base_us) for us in nominal]


def _issue_compute(
    scenario: Scenario, state: _RankState, duration_ns: int, flops: int | None, variant: int
) -> None:
    op_start = state.cpu_ns
    launch_start = op_start + _LAUNCH_OFFSET_NS
    launch_end = launch_start + _ns(scenario.launch_us)
    op_end = max(op_start + _ns(scenario.cpu_op_us), launch_end)
    kernel_start = max(launch_end, state.gpu_ns)
    cpu = (op_start, launch_start, launch_end, op_end)
    state.compute.append((cpu, kernel_start, kernel_start + duration_ns, variant, flops))
    state.cpu_ns, state.gpu_ns = op_end, kernel_start + duration_ns


def _issue_call(scenario: Scenario, state: _RankState, spec_index: int, extra: bool) -> None:
    """The host issues one collective after the compute it depends on (a late launch waits for it)."""
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
            "extra",
            state.rank,
            step,
            index,
        ):
            _issue_call(scenario, state, index, extra=True)
        _issue_call(scenario, state, index, extra=False)


def _plan_step(scenario: Scenario, state: _RankState, step: int) -> None:
    """Issue one rank's compute and collective calls for a step; arrivals are settled across ranks later."""
    mine_all = [index for index, spec in enumerate(scenario.collectives) if state.rank in spec.members]
    early = [index for index in mine_all if scenario.collectives[index].phase == "forward"]
    mine = [index for index in mine_all if index not in early]
    chunks = max(1, len(mine))
    durations, flops = _kernel_durations(scenario, state, chunks)
    state.compute, state.calls, state.syncs = [], [], []
    state.step_start_ns = state.cpu_ns
    state.gpu_ns = max(state.gpu_ns, state.cpu_ns)
    forward = scenario.forward_kernels
    for kernel, (duration, flop) in enumerate(zip(durations[:forward], flops[:forward], strict=True)):
        _issue_compute(scenario, state, duration, flop, variant=len(state.compute) % 2)
        after = [index for place, index in enumerate(early) if place * forward // len(early) == kernel]
        _issue_calls(scenario, state, step, after)
    per_chunk = scenario.backward_kernels_per_chunk
    for chunk in range(chunks):
        start = forward + chunk * per_chunk
        for duration, flop in zip(
            durations[start : start + per_chunk], flops[start : start + per_chunk], strict=True
        ):
            _issue_compute(scenario, state, duration, flop, variant=len(state.compute) % 2)
        if scenario.overlap and chunk < len(mine):
            _issue_calls(scenario, state, step, [mine[chunk]])
    state.compute_end_ns = state.gpu_ns
    if not scenario.overlap:
        _issue_calls(scenario, state, step, mine)


def _settle_collectives(
    scenario: Scenario,
    step: int,
    states: list[_RankState],
    transfers: list[int],
    canonical_seq: dict[str, int],
) -> list[InstanceTruth]:
    """Arrivals, ends and waits of the step's instances, in issue order (the same on every rank)."""
    by_index = [{call.index: call for call in state.calls if not call.extra} for state in states]
    rng = random.Random(f"{scenario.seed}/transfer/{step}")
    extras = [(state, call) for state in states for call in state.calls if call.extra]
    instances = []
    for index, spec in enumerate(scenario.collectives):
        for state, call in extras:  # a planted extra call runs alone, before the real one
            if call.index == index:
                _occupy(state, call, call.ready_ns, transfers[index])
        arrivals = [max(by_index[rank][index].ready_ns, states[rank].comm_free_ns) for rank in spec.members]
        jitter = scenario.transfer_jitter
        transfer = max(1, round(transfers[index] * (rng.uniform(1 - jitter, 1 + jitter) if jitter else 1.0)))
        end_ns = max(arrivals) + transfer
        for rank, arrive in zip(spec.members, arrivals, strict=True):
            _occupy(states[rank], by_index[rank][index], arrive, end_ns - arrive)
        seq = canonical_seq.get(spec.pg.name, 0)
        canonical_seq[spec.pg.name] = seq + 1
        instances.append(_instance_truth(step, index, spec, seq, arrivals, end_ns, transfer))
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
        ranks=spec.members,
        arrive_us=tuple(arrive / 1000 for arrive in arrivals),
        end_us=end_ns / 1000,
        transfer_us=transfer_ns / 1000,
        skew_us=(latest - min(arrivals)) / 1000,
        last_rank=spec.members[arrivals.index(latest)],
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


def _finish_step(scenario: Scenario, state: _RankState, step: int) -> StepTruth:
    """Run the optimizer after the step's collectives, let the host wait for the GPU, write the step."""
    comm_end = max((call.end_ns for call in state.calls), default=0)
    if scenario.optimizer_us > 0:
        state.gpu_ns = max(state.gpu_ns, comm_end)
        _issue_compute(scenario, state, _ns(scenario.optimizer_us), None, variant=2)
    gpu_end = max(state.gpu_ns, comm_end)
    if state.cpu_ns < gpu_end:
        state.syncs.append((state.cpu_ns, gpu_end))
    window = (state.step_start_ns, max(state.cpu_ns, gpu_end) + _ns(scenario.step_gap_us))
    state.cpu_ns = state.gpu_ns = window[1]
    compute = [(start, end) for _, start, end, _, _ in state.compute]
    comm = [(call.arrive_ns, call.end_ns) for call in state.calls]
    gpu_window = (min(start for start, _ in compute + comm), gpu_end)
    _write_step(scenario, state, step, window, gpu_window)
    t_comp = sum(end - start for start, end in compute)
    t_comm = sum(end - start for start, end in comm)
    t_overlap = _overlap_ns(compute, comm)
    busy = t_comp + t_comm - t_overlap
    offset = scenario.offset_ns(state.rank)
    return StepTruth(
        rank=state.rank,
        step=scenario.first_step_number + step,
        window_start_us=(window[0] + offset) / 1000,
        window_end_us=(window[1] + offset) / 1000,
        t_comp_us=t_comp / 1000,
        t_comm_us=t_comm / 1000,
        t_overlap_us=t_overlap / 1000,
        idle_us=(window[1] - window[0] - busy) / 1000,
        idle_gpu_window_us=(gpu_window[1] - gpu_window[0] - busy) / 1000,
    )


def _write_step(
    scenario: Scenario, state: _RankState, step: int, window: tuple[int, int], gpu_window: tuple[int, int]
) -> None:
    writer = state.writer
    for cpu, start, end, variant, flops in state.compute:
        writer.compute_kernel(cpu, (start, end), variant, flops)
    for call in state.calls:
        record = _comm_record(scenario, state.rank, step, call)
        seq = call.seq if scenario.include_seq else None
        writer.comm_call(record, seq, call.cpu, (call.arrive_ns, call.end_ns))
    for start, end in state.syncs:
        writer.sync(start, end)
    writer.step(scenario.first_step_number + step, window, gpu_window)
    writer.flush()


def _comm_record(scenario: Scenario, rank: int, step: int, call: _Call) -> CommCall:
    spec = scenario.collectives[call.index]
    in_nelems, out_nelems = message_nelems(spec, rank)
    mismatch = scenario.mismatch
    planted = mismatch is not None and (mismatch.kind, mismatch.rank, mismatch.step) == ("bytes", rank, step)
    if mismatch is not None and planted and mismatch.index == call.index:
        in_nelems, out_nelems = in_nelems * mismatch.bytes_factor, out_nelems * mismatch.bytes_factor
    collective: str = spec.collective
    if collective == "SendRecv":
        collective = "Send" if rank == spec.members[0] else "Recv"
    member = spec.pg.ranks.index(rank)
    splits = spec.splits or ()
    return CommCall(
        collective=collective,
        in_nelems=in_nelems,
        out_nelems=out_nelems,
        dtype=spec.dtype,
        pg_name=spec.pg.name,
        pg_desc=spec.pg.desc,
        pg_ranks=spec.pg.ranks,
        in_split=splits[member] if splits else (),
        out_split=tuple(row[member] for row in splits),
        protocol=spec.protocol,
    )


def _process_groups(scenario: Scenario, rank: int) -> tuple[tuple[str, str, tuple[int, ...]], ...]:
    """The groups a rank belongs to, as `distributedInfo.pg_config` lists them (the default group first)."""
    groups = {"0": ("0", "default_pg", tuple(range(scenario.ranks)))}
    for spec in scenario.collectives:
        if rank in spec.pg.ranks:  # a pair's group too: PyTorch lists every group a rank is in
            groups.setdefault(spec.pg.name, (spec.pg.name, spec.pg.desc, spec.pg.ranks))
    return tuple(groups.values())


def _open_rank(scenario: Scenario, rank: int, out_dir: Path, compress: bool) -> _RankState:
    name = f"rank-{rank}.pt.trace.json.gz" if compress else f"rank{rank}.json"
    header = RankHeader(
        rank=rank,
        world_size=scenario.ranks,
        local_device=rank % scenario.ranks_per_host,
        devices_per_host=scenario.ranks_per_host,
        device_name=scenario.device_name,
        nccl_version=scenario.nccl_version,
        pg_config=_process_groups(scenario, rank),
        pid=1000 + rank,
        hostname=scenario.hostname(scenario.host_of(rank)) if scenario.include_hostname else None,
        record_shapes=scenario.with_flops,
    )
    writer = RankWriter(out_dir / name, header, compress, scenario.offset_ns(rank))
    writer.begin(TRUE_ORIGIN_NS)
    return _RankState(rank, random.Random(f"{scenario.seed}/{rank}"), writer, cpu_ns=TRUE_ORIGIN_NS + 50_000)


def _mismatch_truth(scenario: Scenario) -> MismatchTruth | None:
    """The planted mismatch's sequence: its group's collectives in earlier steps plus those before it."""
    mismatch = scenario.mismatch
    if mismatch is None:
        return None
    pg_name = scenario.collectives[mismatch.index].pg.name
    in_group = [index for index, spec in enumerate(scenario.collectives) if spec.pg.name == pg_name]
    seq = mismatch.step * len(in_group) + in_group.index(mismatch.index)
    return MismatchTruth(mismatch.rank, mismatch.kind, pg_name, seq)


def run(scenario: Scenario, out_dir: Path, compress: bool) -> GroundTruth:
    """Simulate a validated scenario step by step, streaming every rank's trace into `out_dir`."""
    transfers = [_transfer_ns(scenario, spec) for spec in scenario.collectives]
    states = [_open_rank(scenario, rank, out_dir, compress) for rank in range(scenario.ranks)]
    canonical_seq: dict[str, int] = {}
    steps: list[StepTruth] = []
    instances: list[InstanceTruth] = []
    for step in range(scenario.steps):
        for state in states:
            _plan_step(scenario, state, step)
        instances += _settle_collectives(scenario, step, states, transfers, canonical_seq)
        steps += [_finish_step(scenario, state, step) for state in states]
    for state in states:
        state.writer.close(TRUE_ORIGIN_NS, state.cpu_ns)
    return GroundTruth(
        files=tuple(state.writer.path for state in states),
        ranks=scenario.ranks,
        ranks_per_host=scenario.ranks_per_host,
        host_offsets_us=scenario.host_offsets_us or (0.0,) * scenario.hosts,
        straggler_rank=scenario.straggler.rank if scenario.straggler else None,
        mismatch=_mismatch_truth(scenario),
        model=scenario.model,
        collective_bytes=tuple(spec.bytes for spec in scenario.collectives),
        steps=tuple(steps),
        instances=tuple(instances),
        pytorch_version=scenario.pytorch_version,
    )


def write_run(scenario: Scenario, out_dir: Path, gzip: bool = False) -> GroundTruth:
    """Simulate `scenario` and write one Kineto trace per rank into `out_dir` (`rank{r}.json`, or
    `rank-{r}.pt.trace.json.gz` with `gzip`); return what a correct analysis of those files must find.

    Raises `UsageError` for an inconsistent scenario before writing anything.
    """
    validate_scenario(scenario)
    out_dir.mkdir(parents=True, exist_ok=True)
    return run(scenario, out_dir, gzip)
