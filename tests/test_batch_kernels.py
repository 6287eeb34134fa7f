"""The kernels analysis's map part and the kernel-class samples of a batch of ranks (stacked frames, each
row with its `rank`) equal those of each rank alone, frame by frame; a batch runs the queries of two ranks.

Each rank goes through the map's own steps (`traceview.map.rank_summary.summarize`): its host timeline, its
classified events after the communication kernels are placed, its chosen windows. The batch classes the
stacked events at once (`name_id` and `key_id` then number the names of the whole batch) and cuts them into
the stacked windows; nothing a rank gets may depend on the other ranks of its batch.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from traceview.parsers import kineto

from tests import kineto_factory as kf
from tests.shared_data import REAL_KINETO, real_files, requires_shared
from tests.test_map_queries import counted_queries
from traceview.budget.time_budget import classified_events
from traceview.collectives.calls import launches
from traceview.collectives.comm_events import comm_events
from traceview.collectives.kernels import comm_kernels
from traceview.distributions.samples import batch_class_parts
from traceview.events.host_timeline import on_host_timeline
from traceview.kernels.classes import clipped_events
from traceview.kernels.parts import KernelParts, batch_kernel_parts, classed_events
from traceview.model.trace import RankTrace, Run
from traceview.steps.windows import chosen_windows

GEMM = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(Params)"
SOFTMAX = "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>(float*)"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>(int, float*)"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
SENDRECV = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"
CLOCK_NS = 1_700_000_000_000_000_000


def _launched(op: str, ts: float, correlation: int, name: str, start: float, dur: float) -> list[kf.Event]:
    """An operator [ts, ts+20) launching one kernel `name` on the device at `start`."""
    return [
        kf.cpu_op(op, ts, 20, args={"Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]}),
        kf.launch(ts + 5, correlation),
        kf.kernel(name, start, dur, correlation),
    ]


def _compute(offset: float) -> list[kf.Event]:
    """Two steps of compute on two streams: ties of duration between names, a memcpy, a host phase."""
    events: list[kf.Event] = [kf.step(1, offset, 400), kf.step(2, offset + 400, 400)]
    for s, base in enumerate((offset, offset + 400)):
        c = 10 * s
        events += [
            kf.cpu_op("## forward ##", base + 5, 150, cat="user_annotation"),
            *_launched("aten::mm", base + 10, c + 1, GEMM, base + 50, 40),
            *_launched("aten::add", base + 40, c + 2, ADD, base + 95, 40),  # as long as the gemm
            *_launched("aten::_softmax", base + 70, c + 3, SOFTMAX, base + 95, 30),  # on the same time
            kf.cpu_op("aten::item", base + 200, 10),
            kf.launch(base + 210, c + 4, name="cudaMemcpyAsync"),
            kf.memcpy(base + 220, 10, c + 4),
        ]
    events[-3]["args"]["stream"] = 8  # the last softmax on another stream
    return events


def _reversed_names(offset: float) -> list[kf.Event]:
    """The same names as `_compute`, first seen in the other order (name ids differ from a batch's)."""
    return [
        kf.step(1, offset, 300),
        *_launched("aten::add", offset + 10, 1, ADD, offset + 40, 40),
        *_launched("aten::mm", offset + 40, 2, GEMM, offset + 90, 40),
        *_launched("aten::mm", offset + 70, 3, GEMM, offset + 140, 20),
        *_launched("aten::add", offset + 100, 4, ADD, offset + 170, 20),
    ]


def _collective(offset: float) -> list[kf.Event]:
    args = {"Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024, "dtype": "Float"}
    return [
        kf.step(1, offset, 500),
        *_launched("aten::mm", offset + 10, 1, GEMM, offset + 40, 50),
        kf.cpu_op("c10d::allreduce_", offset + 100, 50),
        kf.cpu_op("record_param_comms", offset + 105, 40, args=args),
        kf.cpu_op("nccl:all_reduce", offset + 110, 30, cat="user_annotation"),
        kf.launch(offset + 120, 2),
        kf.kernel(ALLREDUCE, offset + 130, 80, 2, stream=20),
        *_launched("aten::mm", offset + 200, 3, GEMM, offset + 215, 50),
    ]


def _all_to_all(offset: float) -> list[kf.Event]:
    args = {"Collective name": "all_to_all", "In msg nelems": 3392, "Out msg nelems": 3392, "dtype": "Int"}
    return [
        kf.step(1, offset, 1000),
        kf.cpu_op("record_param_comms", offset + 100, 30, args=args),
        kf.cpu_op("nccl:all_to_all", offset + 105, 20),
        kf.launch(offset + 110, 1),
        kf.kernel(SENDRECV, offset + 200, 50, 1, stream=20),
        kf.launch(offset + 300, 2),
        kf.kernel(GEMM, offset + 400, 100, correlation=2),
    ]


def _graphs(offset: float) -> list[kf.Event]:
    """A captured step (a capture call, a launch whose kernel never ran) and a replayed graph."""
    return [
        kf.step(1, offset, 300),
        kf.step(2, offset + 300, 300),
        kf.launch(offset + 10, 90, name="cudaStreamBeginCapture"),
        kf.launch(offset + 20, 91),  # captured: no kernel
        kf.cpu_op("CompiledFunction", offset + 310, 40),
        kf.launch(offset + 315, 5, name="cudaGraphLaunch"),
        kf.kernel(GEMM, offset + 330, 30, 5),
        kf.kernel(ADD, offset + 360, 10, 5),
    ]


def _no_steps(offset: float) -> list[kf.Event]:
    """No step marks: one window over the whole trace."""
    return [*_launched("aten::mm", offset + 10, 1, GEMM, offset + 40, 50)]


def _no_windows(offset: float) -> list[kf.Event]:
    """A host step that launched nothing: no window holds the kernel launched after it."""
    return [kf.step(1, offset, 100), *_launched("aten::mm", offset + 200, 1, GEMM, offset + 240, 50)]


def _device_only(offset: float) -> list[kf.Event]:
    """No host rows: kernels inside GPU-side step annotations."""
    return [
        kf.step(1, offset, 200, on_gpu=True),
        kf.kernel(GEMM, offset + 10, 50),
        kf.kernel(ADD, offset + 70, 5),
    ]


def _host_only(offset: float) -> list[kf.Event]:
    return [
        kf.step(1, offset, 100),
        kf.cpu_op("aten::mm", offset + 10, 30),
        kf.cpu_op("Optimizer.step#SGD.step", offset + 50, 20),
    ]


def _empty(offset: float) -> list[kf.Event]:
    return [kf.cpu_op("aten::empty", offset + 1, 1)]


MAKERS = (
    _compute,
    _collective,
    _all_to_all,
    _graphs,
    _reversed_names,
    _no_steps,
    _no_windows,
    _device_only,
    _host_only,
)


def _factory_trace(tmp_path: Path, maker: Any, rank: int) -> RankTrace:
    """The rank `rank` of `maker`'s events, on its own clock (its events and clock start both shifted)."""
    offset = 1000.0 * rank + 7.5
    doc = kf.document(maker(offset), rank=rank, world_size=64, base_ns=CLOCK_NS + 1000 * rank)
    return kineto.parse(kf.write(doc, tmp_path / f"rank{rank}.json")).validate()


def _pipeline(trace: RankTrace) -> tuple[RankTrace, pl.DataFrame, pl.DataFrame]:
    """The rank on its timeline, its events after `comm_events` and its windows, as `summarize` has them."""
    trace = on_host_timeline(trace)
    one = Run(ranks=(trace,))
    events = classified_events(one, ())
    windows = chosen_windows(trace)[1]
    events, _ = comm_events(events, comm_kernels(one, events, launches(one)))
    return trace, events, windows


def _batched(traces: list[RankTrace]) -> tuple[list[KernelParts], list[tuple[pl.DataFrame, pl.DataFrame]]]:
    ran = [_pipeline(t) for t in traces]
    windows = pl.concat([w for _, _, w in ran])
    classed, names = classed_events(pl.concat([e for _, e, _ in ran]))
    clipped = clipped_events(classed, windows)
    ranks = [t.rank for t, _, _ in ran]
    return (
        batch_kernel_parts([t for t, _, _ in ran], classed, names, clipped, windows),
        batch_class_parts(clipped, ranks),
    )


def _alone(trace: RankTrace) -> tuple[KernelParts, tuple[pl.DataFrame, pl.DataFrame]]:
    trace, events, windows = _pipeline(trace)
    classed, names = classed_events(events)
    clipped = clipped_events(classed, windows)
    alone = batch_kernel_parts([trace], classed, names, clipped, windows)[0]
    return alone, batch_class_parts(clipped, [trace.rank])[0]


def _frames(parts: KernelParts, samples: tuple[pl.DataFrame, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    found = {f.name: getattr(parts, f.name) for f in dataclasses.fields(KernelParts)}
    return {**found, "kernel_classes": samples[0], "class_sketches": samples[1]}


def _assert_batch_is_each_alone(traces: list[RankTrace]) -> list[dict[str, pl.DataFrame]]:
    parts, samples = _batched(traces)
    assert len(parts) == len(samples) == len(traces)
    found = []
    for trace, batch_parts, batch_samples in zip(traces, parts, samples, strict=True):
        batch = _frames(batch_parts, batch_samples)
        alone = _frames(*_alone(trace))
        for name, frame in alone.items():
            assert batch[name].schema == frame.schema, (trace.rank, name)
            assert batch[name].equals(frame), (trace.rank, name, batch[name], frame)
        found.append(batch)
    return found


def _factory_batch(tmp_path: Path, makers: tuple[Any, ...] = MAKERS, first: int = 0) -> list[RankTrace]:
    return [_factory_trace(tmp_path, maker, first + i) for i, maker in enumerate(makers)]


def test_a_batch_of_made_ranks_is_each_rank_alone(tmp_path: Path) -> None:
    traces = _factory_batch(tmp_path, (*MAKERS, _empty))
    found = _assert_batch_is_each_alone(traces)
    by_maker = dict(zip((*MAKERS, _empty), found, strict=True))
    # what each kind of rank contributes (so that the equalities above compare something)
    assert by_maker[_compute]["class_steps"].height > 0
    assert by_maker[_compute]["host"].get_column("phase").to_list().count("forward") == 2
    assert by_maker[_collective]["top_kernels"].filter(pl.col("kernel_class") == "communication").height == 1
    assert by_maker[_all_to_all]["operators"].height + by_maker[_all_to_all]["top_kernels"].height > 0
    graph_steps = by_maker[_graphs]["launches"]
    assert graph_steps.get_column("capture_step").to_list() == [True, False]
    assert graph_steps.get_column("graph_kernels").to_list() == [0, 2]
    assert set(by_maker[_no_steps]["class_steps"].get_column("step")) == {-1}  # the whole trace
    assert _pipeline(traces[MAKERS.index(_no_windows)])[2].height == 0
    assert by_maker[_no_windows]["class_steps"].height == by_maker[_no_windows]["launches"].height == 0
    assert by_maker[_no_windows]["ranks"].get_column("kernels").to_list() == [1]
    assert by_maker[_device_only]["ranks"].get_column("linked").to_list() == [0]
    assert by_maker[_empty]["ranks"].height == 0  # no device events: every part empty
    sketches = by_maker[_compute]["class_sketches"]
    assert sketches.get_column("kernels").to_list() == [
        2,
        2,
        2,
    ]  # gemm, add, softmax: one a step (memcpy: none)
    assert by_maker[_compute]["kernel_classes"].height == 3 * 2


def test_ranks_in_another_order_and_company_get_the_same_parts(tmp_path: Path) -> None:
    """The batch's order and the other ranks in it change nothing of a rank's parts."""
    traces = _factory_batch(tmp_path)
    forward, _ = _batched(traces)
    backward, _ = _batched(traces[::-1])
    for mine, theirs in zip(forward, backward[::-1], strict=True):
        for field in dataclasses.fields(KernelParts):
            assert getattr(mine, field.name).equals(getattr(theirs, field.name)), field.name


def test_a_batch_costs_the_queries_of_two_ranks(tmp_path: Path) -> None:
    eight = _factory_batch(tmp_path, MAKERS * 2)[:8]
    ran = [_pipeline(t) for t in eight]

    def queries(k: int) -> int:
        windows = pl.concat([w for _, _, w in ran[:k]])
        with counted_queries() as count:
            classed, names = classed_events(pl.concat([e for _, e, _ in ran[:k]]))
            clipped = clipped_events(classed, windows)
            batch_kernel_parts([t for t, _, _ in ran[:k]], classed, names, clipped, windows)
            batch_class_parts(clipped, [t.rank for t, _, _ in ran[:k]])
        return count[0]

    queries(8)  # the process's caches (kernel names, host phases, shapes) filled, as in a worker
    assert queries(8) == queries(2)


@requires_shared
def test_a_batch_of_the_real_traces_and_made_ranks_is_each_rank_alone(tmp_path: Path) -> None:
    real = []
    for path in real_files(REAL_KINETO, "*/*.json*"):
        try:
            trace = kineto.parse(path).validate()
        except Exception:  # a trace the parser refuses (tested elsewhere) has no summary
            continue
        rank = 100 + len(real)
        real.append(dataclasses.replace(trace, meta=dataclasses.replace(trace.meta, rank=rank)))
    assert len(real) >= 20
    made = _factory_batch(tmp_path, (*MAKERS, _empty))
    found = _assert_batch_is_each_alone([*made[:4], *real, *made[4:]])
    assert sum(parts["top_kernels"].height for parts in found) > 100


@pytest.mark.parametrize("points", [1, 2, 511, 512, 513, 1025, 4000])
def test_the_class_sketch_is_the_order_statistics_of_python(tmp_path: Path, points: int) -> None:
    """`SKETCHED` keeps what `sketch` keeps: every duration up to `SKETCH_POINTS`, else evenly spaced order
    statistics (indices rounded half to even, as Python's `round`)."""
    from traceview.distributions.samples import SKETCHED

    durations = [float((i * 7919) % 1009) / 8 for i in range(points)]
    frame = pl.DataFrame({"g": [0] * points, "dur_us": durations})
    kept = frame.lazy().group_by("g").agg(SKETCHED).collect().get_column("dur_us").to_list()[0]
    ordered = sorted(durations)
    if points <= 512:
        assert kept == ordered
    else:
        assert kept == [ordered[round(i * (points - 1) / 511)] for i in range(512)]
