"""A second, plain-Python derivation of one step's per-collective peer waits (docs/metrics.md, "Critical
path", Collectives as open nodes): only `json` and `gzip`, no traceview import.

For each rank's trace: its collectives in the step (the gloo/MPI host ops named `gloo:`/`mpi:` where the trace
has any, else the device kernels whose name starts with `nccl`/`rccl`), each paired across ranks by its
signature (the host op's input shapes, or the kernel's name and stream: one communicator a stream) and its
ordinal among the rank's calls of that signature in the step. A member's wait is the latest start among the
members less its own (every rank read on one clock: the traces' `ts`, which ranks on one host share); its
communication on the path is the part of [entry, exit], cut to the step, where no device work other than
communication runs (device events of other kinds come first on the path; a host collective's staging copies,
the `Pinned` memcpys, are communication); its peer wait is the smaller of the two.

    python tests/collective_waits_plain.py STEP [--gpu-window] [RANK:SHIFT_US ...] TRACE.json.gz [...]

`--gpu-window`: the step is the GPU's `ProfilerStep#N` annotation (else the CPU's).

`RANK:SHIFT_US` moves a rank's starts by that much before the latest is taken (a clock offset measured
elsewhere: the ranks of one run on two hosts' clocks).
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

DEVICE = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}
HOST_PREFIXES = ("gloo:", "mpi:")
DEVICE_PREFIXES = ("nccl", "rccl")


def _document(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        found: dict[str, Any] = json.load(handle)
    return found


def _window(events: list[dict[str, Any]], step: int, gpu: bool) -> tuple[float, float]:
    """The step's `ProfilerStep#N` annotation: the GPU's (`gpu`) or the CPU's."""
    category = "gpu_user_annotation" if gpu else "user_annotation"
    for event in events:
        if event.get("cat") == category and event.get("name") == f"ProfilerStep#{step}":
            return float(event["ts"]), float(event["ts"]) + float(event["dur"])
    raise SystemExit(f"no ProfilerStep#{step}")


def _is_comm(event: dict[str, Any], host: bool) -> bool:
    name = event.get("name") or ""
    if host:
        return name.startswith(HOST_PREFIXES) and event.get("cat") in {"user_annotation", "cpu_op"}
    return event.get("cat") in DEVICE and name.lower().startswith(DEVICE_PREFIXES)


def _signature(event: dict[str, Any], host: bool) -> str:
    args = event.get("args") or {}
    return json.dumps(args.get("Input Dims")) if host else f"{event.get('name')} stream {args.get('stream')}"


def _busy(intervals: list[tuple[float, float]], low: float, high: float) -> float:
    """|[low, high] ∩ union(intervals)|."""
    cut = sorted((max(a, low), min(b, high)) for a, b in intervals if min(b, high) > max(a, low))
    total, reach = 0.0, low
    for a, b in cut:
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


def rank_calls(path: Path, step: int, gpu: bool = False) -> tuple[int, list[dict[str, Any]]]:
    """(rank, its collectives of the step with entry, exit and the communication on the path)."""
    document = _document(path)
    events = [e for e in document["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    low, high = _window(events, step, gpu)
    host = any(_is_comm(e, True) for e in events)
    staging = host  # a host collective's pinned copies are its communication
    compute = [
        (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        for e in events
        if e.get("cat") in DEVICE
        and not _is_comm(e, False)
        and not (staging and "Pinned" in (e.get("name") or ""))
    ]
    calls = sorted(
        (e for e in events if _is_comm(e, host) and low <= float(e["ts"]) <= high), key=lambda e: e["ts"]
    )
    seen: dict[str, int] = {}
    rows = []
    for event in calls:
        signature = _signature(event, host)
        seen[signature] = seen.get(signature, -1) + 1
        entry, leave = float(event["ts"]), float(event["ts"]) + float(event["dur"])
        inside = max(0.0, min(leave, high) - entry)
        on_path = inside - _busy(compute, entry, min(leave, high))
        rows.append({"key": (signature, seen[signature]), "entry": entry, "on_path": on_path})
    return int(document["distributedInfo"]["rank"]), rows


def waits(
    step: int, paths: list[Path], shifts: dict[int, float] | None = None, gpu: bool = False
) -> list[dict[str, Any]]:
    """Per (rank, call): its wait for the last member, its communication on the path, its peer wait."""
    found = dict(rank_calls(path, step, gpu) for path in paths)
    shift = shifts or {}
    latest: dict[Any, float] = {}
    for rank, rows in found.items():
        for row in rows:
            entry = row["entry"] - shift.get(rank, 0.0)
            latest[row["key"]] = max(latest.get(row["key"], entry), entry)
    table = []
    for rank, rows in sorted(found.items()):
        for row in rows:
            waited = latest[row["key"]] - (row["entry"] - shift.get(rank, 0.0))
            table.append(
                {
                    "rank": rank,
                    "entry_us": row["entry"],
                    "waited_us": waited,
                    "comm_on_path_us": row["on_path"],
                    "peer_wait_us": min(waited, row["on_path"]),
                }
            )
    return table


if __name__ == "__main__":
    pairs = [a.split(":") for a in sys.argv[2:] if ":" in a and not Path(a).exists()]
    files = [Path(a) for a in sys.argv[2:] if Path(a).exists()]
    shifts = {int(rank): float(us) for rank, us in pairs}
    rows = waits(int(sys.argv[1]), files, shifts, "--gpu-window" in sys.argv)
    print(json.dumps(rows, indent=1))
