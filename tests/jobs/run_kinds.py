"""Small real CPU jobs of the run kinds the verdict tells apart (docs/metrics.md, "Verdict", run kinds),
recorded with the plain PyTorch profiler (no traceview in the job), one trace per rank in each folder.

    python tests/jobs/run_kinds.py ddp --ranks 2 --late-ms 60 --repeats 3 --out DIR
    python tests/jobs/run_kinds.py single --out DIR

`ddp`: DistributedDataParallel over gloo, `--ranks` processes (its own launcher, torch.multiprocessing); each
recording runs `STEPS` steps under a profiler schedule (wait 1, warm-up 1, active `ACTIVE`); the model's
gradients fill DDP's small first bucket and one more, so a recording holds 2 x `ACTIVE` all-reduces (six:
too few for the order alone to name a rank of two, (1/2)^6 = 1.6%). Per repeat k it
writes `DIR/late<k>/`, where the last rank sleeps `--late-ms` on the host at the start of each step (before
its forward pass: its peers wait for it at the gradient all-reduce), then `DIR/healthy<k>/`, the same job
with no sleep. `single`: one process, no process group: `DIR/inference/` (`INFER_BATCHES` batches under
`torch.inference_mode()`, `prof.step()` after each, no backward, no optimizer) and `DIR/warmup/` (a
benchmark harness: `WARMUP_ITERATIONS` iterations inside `record_function("warmup")`, then `TIMED` timed
ones, no `prof.step()`). Each DDP folder gets `job.rank<N>.json`: what the job did (its sleep per step, its
step times, each recorded step's forward pass in wall and CPU seconds, and the wall-clock time it arrived at
each all-reduce of the recorded steps and saw it done, noted by a DDP communication hook).
"""

# No `from __future__ import annotations`: DDP checks a communication hook's annotation is `dist.GradBucket`.

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, record_function, schedule

FEATURES, HIDDEN, BATCH = 256, 1024, 64
STEPS, ACTIVE = 5, 3
INFER_BATCHES, WARMUP_ITERATIONS, TIMED = 2 + ACTIVE, 40, 4


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, FEATURES)
    )


def _record(
    folder: Path, rank: int, late_s: float, model: torch.nn.Module, forward: list[list[float]]
) -> list[float]:
    """One recording of the DDP job into `folder`: the step times (s) of the rank; `forward` gets each step's
    forward pass, [wall, CPU] seconds (a process the machine set aside shows wall well above CPU)."""
    optimiser = torch.optim.SGD(model.parameters(), lr=0.01)
    times: list[float] = []
    with profile(
        activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=ACTIVE, repeat=1)
    ) as prof:
        for _ in range(STEPS):
            began = time.perf_counter()
            if late_s:
                time.sleep(late_s)
            wall, cpu = time.perf_counter(), time.process_time()
            loss = model(torch.randn(BATCH, FEATURES)).pow(2).mean()
            forward.append([time.perf_counter() - wall, time.process_time() - cpu])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            times.append(time.perf_counter() - began)
            prof.step()
    folder.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(folder / f"rank{rank}.json"))
    return times


def _stamped(stamps: dict[str, list[float]], bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's all-reduce of a gradient bucket (the average), the times this rank arrived at it and saw it done
    noted (the wall clock: every rank of the job shares the host's)."""
    stamps["arrivals"].append(time.time())
    work = dist.all_reduce(bucket.buffer(), async_op=True)
    assert work is not None
    world = dist.get_world_size()

    def done(future: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
        stamps["finished"].append(time.time())
        return future.value()[0] / world

    return work.get_future().then(done)


def _ddp(rank: int, args: argparse.Namespace, port: int) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(args.ranks)
    )
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    model = torch.nn.parallel.DistributedDataParallel(_model())
    stamps: dict[str, list[float]] = {"arrivals": [], "finished": []}
    model.register_comm_hook(stamps, _stamped)
    late = rank == args.ranks - 1
    for k in range(args.repeats):
        for kind, late_s in (("late", args.late_ms / 1000 if late else 0.0), ("healthy", 0.0)):
            folder = Path(args.out, f"{kind}{k}")
            dist.barrier()
            forward: list[list[float]] = []
            stamps["arrivals"].clear()
            stamps["finished"].clear()
            times = _record(folder, rank, late_s, model, forward)
            said = {"rank": rank, "late_rank": args.ranks - 1, "sleep_s": late_s, "step_s": times}
            said["forward_s"] = forward[STEPS - ACTIVE :]  # the recorded steps' [wall, CPU]
            for name, times in stamps.items():  # the recorded steps'
                said[f"{name}_s"] = times[len(times) * (STEPS - ACTIVE) // STEPS :]
            (folder / f"job.rank{rank}.json").write_text(json.dumps(said), encoding="utf-8")
    dist.destroy_process_group()


def _single(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    model = _model()
    folder = Path(args.out, "inference")
    folder.mkdir(parents=True, exist_ok=True)
    with (
        profile(
            activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=ACTIVE, repeat=1)
        ) as prof,
        torch.inference_mode(),
    ):
        for _ in range(INFER_BATCHES):
            model(torch.randn(BATCH, FEATURES))
            prof.step()
    prof.export_chrome_trace(str(folder / "rank0.json"))
    folder = Path(args.out, "warmup")
    folder.mkdir(parents=True, exist_ok=True)
    x = torch.randn(BATCH, FEATURES)
    with profile(activities=[ProfilerActivity.CPU]) as prof, torch.no_grad():
        with record_function("warmup"):
            for _ in range(WARMUP_ITERATIONS):
                model(x)
        for _ in range(TIMED):
            model(x)
    prof.export_chrome_trace(str(folder / "rank0.json"))
    said = {"warmup_iterations": WARMUP_ITERATIONS, "timed_iterations": TIMED}
    (folder / "job.json").write_text(json.dumps(said), encoding="utf-8")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main(argv: list[str]) -> None:
    """Parse the options and run the job."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("job", choices=("ddp", "single"))
    parser.add_argument("--out", required=True)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--late-ms", type=float, default=60.0)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args(argv)
    if args.job == "single":
        _single(args)
        return
    mp.spawn(_ddp, args=(args, _free_port()), nprocs=args.ranks)


if __name__ == "__main__":
    main(sys.argv[1:])
