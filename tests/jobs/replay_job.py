"""Small real gloo jobs on the CPU for the replay's levers (tests/test_replay_jobs.py), recorded by
`traceview.profile()`: one spawn runs several recordings in a row, each in its own run folder.

    python tests/jobs/replay_job.py --spawn 2 --out DIR --reruns 3 --plans straggle,healthy,half
    python tests/jobs/replay_job.py --spawn 4 --out DIR --reruns 3 --plans healthy

A step: every rank runs a two-layer MLP (features -> hidden -> features: its FLOPs are linear in the hidden
size; plan `half` halves it), rank `SLEEPER` then stays busy on the host for `SLEEP_S` (plan `straggle`
only), and every rank all-reduces a fixed buffer of `PAYLOAD` floats in chunks of the `SHARES` (sizes spread
4x: the host link's alpha and B can be fitted; the communication does not depend on the hidden size), then
the optimiser's update. The runs land in DIR/<plan>-<rerun>/.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import traceview

SLEEPER, SLEEP_S = 1, 0.03
BATCH, FEATURES, HIDDEN = 64, 256, 1024
PAYLOAD, SHARES = 1 << 20, (1, 1, 2, 4)
STEPS, ACTIVE = 7, 5
HIDDEN_OF = {"straggle": HIDDEN, "healthy": HIDDEN, "half": HIDDEN // 2}


def _spin(seconds: float) -> None:
    """Busy on the host for `seconds`: a rank that slept would be favoured by a loaded machine's scheduler
    after it wakes (its compute then runs faster than in a rerun without the delay)."""
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def _step(
    model: torch.nn.Module, optimiser: torch.optim.Optimizer, payload: list[torch.Tensor], sleep: float
) -> None:
    loss = model(torch.randn(BATCH, FEATURES)).pow(2).mean()
    optimiser.zero_grad()
    loss.backward()
    if sleep:  # after the compute: the ranks compute side by side as in `healthy`, and share the cores alike
        _spin(sleep)
    for chunk in payload:
        dist.all_reduce(chunk)
    optimiser.step()


def _record(plan: str, folder: Path, rank: int) -> None:
    torch.manual_seed(rank)
    hidden = HIDDEN_OF[plan]
    model = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, FEATURES)
    )
    optimiser = torch.optim.SGD(model.parameters(), lr=0.001)
    payload = list(torch.zeros(PAYLOAD).split([PAYLOAD * s // sum(SHARES) for s in SHARES]))
    sleep = SLEEP_S if plan == "straggle" and rank == SLEEPER else 0.0
    settings = {"wait": 0, "warmup": STEPS - ACTIVE, "active": ACTIVE, "local_batch": BATCH}
    dist.barrier()
    with traceview.profile(folder, with_flops=False, **settings) as prof:
        for _ in range(STEPS):
            _step(model, optimiser, payload, sleep)
            prof.step()
    dist.barrier()


def train(args: argparse.Namespace) -> None:
    """Every plan's reruns on this rank, in a row (the reruns of each plan interleaved with the others')."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for rerun in range(args.reruns):
        for plan in args.plans.split(","):
            _record(plan, Path(args.out) / f"{plan}-{rerun}", rank)
    dist.destroy_process_group()


def _spawned(rank: int, args: argparse.Namespace, world_size: int, port: int) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        OMP_NUM_THREADS="1",
    )
    train(args)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main(argv: list[str]) -> None:
    """Parse the options and launch `--spawn N` processes."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spawn", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--reruns", type=int, default=3)
    parser.add_argument("--plans", default="straggle,healthy,half")
    args = parser.parse_args(argv)
    mp.spawn(_spawned, args=(args, args.spawn, _free_port()), nprocs=args.spawn)


if __name__ == "__main__":
    main(sys.argv[1:])
