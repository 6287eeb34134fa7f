"""Regenerate every simulated sample run under `sample_traces/`, deterministically (fixed seeds).

    python sample_traces/make_samples.py                 # rewrite all samples next to this script
    python sample_traces/make_samples.py --out DIR       # write them somewhere else
    python sample_traces/make_samples.py --benchmark 256 2000   # time/size: 256 ranks x 2,000 collectives

Each sample is a folder of per-rank Kineto traces and its `run.json` manifest (what the simulator used), with
`<name>.ground_truth.json` beside the folder (what a correct analysis must find; see
`sample_traces/README.md`, `tests.simulate.scenario` and `tests.simulate.manifest`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(
    0, str(Path(__file__).resolve().parents[1])
)  # the simulator is a test helper: tests/simulate/

from tests.simulate.engine import write_run
from tests.simulate.manifest import scenario_manifest
from tests.simulate.scenario import (
    CollectiveSpec,
    GroundTruth,
    MismatchSpec,
    ProcessGroupSpec,
    Scenario,
    StragglerSpec,
    data_parallel_scenario,
    ground_truth_dict,
)
from traceview.options.manifest import write_manifest

HERE = Path(__file__).resolve().parent
MIB = 1 << 20


def dp8_straggler() -> Scenario:
    """8 ranks on 2 hosts (4 GPUs each), 6 steps of DDP: 8 gradient buckets of 25 MiB (bf16) all-reduced over
    the world, each overlapping the rest of the backward; rank 5 computes 8-15 ms longer every step; host 1's
    clock runs 25 ms ahead of host 0's. Its `run.json` states what a recording states: the local batch (16,384
    tokens) and the parameters (104,857,600: the 200 MiB of bf16 gradients)."""
    world = ProcessGroupSpec("0", "default_pg", tuple(range(8)))
    return Scenario(
        ranks=8,
        ranks_per_host=4,
        steps=6,
        collectives=tuple(CollectiveSpec("AllReduce", 25 * MIB, world, "BFloat16") for _ in range(8)),
        compute_us=60_000.0,
        jitter=0.02,
        optimizer_us=1_500.0,
        bandwidth_Bps=25e9,
        alpha_s=10e-6,
        overlap=True,
        host_offsets_us=(0.0, 25_000.0),
        straggler=StragglerSpec(rank=5, kind="compute", delay_us_min=8_000.0, delay_us_max=15_000.0),
        seed=1,
        recorded_workload=(16_384.0, 8 * 25 * MIB / 2),  # 8 sequences of 2,048 tokens; the bf16 gradients
    )


def dp8_ideal() -> Scenario:
    """The alpha-beta model's own world: 8 workers, P = 350M parameters, a local batch of b = 16,384 tokens
    (8 sequences of 2,048), R = 150 TFLOP/s, B = 25 GB/s, g = 2 bytes, 4 buckets serialized after compute,
    no straggler, no clock offsets, `flops` recorded: gamma_pred = 2 * 7/8 * 2 * 150e12 / (6 * 16384 * 25e9)
    = 0.2136."""
    return data_parallel_scenario(
        workers=8,
        params=350_000_000,
        local_batch=16_384,
        flops_per_s=150e12,
        bandwidth_Bps=25e9,
        buckets=4,
        steps=4,
    )


def pp4_mismatch() -> Scenario:
    """4 ranks on one host: two pipeline stages (ranks 0,1 -> 2,3, SendRecv of 8 MiB activations), a
    data-parallel all-reduce per stage pair, `Seq` written; rank 3 issues one extra all-reduce in step 2."""
    stage_pairs = (ProcessGroupSpec("1", "dp_0_2", (0, 2)), ProcessGroupSpec("2", "dp_1_3", (1, 3)))
    links = (ProcessGroupSpec("3", "pp_0_1", (0, 1)), ProcessGroupSpec("4", "pp_2_3", (2, 3)))
    collectives = (
        CollectiveSpec("SendRecv", 8 * MIB, links[0]),
        CollectiveSpec("SendRecv", 8 * MIB, links[1]),
        CollectiveSpec("AllReduce", 16 * MIB, stage_pairs[0]),
        CollectiveSpec("AllReduce", 16 * MIB, stage_pairs[1]),
    )
    return Scenario(
        ranks=4,
        ranks_per_host=4,
        steps=4,
        collectives=collectives,
        compute_us=20_000.0,
        jitter=0.03,
        bandwidth_Bps=150e9,
        alpha_s=3e-6,
        include_seq=True,
        nccl_version="2.21.5",
        mismatch=MismatchSpec(rank=3, kind="extra", step=2, index=3),
        seed=3,
        recorded_workload=(8_192.0, 16 * MIB / 2),  # 4 sequences of 2,048 tokens; one stage's bf16 gradients
        recorded_per_rank=True,  # a stage's parameters: P per rank (P, the whole model, is twice that)
    )


SAMPLES = {
    "dp8_straggler": (dp8_straggler, True),
    "dp8_ideal": (dp8_ideal, True),
    "pp4_mismatch": (pp4_mismatch, True),
}


def write_sample(name: str, out_root: Path) -> GroundTruth:
    """Write one sample folder of traces with its `run.json` (what the simulator used: links, placement,
    workload; docs/run-manifest.md), and `<name>.ground_truth.json` beside it (outside the folder, so that
    `traceview report sample_traces/<name>` reads the run only), replacing what was there."""
    build, compress = SAMPLES[name]
    folder = out_root / name
    if folder.exists():
        shutil.rmtree(folder)
    scenario = build()
    truth = write_run(scenario, folder, gzip=compress)
    write_manifest(folder, scenario_manifest(name, scenario, truth.files))
    text = json.dumps(ground_truth_dict(truth), indent=1)
    (out_root / f"{name}.ground_truth.json").write_text(text + "\n", encoding="utf-8")
    return truth


def benchmark(ranks: int, collectives: int) -> None:
    """Write a `ranks` x `collectives` data-parallel run (10 buckets a step, 2 forward and 1 backward kernel
    per bucket, uncompressed and gzip) to a temporary folder and print the time and size."""
    world = ProcessGroupSpec("0", "default_pg", tuple(range(ranks)))
    scenario = Scenario(
        ranks=ranks,
        steps=max(1, collectives // 10),
        collectives=tuple(CollectiveSpec("AllReduce", 25 * MIB, world) for _ in range(10)),
        compute_us=100_000.0,
        forward_kernels=2,
        backward_kernels_per_chunk=1,
        jitter=0.05,
        host_offsets_us=tuple(1_000.0 * host for host in range(-(-ranks // 8))),
        straggler=StragglerSpec(3, "compute", 1_000.0, 5_000.0),
        include_seq=True,
    )
    for compress in (True, False):
        with tempfile.TemporaryDirectory() as folder:
            wall, cpu = time.perf_counter(), time.process_time()
            truth = write_run(scenario, Path(folder), gzip=compress)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            size = sum(path.stat().st_size for path in truth.files)
            shape = f"{ranks} ranks x {scenario.steps * 10} collectives, gzip={compress}"
            per_rank = size / ranks / 1e6
            print(
                f"{shape}: {wall:.1f} s wall, {cpu:.1f} s CPU, {size / 1e6:.1f} MB ({per_rank:.2f} MB a rank)"
            )


def main() -> None:
    """Parse the command line and write the samples (or run the benchmark)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write the sample folders into")
    parser.add_argument("--only", choices=sorted(SAMPLES), action="append", help="write only these samples")
    parser.add_argument("--benchmark", nargs=2, type=int, metavar=("RANKS", "COLLECTIVES"))
    args = parser.parse_args()
    if args.benchmark:
        benchmark(*args.benchmark)
        return
    for name in args.only or sorted(SAMPLES):
        truth = write_sample(name, args.out)
        size = sum(path.stat().st_size for path in (args.out / name).iterdir())
        print(
            f"{name}: {truth.ranks} ranks, {len(truth.instances)} collective instances, {size / 1e3:.0f} kB"
        )


if __name__ == "__main__":
    main()
