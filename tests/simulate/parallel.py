"""Simulated multi-dimensional runs with known truth (docs/metrics.md, "Parallelism dimensions", "MoE
balance", "Links measured"): a 3D (TP x PP x DP) run, FSDP with and without resharding, DDP with small or
large buckets, expert parallelism with a hot expert or a balanced control, and a run of all-reduces of many
sizes for the alpha-beta fit. Each builder returns a `Planted`: the scenario, the model facts its
`run.json` states, and the true dimension of every process group; `write_planted` writes the traces and the
`run.json`.

Every group is named as torchtitan's DeviceMesh names it (`mesh_tp`, ...) or, with `named=False`, as PyTorch
names an undescribed group (`undefined`): the same run read from its structure and its collectives alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from tests.simulate.engine import write_run
from tests.simulate.manifest import scenario_manifest
from tests.simulate.scenario import CollectiveSpec, GroundTruth, ProcessGroupSpec, Scenario
from traceview.options.manifest import ManifestModel, write_manifest


@dataclass(frozen=True)
class Planted:
    """A scenario, the model facts and layout its run.json states, and each group's true dimension."""

    scenario: Scenario
    model: ManifestModel
    truth: dict[str, str]  # pg_name -> dimension
    parallelism: str | None = None
    notes: dict[str, float] = field(default_factory=dict)


class _Names:
    """Process-group names ("1", "2", ...) and descriptions (`mesh_<dim>`, or `undefined`)."""

    def __init__(self, named: bool) -> None:
        self.named, self.next, self.truth = named, 1, {}  # type: ignore[var-annotated]

    def group(self, dimension: str, ranks: tuple[int, ...], desc: str | None = None) -> ProcessGroupSpec:
        name = str(self.next)
        self.next += 1
        self.truth[name] = dimension
        return ProcessGroupSpec(name, (desc or f"mesh_{dimension}") if self.named else "undefined", ranks)


def _eight_ranks(specs: list[CollectiveSpec] | tuple[CollectiveSpec, ...], **settings: Any) -> Scenario:
    """A scenario of 8 ranks on 2 hosts of 4, 3 steps, IB-like links across hosts (5 us, 25 GB/s): `settings`
    add or replace any other field."""
    base: dict[str, Any] = {
        "ranks": 8,
        "steps": 3,
        "ranks_per_host": 4,
        "bandwidth_Bps": 25e9,
        "alpha_s": 5e-6,
    }
    return Scenario(collectives=tuple(specs), **(base | settings))


