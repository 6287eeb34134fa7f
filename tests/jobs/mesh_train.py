"""Tiny real jobs over a 2-D DeviceMesh on the CPU (gloo, 4 ranks), recorded by `traceview.profile()`; each
writes its facts (its process groups as it created them, the dimension each serves, the collective calls it
issued per step) beside the run, so tests check traceview's dimensions against the job itself.

    python tests/jobs/mesh_train.py --modes dp_tp,pp --out DIR   # DIR/<mode>/run, DIR/<mode>/facts

Modes (mesh dims named as torchtitan names them, `mesh_<dim>` in the trace):

- `dp_tp`: tensor parallelism with DTensor (a column- then a row-parallel linear over "tp") and data
parallelism over "dp": the gradients all-reduced in one flat bucket after the backward;
- `fsdp_tp`: the same tensor parallelism, the model sharded with FSDP2 (`fully_shard`) over "dp";
- `pp`: a two-stage pipeline over "pp" (two micro-batches, activations sent forward and gradients back with
  send/recv), its stages' gradients all-reduced over "dp";
- `a2a`: an all-to-all of uneven splits over "ep" (each rank sends `SPLITS` rows: its peer of local rank 1
  receives 3 times what local rank 0 does), then the reverse exchange, and an all-reduce over "dp".
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
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

import traceview

WORLD, FEATURES, HIDDEN, BATCH = 4, 16, 32, 8
SPLITS = (2, 6)
"""Rows each rank sends to the members of its expert group (local rank 0, local rank 1); a row is `ROW`
floats."""
ROW = 8
MESHES = {"dp_tp": ("dp", "tp"), "fsdp_tp": ("dp", "tp"), "pp": ("dp", "pp"), "a2a": ("dp", "ep")}
"""Each mode's mesh dims, outer first (the inner one holds consecutive ranks)."""
TRUTH = {
    "dp_tp": {"dp": "dp", "tp": "tp"},
    "fsdp_tp": {"dp": "fsdp", "tp": "tp"},
    "pp": {"dp": "dp", "pp": "pp"},
    "a2a": {"dp": "dp", "ep": "ep"},
}
"""What each mesh dim is, per mode: the strategy the job applies over it."""


def _mlp() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, FEATURES)
    )


def _tensor_parallel(mesh: DeviceMesh) -> torch.nn.Module:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    return parallelize_module(_mlp(), mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})


def _local(grad: torch.Tensor) -> torch.Tensor:
    return grad.to_local() if hasattr(grad, "to_local") else grad


def dp_tp_step(model: torch.nn.Module, mesh: DeviceMesh, calls: list[list[Any]]) -> None:
    """Forward and backward through the TP model, then the gradients all-reduced over dp in one bucket."""
    model(torch.randn(BATCH, FEATURES)).pow(2).mean().backward()
    grads = [_local(p.grad) for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    calls.append(["dp", "all_reduce", flat.numel() * flat.element_size()])
    dist.all_reduce(flat, group=mesh["dp"].get_group())
    model.zero_grad()


def fsdp_tp_step(model: torch.nn.Module, mesh: DeviceMesh, calls: list[list[Any]]) -> None:
    """Forward and backward through the FSDP2-sharded TP model (FSDP2 issues its own collectives)."""
    model(torch.randn(BATCH, FEATURES)).pow(2).mean().backward()
    model.zero_grad()


def pp_step(model: torch.nn.Module, mesh: DeviceMesh, calls: list[list[Any]]) -> None:
    """Two micro-batches through two stages (GPipe order), then the stage's gradients all-reduced over dp."""
    group, stage = mesh["pp"].get_group(), mesh["pp"].get_local_rank()
    peer = dist.get_global_rank(group, 1 - stage)
    micro = BATCH // 2
    if stage == 0:
        outputs = [model(torch.randn(micro, FEATURES)) for _ in range(2)]
        for out in outputs:
            calls.append(["pp", "send", out.numel() * out.element_size()])
            dist.send(out.detach(), peer, group=group)
        for out in outputs:
            grad = torch.empty_like(out)
            calls.append(["pp", "recv", grad.numel() * grad.element_size()])
            dist.recv(grad, peer, group=group)
            out.backward(grad)
    else:
        received = []
        for _ in range(2):
            tensor = torch.empty(micro, HIDDEN)
            calls.append(["pp", "recv", tensor.numel() * tensor.element_size()])
            dist.recv(tensor, peer, group=group)
            received.append(tensor.requires_grad_(True))
            model(tensor).pow(2).mean().backward()
        for tensor in received:
            calls.append(["pp", "send", tensor.numel() * tensor.element_size()])
            dist.send(tensor.grad, peer, group=group)  # type: ignore[arg-type]
    flat = torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None])
    calls.append(["dp", "all_reduce", flat.numel() * flat.element_size()])
    dist.all_reduce(flat, group=mesh["dp"].get_group())
    model.zero_grad()


