"""A tiny real training job on the CPU with the gloo backend, recorded by `traceview.profile()`; it writes
what it did (its facts) beside the run, so tests check traceview against the job itself.

    python -m torch.distributed.run --nproc-per-node 2 tests/jobs/gloo_train.py --mode dp --facts DIR
    python tests/jobs/gloo_train.py --mode pp --spawn 2 --run-dir RUN --facts DIR   # its own launcher

`--mode dp`: data parallel: each rank computes the gradients of its own batch, then all-reduces them in
`BUCKETS` flat buckets (one `all_reduce` each) and averages. `--mode pp`: a two-stage pipeline (rank 0 the
first layer, rank 1 the second and the loss), `MICRO_BATCHES` micro-batches a step, GPipe order: activations
sent forward, gradients sent back with `send`/`recv`. Each rank writes `facts.rank<N>.json`: its rank, world
size, host (`socket.gethostname()`), backend, torch version, and per step the collective calls it issued
(name and bytes), counted by the job itself.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import traceview

LOCAL_BATCH, FEATURES, HIDDEN, OUTPUTS = 16, 32, 64, 8
BUCKETS = 2
MICRO_BATCHES = 2


def _all_reduce(tensor: torch.Tensor, calls: list[list[Any]]) -> None:
    calls.append(["all_reduce", tensor.numel() * tensor.element_size()])
    dist.all_reduce(tensor)


def dp_step(model: torch.nn.Module, optimiser: torch.optim.Optimizer, calls: list[list[Any]]) -> None:
    """One data-parallel step: forward, backward, one all-reduce per bucket of gradients, update."""
    loss = model(torch.randn(LOCAL_BATCH, FEATURES)).pow(2).mean()
    optimiser.zero_grad()
    loss.backward()
    layers = [m for m in model if isinstance(m, torch.nn.Linear)]
    for bucket in range(BUCKETS):
        grads = [p.grad for layer in layers[bucket::BUCKETS] for p in layer.parameters()]
        flat = torch.cat([g.reshape(-1) for g in grads if g is not None])
        _all_reduce(flat, calls)
        flat /= dist.get_world_size()
        torch.nn.utils.vector_to_parameters(flat, grads)  # type: ignore[arg-type]
    optimiser.step()


def pp_step(stage: torch.nn.Module, rank: int, calls: list[list[Any]]) -> None:
    """One pipeline step over MICRO_BATCHES micro-batches: rank 0 sends activations and receives gradients."""
    micro = LOCAL_BATCH // MICRO_BATCHES
    if rank == 0:
        outputs = [stage(torch.randn(micro, FEATURES)) for _ in range(MICRO_BATCHES)]
        for out in outputs:
            calls.append(["send", out.numel() * out.element_size()])
            dist.send(out.detach(), 1)
        for out in outputs:
            grad = torch.empty_like(out)
            calls.append(["recv", grad.numel() * grad.element_size()])
            dist.recv(grad, 1)
            out.backward(grad)
        return
    inputs = []
    for _ in range(MICRO_BATCHES):
        received = torch.empty(micro, HIDDEN)
        calls.append(["recv", received.numel() * received.element_size()])
        dist.recv(received, 0)
        inputs.append(received.requires_grad_(True))
        stage(received).pow(2).mean().backward()
    for received in inputs:
        calls.append(["send", received.grad.numel() * received.grad.element_size()])  # type: ignore[union-attr]
        dist.send(received.grad, 0)  # type: ignore[arg-type]


def _model(mode: str, rank: int) -> torch.nn.Module:
    torch.manual_seed(0)
    if mode == "dp":
        return torch.nn.Sequential(
            torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, OUTPUTS)
        )
    return (
        torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU())
        if rank == 0
        else (torch.nn.Linear(HIDDEN, OUTPUTS))
    )


def train(args: argparse.Namespace) -> None:
    """Run the job on this rank (the process group already set up by the launcher's environment)."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = _model(args.mode, rank)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.01)
    settings = {"local_batch": LOCAL_BATCH, "params": sum(p.numel() for p in model.parameters())}
    if args.run_dir:  # the script names the folder and the schedule: no `traceview record` around it
        settings.update(wait=args.wait, warmup=args.warmup, active=args.active)
    per_step: list[list[list[Any]]] = []
    with traceview.profile(args.run_dir, **settings) as prof:
        for _ in range(args.steps):
            calls: list[list[Any]] = []
            if args.mode == "dp":
                dp_step(model, optimiser, calls)
            else:
                pp_step(model, rank, calls)
            per_step.append(calls)
            prof.step()
    facts = {
        "rank": rank,
        "world_size": dist.get_world_size(),
        "host": socket.gethostname(),
        "backend": str(dist.get_backend()),
        "torch": torch.__version__,
        "steps": per_step,
        "params": settings["params"],
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
    """Parse the options; launch `--spawn N` processes, else run as one rank of an outside launcher."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mode", choices=("dp", "pp"), required=True)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--facts", required=True)
    parser.add_argument("--run-dir")
    parser.add_argument("--wait", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--active", type=int, default=3)
    parser.add_argument("--spawn", type=int, default=0, help="launch this many ranks (torch.multiprocessing)")
    args = parser.parse_args(argv)
    Path(args.facts).mkdir(parents=True, exist_ok=True)
    if args.spawn:
        mp.spawn(_spawned, args=(args, args.spawn, _free_port()), nprocs=args.spawn)
    else:
        train(args)


if __name__ == "__main__":
    main(sys.argv[1:])
