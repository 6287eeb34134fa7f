"""Two ranks (gloo, on the CPU) shard one small model three ways and write, per rank, what the drop-in
recorder counts of it and which process groups it names: FSDP2 (`fully_shard` on a 2-D DeviceMesh named
("replicate", "shard"): DTensor parameters), FSDP1 with flat parameters, FSDP1 keeping the original ones.

    python tests/jobs/sharded_model.py OUT_DIR      # writes OUT_DIR/rank<N>.json
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard

from traceview.record.observe import global_param_count
from traceview.record.rank_facts import process_groups


def _net() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def _rank(rank: int, out: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (1, 2), mesh_dim_names=("replicate", "shard"))
    fsdp2 = _net()
    fully_shard(fsdp2, mesh=mesh)
    cpu = torch.device("cpu")
    flat = FullyShardedDataParallel(_net(), device_id=cpu)
    orig = FullyShardedDataParallel(_net(), device_id=cpu, use_orig_params=True)
    seen = {
        "local": {"fsdp2": sum(p.to_local().numel() for p in fsdp2.parameters())},
        "fsdp2": global_param_count(fsdp2)[0],
        "fsdp1_flat": global_param_count(flat)[0],
        "fsdp1_orig": global_param_count(orig)[0],
        "groups": [{"ranks": g.ranks, "mesh_dim": g.mesh_dim} for g in process_groups(torch)[2]],
    }
    Path(out, f"rank{rank}.json").write_text(json.dumps(seen), encoding="utf-8")
    dist.destroy_process_group()


def main(out: str) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    mp.spawn(_rank, args=(out, port), nprocs=2)


if __name__ == "__main__":
    main(sys.argv[1])
