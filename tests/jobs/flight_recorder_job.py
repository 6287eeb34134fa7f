"""A tiny 3-rank gloo job on the CPU with PyTorch's Flight Recorder on, each rank dumping its ring buffer; the
tests of `traceview hang` plant one class of hang or desynchronisation in it and read the dumps.

    python tests/jobs/flight_recorder_job.py --scenario skip --out DIR

Every rank runs all-reduces of `ELEMENTS` float32 on the default group; the culprit rank (`CULPRIT`) plants
one class at collective `PLANTED` (1-based, the group's sequence number):

- `healthy`: no plant; ranks all-reduce for `HEALTHY_S` and a second thread in each dumps on demand at
  `HEALTHY_DUMPS_S` after a common start (`dump<k>.rank<N>.pickle`: the healthy job dumped mid-run 3 times);
- `skip`: the culprit never enters collective `PLANTED` (it sleeps past the others' timeout);
- `first`: the same at collective 1 (a rank stuck before its first collective);
- `op`: the culprit broadcasts where the others all-reduce;
- `size`: the culprit all-reduces twice as many elements (gloo aborts a process on a size mismatch, so here
  each rank dumps just after it enqueued the call, the culprit 1.5 s after the others);
- `traced`: `skip`, with every rank's collectives before the plant run under torch's profiler; each rank but
  `TRACELESS` exports its Kineto trace (`trace.rank<N>.json`) before the plant (a profiler that flushed a
  window of steps before the hang; `TRACELESS` never flushed), and the final dumps are pickles only;

Gloo records no point-to-point op in the Flight Recorder (torch 2.13), so a send without its receive is not
a class this job can plant.

The others' collective times out (`TIMEOUT_S`), and every rank then dumps (`rank.rank<N>.pickle`, and the
JSON variant `rank<N>.json`). Each rank writes `facts.rank<N>.json`: what it called, in order (op, elements).
Each rank ends with `os._exit` so a rank left in a broken collective never hangs the test.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
import traceback
from pathlib import Path

WORLD, STEPS, ELEMENTS, PLANTED, CULPRIT, TIMEOUT_S = 3, 6, 64, 4, 2, 3.0
TRACELESS = 0
BUFFER_ENTRIES = 64
HEALTHY_S, HEALTHY_DUMPS_S = 2.0, (0.4, 0.8, 1.2)
JOB_LIMIT_S, HEALTHY_TIMEOUT_S = 90.0, 60.0
STACK_SCENARIOS = frozenset({"skip", "op"})


def _dump(out: Path, stem: str, rank: int, stacks: bool = False, as_json: bool = True) -> None:
    """The rank's dump as pickle (and, for the final dump, JSON). The first dump with stacks symbolises them
    (seconds on a busy machine), so only the dumps taken after a timeout carry them."""
    import torch._C._distributed_c10d as c10d

    (out / f"{stem}.rank{rank}.pickle").write_bytes(c10d._dump_fr_trace(includeStackTraces=stacks))
    if stem == "rank" and as_json:
        (out / f"{stem}{rank}.json").write_bytes(c10d._dump_fr_trace_json())


def _planted_call(scenario: str, rank: int, out: Path, calls: list[list[object]]) -> None:
    import torch
    import torch.distributed as dist

    if rank == CULPRIT and scenario in ("skip", "first", "traced"):
        calls.append(["skipped", 0])
        time.sleep(TIMEOUT_S + 2.0)
    elif rank == CULPRIT and scenario == "op":
        calls.append(["broadcast", ELEMENTS])
        dist.broadcast(torch.ones(ELEMENTS), src=0)
    elif scenario == "size":  # gloo aborts the process on a size mismatch: each rank dumps while it waits
        elements = 2 * ELEMENTS if rank == CULPRIT else ELEMENTS
        time.sleep(1.5 if rank == CULPRIT else 0.0)
        calls.append(["all_reduce", elements])
        work = dist.all_reduce(torch.ones(elements), async_op=True)
        _dump(out, "rank", rank)
        work.wait()
    else:
        calls.append(["all_reduce", ELEMENTS])
        dist.all_reduce(torch.ones(ELEMENTS))


def _work(rank: int, scenario: str, out: Path, store: Path) -> None:
    import torch.distributed as dist

    os.environ["TORCH_FR_BUFFER_SIZE"] = str(BUFFER_ENTRIES)
    dist.init_process_group(
        "gloo",
        init_method=f"file://{store}",
        rank=rank,
        world_size=WORLD,
        timeout=dt.timedelta(seconds=HEALTHY_TIMEOUT_S if scenario == "healthy" else TIMEOUT_S),
    )
    calls: list[list[object]] = []
    if scenario == "healthy":
        _healthy(rank, out, calls)
    else:
        planted = 1 if scenario == "first" else PLANTED
        _before_the_plant(scenario, rank, out, planted, calls)
        try:
            _planted_call(scenario, rank, out, calls)
        except Exception as error:  # the planted collective times out or fails: what the dump is for
            calls.append(["error", str(error).splitlines()[0][:200]])
        if scenario != "size":
            _dump(out, "rank", rank, stacks=scenario in STACK_SCENARIOS, as_json=scenario != "traced")
    (out / f"facts.rank{rank}.json").write_text(json.dumps({"rank": rank, "calls": calls}))


def _before_the_plant(scenario: str, rank: int, out: Path, planted: int, calls: list[list[object]]) -> None:
    """The all-reduces before the planted collective; under the profiler for `traced`, whose trace every
    rank but `TRACELESS` exports right after them."""
    import contextlib

    import torch
    import torch.distributed as dist

    traced = scenario == "traced"
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities) if traced else contextlib.nullcontext() as profiler:
        for _ in range(1, planted):
            calls.append(["all_reduce", ELEMENTS])
            dist.all_reduce(torch.ones(ELEMENTS))
    if traced and rank != TRACELESS:
        profiler.export_chrome_trace(str(out / f"trace.rank{rank}.json"))


def _healthy(rank: int, out: Path, calls: list[list[object]]) -> None:
    """All-reduces with a little compute between them for `HEALTHY_S`; a second thread dumps the ring buffer
    at `HEALTHY_DUMPS_S` after a common start (a barrier), wherever the main thread is then."""
    import threading

    import torch
    import torch.distributed as dist

    dist.barrier()
    start = time.monotonic()

    def dumper() -> None:
        for index, moment in enumerate(HEALTHY_DUMPS_S, start=1):
            time.sleep(max(0.0, start + moment - time.monotonic()))
            _dump(out, f"dump{index}", rank)

    thread = threading.Thread(target=dumper)
    thread.start()
    going = True
    while going:  # each all-reduce carries whether the rank goes on: every rank stops after the same one
        calls.append(["all_reduce", ELEMENTS])
        flags = torch.ones(ELEMENTS) * float(time.monotonic() - start < HEALTHY_S)
        dist.all_reduce(flags, op=dist.ReduceOp.MIN)
        going = bool(flags[0] > 0)
        time.sleep(0.005)
    thread.join()


def _rank_main(rank: int, scenario: str, out: Path, store: Path) -> None:
    code = 0
    try:
        _work(rank, scenario, out, store)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main() -> None:
    """Start the ranks of one scenario (forked: torch is imported once); exit non-zero when a rank failed
    outside its planted call."""
    import multiprocessing

    import torch  # noqa: F401  # imported before the fork

    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--scenario", choices=("healthy", "skip", "first", "op", "size", "traced"), required=True
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    store = args.out / "store"
    store.unlink(missing_ok=True)
    context = multiprocessing.get_context("fork")
    ranks = [
        context.Process(target=_rank_main, args=(r, args.scenario, args.out, store)) for r in range(WORLD)
    ]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(JOB_LIMIT_S)
    store.unlink(missing_ok=True)
    failed = [rank for rank, process in enumerate(ranks) if process.exitcode != 0]
    if failed:  # a rank gloo aborted (the size mismatch) has written its dump before
        print(f"ranks {failed} ended with {[ranks[r].exitcode for r in failed]}", file=sys.stderr)
    sys.exit(1 if any(process.exitcode not in (0, -6) for process in ranks) else 0)


if __name__ == "__main__":
    main()
