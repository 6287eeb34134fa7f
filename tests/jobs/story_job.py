"""Small real gloo jobs on the CPU for the run's story (tests/test_story_jobs.py), recorded by
`traceview.profile()`; each rank writes what it did beside the run, so the tests check traceview against
the job.

    python tests/jobs/story_job.py --mode straggle --spawn 3 --run-dir RUN --facts DIR
    python tests/jobs/story_job.py --mode conv --spawn 2 --run-dir RUN --facts DIR

`--mode straggle`: a data-parallel MLP, one all-reduce of the flat gradients a step; rank `SLEEPER` sleeps
`SLEEP_S` on the host at the start of every step, before any operator (a host-side straggler), and rank
`HEAVY` runs `HEAVY_MATMULS` extra matrix products a step before its all-reduce (it computes more, but less
than the sleeper sleeps: its peers never wait for it). `--mode conv`: a small convolutional net, data
parallel, recorded with shapes and without the profiler's `flops` (traceview counts them from the shapes).
"""

from __future__ import annotations

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

import traceview

SLEEPER, HEAVY = 2, 1
SLEEP_S = 0.2
HEAVY_MATMULS, HEAVY_SIZE = 6, 192  # 2-3 ms of extra products: clear of the sleeper's slower compute after
# each sleep (it measured 1.8 ms against 1.3 ms for 96 x 96 products on a quiet machine)
BATCH, FEATURES, HIDDEN = 16, 64, 128
CONV_BATCH = 4
STEPS, ACTIVE = 10, 8


def _all_reduce_grads(model: torch.nn.Module) -> None:
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    torch.nn.utils.vector_to_parameters(flat, grads)  # type: ignore[arg-type]


def straggle_step(model: torch.nn.Module, optimiser: torch.optim.Optimizer, rank: int) -> None:
    """Sleep (the sleeper), compute (more on the heavy rank), all-reduce, update."""
    if rank == SLEEPER:
        time.sleep(SLEEP_S)  # host time before any operator of the step
    loss = model(torch.randn(BATCH, FEATURES)).pow(2).mean()
    optimiser.zero_grad()
    loss.backward()
    if rank == HEAVY:
        work = torch.randn(HEAVY_SIZE, HEAVY_SIZE)
        for _ in range(HEAVY_MATMULS):
            work = torch.tanh(work @ work)
    _all_reduce_grads(model)
    optimiser.step()


def conv_model() -> torch.nn.Module:
    """Two strided and padded convolutions, then a linear head."""
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, stride=2, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 16, 3, stride=1, padding=1),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(16 * 8 * 8, 10),
    )


def conv_step(model: torch.nn.Module, optimiser: torch.optim.Optimizer, rank: int) -> None:
    del rank
    loss = model(torch.randn(CONV_BATCH, 3, 16, 16)).pow(2).mean()
    optimiser.zero_grad()
    loss.backward()
    _all_reduce_grads(model)
    optimiser.step()


def train(args: argparse.Namespace) -> None:
    """Run the job on this rank (the process group set up from the environment)."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    if args.mode == "conv":
        model, step, batch = conv_model(), conv_step, CONV_BATCH
    else:
        layers = [torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 1)]
        model, step, batch = torch.nn.Sequential(*layers), straggle_step, BATCH
    optimiser = torch.optim.SGD(model.parameters(), lr=0.01)
    params = sum(p.numel() for p in model.parameters())
    settings = {"wait": 0, "warmup": STEPS - ACTIVE, "active": ACTIVE, "local_batch": batch, "params": params}
    with traceview.profile(args.run_dir, with_flops=False, **settings) as prof:
        for _ in range(STEPS):
            step(model, optimiser, rank)
            prof.step()
    facts = {
        "rank": rank,
        "world_size": dist.get_world_size(),
        "host": socket.gethostname(),
        "mode": args.mode,
        "sleeps_s": SLEEP_S if args.mode == "straggle" and rank == SLEEPER else 0.0,
        "extra_matmuls": HEAVY_MATMULS if args.mode == "straggle" and rank == HEAVY else 0,
        "params": params,
    }
    Path(args.facts, f"facts.rank{rank}.json").write_text(json.dumps(facts), encoding="utf-8")
    dist.destroy_process_group()


def _spawned(rank: int, args: argparse.Namespace, world_size: int, port: int) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
    )
    train(args)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main(argv: list[str]) -> None:
    """Parse the options and launch `--spawn N` processes."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mode", choices=("straggle", "conv"), required=True)
    parser.add_argument("--spawn", type=int, required=True)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--facts", required=True)
    args = parser.parse_args(argv)
    Path(args.facts).mkdir(parents=True, exist_ok=True)
    mp.spawn(_spawned, args=(args, args.spawn, _free_port()), nprocs=args.spawn)


if __name__ == "__main__":
    main(sys.argv[1:])
