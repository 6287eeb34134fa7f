"""A small two-rank run for the report tests, with every figure known by hand.

Each rank has three GPU-annotated steps; on its own clock step 1 is [0, 1000), step 2 [1000, 2200) and step 3
[2200, 3100) us (lengths 1000, 1200 and 900, so the median step is step 1). Inside a step starting at t0:

- compute `gemm` [t0+100, t0+100+gemm) with gemm = 300 on rank 0 and 400 on rank 1, and `relu` [t0+600,
  t0+700);
- an NCCL AllReduce kernel [t0+500, t0+800) on stream 20, with the collective's args (process group
  `PG_DESC`), launched by a `record_param_comms` call;
- a memcpy [t0+900, t0+950).

Rank 1's `baseTimeNanoseconds` is `RANK1_OFFSET_US` later, so on the aligned clock its events sit that much
later. Names can be replaced (the XSS test plants markup in them).
"""

from __future__ import annotations

from pathlib import Path

from tests import kineto_factory as kf

NCCL_ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
STEP_STARTS = (0.0, 1000.0, 2200.0)
STEP_LENGTHS = (1000.0, 1200.0, 900.0)
GEMM_US = (300.0, 400.0)
RANK1_OFFSET_US = 20.0
BASE_NS = 1_700_000_000_000_000_000
PG_DESC = "default_pg"


def rank_events(
    rank: int,
    kernel_name: str = "gemm",
    annotation: str = "forward",
    pg_name: str = "0",
    pg_desc: str = PG_DESC,
) -> list[kf.Event]:
    """The events of one rank (see the module docstring)."""
    comm_args = {
        "Collective name": "allreduce",
        "In msg nelems": 1 << 20,
        "Out msg nelems": 1 << 20,
        "dtype": "Float",
        "Group size": 2,
        "Process Group Name": pg_name,
        "Process Group Description": pg_desc,
        "Process Group Ranks": "[0, 1]",
    }
    events: list[kf.Event] = []
    for number, (t0, length) in enumerate(zip(STEP_STARTS, STEP_LENGTHS, strict=True), start=1):
        correlation = 100 * number
        events += [
            kf.step(number, t0, length, on_gpu=True),
            kf.cpu_op(annotation, t0 + 1, 50, cat="user_annotation"),
            kf.kernel(kernel_name, t0 + 100, GEMM_US[rank], correlation=correlation + 1),
            kf.kernel("relu", t0 + 600, 100, correlation=correlation + 2),
            kf.cpu_op("record_param_comms", t0 + 400, 20, args={**comm_args, "Seq": number}),
            kf.launch(t0 + 405, correlation + 3),
            kf.kernel(
                NCCL_ALLREDUCE,
                t0 + 500,
                300,
                correlation=correlation + 3,
                stream=20,
                args={**comm_args, "Seq": number},
            ),
            kf.memcpy(t0 + 900, 50, correlation=correlation + 4),
        ]
    return events


def write_run(
    folder: Path, names: dict[str, str] | None = None, file_prefix: str = "rank", hostname: str = "node-a"
) -> Path:
    """Write the ranks as `<folder>/<file_prefix><rank>.json`; `names` overrides `rank_events` keywords."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank in (0, 1):
        base = BASE_NS + int(RANK1_OFFSET_US * 1000) * rank
        doc = kf.document(
            rank_events(rank, **(names or {})),
            rank=rank,
            world_size=2,
            base_ns=base,
            hostname=hostname,
            pytorch_version="2.4.0",
        )
        doc["distributedInfo"]["nccl_version"] = "2.20.5"
        kf.write(doc, folder / f"{file_prefix}{rank}.json")
    return folder
