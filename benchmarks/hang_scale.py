"""Scale check of `traceview hang`: RANKS synthetic Flight Recorder dumps (pickles, protocol 2) of ENTRIES
entries each, over three groups (the world, tensor-parallel groups of 8, data-parallel groups of RANKS / 8),
one stack frame per entry; rank `CULPRIT` never enters the world's last collective, which the others have
waited in for 600 s. Writes them into a temporary folder, runs `traceview hang FOLDER --json` as a process,
and prints its wall time, its CPU time (the parent and its workers), the peak RSS of its largest process
(the parent or a worker) and whether it named the culprit.

    python benchmarks/hang_scale.py [RANKS] [ENTRIES] [--python-pickler]
        # defaults: 1024 ranks, 2000 entries (the usual TORCH_FR_BUFFER_SIZE)

The dumps are laid out as PyTorch's pickler writes them (`_torch_pickle.py`: strings and stack frames
memoized, every other container written where it stands); `--python-pickler` writes them with Python's
pickler instead (every container memoized: more opcodes for the same entries).
"""

from __future__ import annotations

import json
import os
import pickle
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _torch_pickle import dumps as torch_dumps

TP = 8
CULPRIT = 777
START_NS, WAITED_S = 1_700_000_000 * 10**9, 600


def _entry(record: int, group: str, seq: int, created_ns: int, last: bool) -> dict[str, Any]:
    return {
        "record_id": record,
        "pg_id": int(group),
        "process_group": (group, "default_pg" if group == "0" else "undefined"),
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "is_p2p": False,
        "op_id": seq,
        "profiling_name": "nccl:all_reduce" if record % 2 else "nccl:all_gather",
        "input_sizes": [[4096, 1024]],
        "input_dtypes": ["BFloat16"],
        "output_sizes": [[4096, 1024]],
        "output_dtypes": ["BFloat16"],
        "state": "scheduled" if last else "completed",
        "time_created_ns": created_ns,
        "time_discovered_started_ns": created_ns + 1000,
        "time_discovered_completed_ns": 0 if last else created_ns + 2_000_000,
        "duration_ms": None if last else 1.9,
        "retired": not last,
        "timeout_ms": 600_000,
        "frames": [{"name": "train_step", "filename": "/job/train.py", "line": 100 + record % 7}],
    }


def _dump(rank: int, ranks: int, entries: int) -> dict[str, Any]:
    tp, dp = str(1 + rank // TP), str(1 + ranks // TP + rank % TP)  # every group's own name, as PyTorch's
    groups = {"0": list(range(ranks)), tp: [rank // TP * TP + i for i in range(TP)]}
    groups[dp] = list(range(rank % TP, ranks, TP))
    names = ("0", tp, dp)
    records, seqs = [], dict.fromkeys(groups, 0)
    per_world = entries // 3
    for record in range(entries):
        group = names[0] if record < per_world else names[1 + record % 2]
        if rank == CULPRIT and group == "0" and seqs["0"] == per_world - 1:
            continue  # the culprit never enters the world's last collective
        seqs[group] += 1
        created = START_NS + record * 5_000_000
        last = group == "0" and seqs["0"] == per_world
        records.append(_entry(record, group, seqs[group], created, last))
    return {
        "version": "2.10",
        "pg_config": {
            name: {"name": name, "desc": "", "ranks": str(ranks_)} for name, ranks_ in groups.items()
        },
        "pg_status": {},
        "entries": records,
    }


def _python_dumps(value: Any) -> bytes:
    return pickle.dumps(value, protocol=2)


def write_dumps(folder: Path, ranks: int, entries: int, pickler: Callable[[Any], bytes] = torch_dumps) -> int:
    """Write every rank's dump (`nccl_trace_rank_<N>`), dated WAITED_S after the world's last collective;
    returns the bytes written."""
    written = 0
    moment = (START_NS + entries * 5_000_000) / 1e9 + WAITED_S
    for rank in range(ranks):
        path = folder / f"nccl_trace_rank_{rank}"
        written += path.write_bytes(pickler(_dump(rank, ranks, entries)))
        os.utime(path, (moment, moment))
    return written


def main() -> None:
    """Write, run, print the figures."""
    numbers = [int(argument) for argument in sys.argv[1:] if not argument.startswith("--")]
    ranks, entries = [*numbers, *(1024, 2000)[len(numbers) :]][:2]
    python = "--python-pickler" in sys.argv
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        written = write_dumps(Path(folder), ranks, entries, _python_dumps if python else torch_dumps)
        took = time.perf_counter() - started
        layout = "Python's pickler" if python else "PyTorch's layout"
        print(f"wrote {ranks} dumps x {entries} entries ({layout}): {written / 2**20:.0f} MiB", end="")
        print(f" in {took:.1f} s")
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "traceview", "hang", folder, "--json"],
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak, cpu = usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime
    document = json.loads(done.stdout) if done.stdout else {}
    first = (document.get("findings") or [{}])[0]
    named = first.get("kind") == "missing_rank" and first.get("ranks_apart") == [CULPRIT]
    print(f"traceview hang: {wall:.1f} s wall, {cpu:.1f} CPU-s (its processes; on shared cores", end="")
    print(f" the wall time is not the program's), peak RSS {peak:.0f} MiB (largest process)", end="")
    print(f", exit {done.returncode}")
    print(f"named the culprit: {named} ({document.get('headline', done.stderr.strip())[:160]})")


if __name__ == "__main__":
    main()