def a2a_step(model: torch.nn.Module, mesh: DeviceMesh, calls: list[list[Any]]) -> None:
    """Dispatch (uneven splits) and combine (the reverse) over ep, then a gradient all-reduce over dp."""
    group = mesh["ep"].get_group()
    received = [SPLITS[mesh["ep"].get_local_rank()]] * 2  # what each member sends to this rank
    out = torch.empty(sum(received), ROW)
    send = torch.randn(sum(SPLITS), ROW)
    calls.append(["ep", "all_to_all", send.numel() * send.element_size(), list(SPLITS), received])
    dist.all_to_all_single(out, send, list(received), list(SPLITS), group=group)
    back = torch.empty(sum(SPLITS), ROW)
    calls.append(["ep", "all_to_all", out.numel() * out.element_size(), received, list(SPLITS)])
    dist.all_to_all_single(back, out, list(SPLITS), list(received), group=group)
    model(back[:, :FEATURES].repeat(1, 2)).pow(2).mean().backward()
    flat = torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None])
    calls.append(["dp", "all_reduce", flat.numel() * flat.element_size()])
    dist.all_reduce(flat, group=mesh["dp"].get_group())
    model.zero_grad()


STEPS = {"dp_tp": dp_tp_step, "fsdp_tp": fsdp_tp_step, "pp": pp_step, "a2a": a2a_step}


def _model(mode: str, mesh: DeviceMesh) -> torch.nn.Module:
    if mode == "dp_tp":
        return _tensor_parallel(mesh)
    if mode == "fsdp_tp":
        from torch.distributed.fsdp import fully_shard

        return fully_shard(_tensor_parallel(mesh), mesh=mesh["dp"])
    if mode == "pp":
        torch.manual_seed(0)
        first = mesh["pp"].get_local_rank() == 0
        return (
            torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU())
            if first
            else torch.nn.Linear(HIDDEN, FEATURES)
        )
    return _mlp()


def _groups(mesh: DeviceMesh, mode: str) -> list[dict[str, Any]]:
    """This rank's process groups of the mesh: name, description, ranks and the dimension they serve."""
    found = []
    for dim in MESHES[mode]:
        group = mesh[dim].get_group()
        found.append(
            {
                "name": group.group_name,
                "desc": getattr(group, "group_desc", None),
                "mesh_dim": dim,
                "ranks": dist.get_process_group_ranks(group),
                "dimension": TRUTH[mode][dim],
            }
        )
    return found


def run_mode(rank: int, mode: str, folder: Path, steps: int, port: int) -> None:
    """One mode on this rank: a fresh process group and mesh, `steps` steps recorded into `folder`/run, its
    facts written into `folder`/facts; the process group destroyed (the next mode starts clean)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=MESHES[mode])
    model = _model(mode, mesh)
    per_step: list[list[list[Any]]] = []
    with traceview.profile(folder / "run", wait=0, warmup=1, active=steps - 1, local_batch=BATCH) as prof:
        for _ in range(steps):
            calls: list[list[Any]] = []
            STEPS[mode](model, mesh, calls)
            per_step.append(calls)
            prof.step()
    facts = {"rank": rank, "mode": mode, "groups": _groups(mesh, mode), "steps": per_step}
    (folder / "facts").mkdir(parents=True, exist_ok=True)
    (folder / "facts" / f"facts.rank{rank}.json").write_text(json.dumps(facts), encoding="utf-8")
    dist.barrier()
    dist.destroy_process_group()


def train(rank: int, modes: list[str], out: Path, steps: int, ports: list[int]) -> None:
    """Every mode in turn on this rank (one process launch: torch imported once)."""
    torch.set_num_threads(1)
    for mode, port in zip(modes, ports, strict=True):
        run_mode(rank, mode, out / mode, steps, port)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main(argv: list[str]) -> None:
    """Parse the options and launch the 4 ranks (torch.multiprocessing)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--modes", default=",".join(MESHES), help="comma-separated, of " + ", ".join(MESHES))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    modes = args.modes.split(",")
    unknown = sorted(set(modes) - set(MESHES))
    if unknown:
        parser.error(f"unknown modes {unknown}")
    ports = [_free_port() for _ in modes]
    mp.spawn(train, args=(modes, Path(args.out), args.steps, ports), nprocs=WORLD)


if __name__ == "__main__":
    main(sys.argv[1:])