def mesh_3d(
    named: bool = True, small_buckets: bool = False, seed: int = 3, tp_link: tuple[float, float] | None = None
) -> Planted:
    """8 ranks on 2 hosts of 4, the seeds' 3D layout (rank = dp * 4 + pp * 2 + tp): TP=2 inside a host (2
    all-reduces of A forward and 2 backward per layer and micro-batch), PP=2 (an activation forward and a
    gradient back per micro-batch), DP=2 across hosts (the gradient buckets). L = 4 layers (2 a stage), m = 2
    micro-batches, b = 2 x 512 = 1,024 tokens (2 sequences of 512), A = h b / m = 1024 x 1024 / 2 = 524,288
    elements (1 MiB in bf16), P = 2^24 (P_rep = P / 4).
    `tp_link` (alpha_s, B): TP's own link (slow: its all-reduces outlast the compute they run beside)."""
    names = _Names(named)
    activation, params = 512 * 1024 * 2, 2**24
    specs: list[CollectiveSpec] = []
    for group in ((0, 1), (2, 3), (4, 5), (6, 7)):
        pg = names.group("tp", group)
        specs += [
            CollectiveSpec("AllReduce", activation, pg, phase="forward", link=tp_link) for _ in range(8)
        ]
        specs += [CollectiveSpec("AllReduce", activation, pg, link=tp_link) for _ in range(8)]
    for first, second in ((0, 2), (1, 3), (4, 6), (5, 7)):
        pg = names.group("pp", (first, second))
        specs += [CollectiveSpec("SendRecv", activation, pg, phase="forward") for _ in range(2)]
        specs += [CollectiveSpec("SendRecv", activation, pg, pair=(second, first)) for _ in range(2)]
    bucket = 2**20 if small_buckets else (params // 4 * 2) // 2
    for ranks in ((0, 4), (1, 5), (2, 6), (3, 7)):
        pg = names.group("dp", ranks)
        specs += [CollectiveSpec("AllReduce", bucket, pg) for _ in range(params // 4 * 2 // bucket)]
    scenario = _eight_ranks(
        specs,
        compute_us=40_000.0,
        intra_host_bandwidth_Bps=300e9,
        intra_host_alpha_s=2e-6,
        forward_kernels=8,
        seed=seed,
    )
    model = ManifestModel(
        params=float(params),
        local_batch=2.0 * 512,
        hidden=1024.0,
        seq_len=512.0,
        layers=4.0,
        micro_batches=2.0,
    )
    return Planted(scenario, model, names.truth)


def fsdp(reshard: bool, named: bool = True) -> Planted:
    """8 ranks on 2 hosts, FSDP over all of them: 4 units of P / 4 parameters, each gathered in the forward,
    gathered again in the backward when `reshard`, and its gradients reduce-scattered in the backward."""
    names = _Names(named)
    params, units = 2**22, 4
    pg = names.group("fsdp", tuple(range(8)), "mesh_dp_shard")
    unit_bytes = params // units * 2
    specs = [
        CollectiveSpec("AllGather", unit_bytes * (u + 1) // 2, pg, phase="forward") for u in range(units)
    ]
    if reshard:
        specs += [CollectiveSpec("AllGather", unit_bytes * (u + 1) // 2, pg) for u in reversed(range(units))]
    specs += [CollectiveSpec("ReduceScatter", unit_bytes * (u + 1) // 2, pg) for u in reversed(range(units))]
    total = sum(unit_bytes * (u + 1) // 2 for u in range(units)) // 2
    scenario = _eight_ranks(specs, compute_us=30_000.0, forward_kernels=4, seed=5)
    return Planted(scenario, ManifestModel(params=float(total)), names.truth)


def ddp(bucket_bytes: int, named: bool = True, gradient_bytes: int = 2**26) -> Planted:
    """8 ranks on 2 hosts, DDP over all of them: the gradients (bf16) all-reduced in buckets of
    `bucket_bytes` after the forward pass, on IB-like links (alpha 10 us, 25 GB/s)."""
    names = _Names(named)
    pg = names.group("dp", tuple(range(8)))
    specs = tuple(
        CollectiveSpec("AllReduce", bucket_bytes, pg) for _ in range(gradient_bytes // bucket_bytes)
    )
    scenario = _eight_ranks(
        specs, compute_us=50_000.0, alpha_s=10e-6, forward_kernels=4, backward_kernels_per_chunk=1, seed=7
    )
    return Planted(scenario, ManifestModel(params=float(gradient_bytes // 2)), names.truth)


HOT_SPLITS = (96, 96, 224, 96)
BALANCED_SPLITS = (128, 128, 128, 128)


def moe(hot: bool, named: bool = True) -> Planted:
    """8 ranks on 2 hosts of 4; EP=4 inside each host (2 MoE layers: a dispatch and a combine all-to-all
    forward and backward, rows of h = 1024 bf16) and DP=2 across hosts. With `hot`, every rank sends 224 of
    its 512 routed tokens to the rank holding expert 2 (local rank 2: 896 tokens, 1.75x the mean of 512) and
    that rank computes 30% longer; the control splits evenly."""
    names = _Names(named)
    split = HOT_SPLITS if hot else BALANCED_SPLITS
    row_bytes, specs = 1024 * 2, []
    for host in (0, 1):
        ranks = tuple(range(4 * host, 4 * host + 4))
        pg = names.group("ep", ranks)
        dispatch = tuple(split for _ in ranks)
        combine = tuple(tuple(row[i] for row in dispatch) for i in range(4))
        size = 512 * row_bytes * 4
        for phase in ("forward", "backward"):
            for _ in range(2):
                specs += [
                    CollectiveSpec("AllToAll", size, pg, phase=phase, splits=dispatch, row_bytes=row_bytes),  # type: ignore[arg-type]
                    CollectiveSpec("AllToAll", size, pg, phase=phase, splits=combine, row_bytes=row_bytes),  # type: ignore[arg-type]
                ]
    for local in range(4):
        pg = names.group("dp", (local, local + 4))
        specs += [CollectiveSpec("AllReduce", 2**22, pg)]
    compute = tuple(26_000.0 if hot and rank % 4 == 2 else 20_000.0 for rank in range(8))
    scenario = _eight_ranks(
        specs,
        compute_us=20_000.0,
        compute_us_by_rank=compute,
        intra_host_bandwidth_Bps=200e9,
        intra_host_alpha_s=2e-6,
        forward_kernels=4,
        seed=11,
    )
    model = ManifestModel(
        local_batch=512.0, hidden=1024.0, layers=2.0, micro_batches=1.0, top_k=1.0, moe_layers=2.0
    )
    return Planted(scenario, model, names.truth)


LL_LINK, SIMPLE_LINK = (8e-6, 5e9), (20e-6, 20e9)
"""(alpha_s, B) planted for NCCL's LL protocol (small calls) and Simple (from 1 MiB)."""


def alpha_beta(jitter: float = 0.05, straggler: bool = True) -> Planted:
    """8 ranks on 2 hosts, one data-parallel group across them, all-reducing 12 sizes from 16 KiB to 32 MiB
    per step: below 1 MiB over LL (alpha 8 us, 5 GB/s), from 1 MiB over Simple (alpha 20 us, 20 GB/s), each
    transfer jittered by up to `jitter`; with `straggler`, rank 5 launches every call late by 0-400 us, so
    its peers wait (transfer times come from the cross-rank alignment, waits removed)."""
    from tests.simulate.scenario import StragglerSpec

    names = _Names(True)
    pg = names.group("dp", tuple(range(8)))
    sizes = [2**14 * 2**i for i in range(12)]
    specs = tuple(
        CollectiveSpec(
            "AllReduce",
            size,
            pg,
            protocol="LL" if size < 2**20 else "SIMPLE",
            link=LL_LINK if size < 2**20 else SIMPLE_LINK,
        )
        for size in sizes
    )
    scenario = _eight_ranks(
        specs,
        steps=4,
        compute_us=20_000.0,
        transfer_jitter=jitter,
        forward_kernels=2,
        backward_kernels_per_chunk=1,
        seed=13,
        straggler=StragglerSpec(5, "launch", 0.0, 400.0) if straggler else None,
    )
    return Planted(scenario, ManifestModel(), names.truth)


def write_planted(planted: Planted, out_dir: Path, job: str = "planted") -> tuple[Path, GroundTruth]:
    """Write the traces and a `run.json` stating the planted model facts (and layout); returns the manifest's
    path and the ground truth."""
    truth = write_run(planted.scenario, out_dir)
    manifest = scenario_manifest(job, planted.scenario, truth.files)
    model = msgspec.structs.replace(planted.model, dtype="bf16")
    manifest = msgspec.structs.replace(manifest, model=model, parallelism=planted.parallelism)
    path = write_manifest(out_dir / "run.json", manifest)
    (out_dir / "truth.json").write_text(json.dumps(planted.truth), encoding="utf-8")
    return path, truth
