"""Check a `traceview export` file as data, with plain JSON passes and none of traceview's code.

    traceview export RUN -o run.perfetto.json.gz && traceview summary RUN --json > summary.json
    python tools/check_export.py run.perfetto.json.gz RUN summary.json

1. The Chrome trace format (JSON object format): `traceEvents` a list; every event a known phase with its
   required fields; `pid` and `tid` integers; `ts` and `dur` finite numbers, `dur` >= 0; metadata events name
   processes and threads; flow ids each used by exactly one start ("s") and one end ("f", bound to its
   enclosing slice, "bp": "e").
2. Offsets: every exported kernel is found in its rank's own file by (name, correlation id); its shift
   (exported ts - original ts) is one number per rank, and that number is the rank's base-time difference
   ((baseTimeNanoseconds(rank) - the run's smallest) / 1000, an unknown base counting as 0) minus the clock
   offset of the rank's host that the alignment reported (`across_ranks.clock_offsets` of the summary).
3. Flows: both ends lie inside an exported kernel slice on their process and thread, and the two kernels are
   one collective instance: the same process group, collective and element count, and the same ordinal among
   their rank's kernels of that group in issue order (one kernel per collective call, as NCCL launches them);
   a trace without process-group args (older PyTorch, sampled traces whose ranks lost different calls) groups
   NCCL kernels by the collective in their name, and there the two kernels must also overlap in time on the
   exported clock (members of one collective wait for each other), within `OVERLAP_SLACK_US`.

Prints one line per check and exits 1 when any fails.
"""

from __future__ import annotations

import bisect
import gzip
import json
import math
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

PHASE_FIELDS = {
    "X": ("name", "ts", "dur", "pid", "tid"),
    "M": ("name", "pid", "args"),
    "s": ("name", "cat", "id", "ts", "pid", "tid"),
    "f": ("name", "cat", "id", "ts", "pid", "tid"),
}
METADATA = {"process_name", "process_sort_index", "thread_name", "thread_sort_index"}
Kernel = tuple[str, int]  # (name, correlation)


def load(path: Path) -> Any:
    """A JSON document, gzip or plain."""
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


def format_problems(document: Any) -> list[str]:
    """What in `document` breaks the Chrome trace format (check 1)."""
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        return ["not the JSON object format: no traceEvents list"]
    problems, flows = [], defaultdict(list)
    for index, event in enumerate(document["traceEvents"]):
        fields = PHASE_FIELDS.get(event.get("ph"))
        if fields is None or any(name not in event for name in fields):
            problems.append(f"event {index}: phase {event.get('ph')!r} or its fields {fields}")
            continue
        if any(
            not isinstance(event.get(k, 0), int) or isinstance(event.get(k, 0), bool) for k in ("pid", "tid")
        ):
            problems.append(f"event {index}: pid/tid not integers")
        numbers = [event[k] for k in ("ts", "dur") if k in event]
        if (
            any(not isinstance(v, int | float) or not math.isfinite(v) for v in numbers)
            or event.get("dur", 0) < 0
        ):
            problems.append(f"event {index}: ts/dur not a finite time")
        if event["ph"] == "M" and event["name"] not in METADATA:
            problems.append(f"event {index}: unknown metadata {event['name']!r}")
        if event["ph"] in "sf":
            flows[event["id"]].append(event)
    for flow_id, ends in flows.items():
        if (
            sorted(e["ph"] for e in ends) != ["f", "s"]
            or next(e for e in ends if e["ph"] == "f").get("bp") != "e"
        ):
            problems.append(f"flow {flow_id}: not one start and one bound end")
    return problems


def rank_files(run: Path) -> dict[int, Any]:
    """rank -> its trace document, from the files of a run folder (the rank from `distributedInfo`)."""
    found = {}
    for path in sorted(run.iterdir()):
        if path.name.endswith((".json", ".json.gz")) and not path.name.startswith(
            "run."
        ):  # run.json: the manifest
            document = load(path)
            found[int(document["distributedInfo"]["rank"])] = document
    return found


def expected_shifts(documents: dict[int, Any], summary: Any) -> dict[int, float]:
    """Per rank, base-time difference minus its host's offset in the summary (check 2)."""
    bases = {rank: int(doc.get("baseTimeNanoseconds") or 0) for rank, doc in documents.items()}
    known = [b for b in bases.values() if b]
    smallest = min(known) if known else 0
    offsets = {}
    for host in (summary.get("across_ranks") or {}).get("clock_offsets") or []:
        for rank in host["ranks"]:
            offsets[rank] = host["offset_us"] or 0.0
    return {
        rank: ((base - smallest) / 1000 if base else 0.0) - offsets.get(rank, 0.0)
        for rank, base in bases.items()
    }


OVERLAP_SLACK_US = 100.0
"""How far apart (us) two kernels of one instance may lie on the exported clock: the clock alignment's error.
"""
NCCL_KERNEL = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")


def _group(event: Any) -> str | None:
    """A collective kernel's group: its process group where the trace records one, else (older traces) the
    collective in its NCCL kernel name; None for any other kernel."""
    if "Process Group Name" in event.get("args", {}):
        return f"group {event['args']['Process Group Name']}"
    found = NCCL_KERNEL.match(event.get("name", ""))
    return f"kernels {found.group(1)}" if found else None


def collective_identity(document: Any) -> dict[Kernel, tuple[str, str, int, int]]:
    """(name, correlation) -> (group, collective, elements, ordinal in the group) of every collective kernel
    of a rank's file, ordinals by start time."""
    kernels = sorted(
        (e for e in document["traceEvents"] if e.get("cat") == "kernel" and _group(e) is not None),
        key=lambda e: e["ts"],
    )
    ordinal: dict[str, int] = defaultdict(int)
    found = {}
    for event in kernels:
        args, group = event["args"], str(_group(event))
        found[(event["name"], args["correlation"])] = (
            group,
            args.get("Collective name"),
            args.get("In msg nelems"),
            ordinal[group] if group.startswith("group ") else -1,
        )
        ordinal[group] += 1
    return found


def offset_problems(events: list[Any], documents: dict[int, Any], expected: dict[int, float]) -> list[str]:
    """Check 2: one shift per rank, equal to the expected one."""
    original = {
        rank: {
            (e["name"], e["args"]["correlation"]): e["ts"]
            for e in doc["traceEvents"]
            if e.get("cat") == "kernel"
        }
        for rank, doc in documents.items()
    }
    shifts: dict[int, list[float]] = defaultdict(list)
    for event in events:
        if event["ph"] == "X" and event.get("cat") == "kernel":
            start = original[event["pid"]].get((event["name"], event["args"]["correlation"]))
            if start is None:
                return [f"rank {event['pid']}: kernel {event['name'][:40]} not in its own file"]
            shifts[event["pid"]].append(event["ts"] - start)
    problems = [
        f"rank {rank}: no kernel exported" for rank in expected if rank in shifts and not shifts[rank]
    ]
    for rank, values in sorted(shifts.items()):
        if max(values) - min(values) > 1e-3 or abs(values[0] - expected[rank]) > 1e-3:
            problems.append(
                f"rank {rank}: shift {min(values):.3f}..{max(values):.3f} us, expected {expected[rank]:.3f}"
            )
    return problems


def flow_problems(events: list[Any], documents: dict[int, Any]) -> tuple[list[str], int]:
    """Check 3, and the number of flows checked."""
    slices: dict[tuple[int, int], list[Any]] = defaultdict(list)
    for event in events:
        if event["ph"] == "X" and event.get("cat") == "kernel":
            slices[(event["pid"], event["tid"])].append(event)
    for row in slices.values():
        row.sort(key=lambda e: e["ts"])
    identity = {rank: collective_identity(doc) for rank, doc in documents.items()}

    def enclosing(end: Any) -> Any:
        row = slices.get((end["pid"], end["tid"]), [])
        index = bisect.bisect_right([e["ts"] for e in row], end["ts"]) - 1
        return row[index] if index >= 0 and end["ts"] <= row[index]["ts"] + row[index]["dur"] else None

    flows: dict[Any, dict[str, Any]] = defaultdict(dict)
    for event in events:
        if event["ph"] in "sf":
            flows[event["id"]][event["ph"]] = event
    problems = []
    for flow_id, ends in flows.items():
        kernels = [enclosing(ends[ph]) for ph in "sf"]
        if None in kernels:
            problems.append(f"flow {flow_id}: an end is on no exported kernel")
            continue
        same = {identity[k["pid"]].get((k["name"], k["args"]["correlation"])) for k in kernels}
        apart = max(k["ts"] for k in kernels) - min(k["ts"] + k["dur"] for k in kernels)
        if len(same) != 1 or None in same or (-1 in next(iter(same)) and apart > OVERLAP_SLACK_US):
            problems.append(f"flow {flow_id}: joins different instances {sorted(map(str, same))}")
    return problems, len(flows)


def check(export: Path, run: Path, summary: Path) -> dict[str, list[str]]:
    """Every check's problems by name (empty lists: the file is right)."""
    document = load(export)
    problems = {"format": format_problems(document)}
    if problems["format"]:
        return problems
    events, documents = document["traceEvents"], rank_files(run)
    problems["offsets"] = offset_problems(events, documents, expected_shifts(documents, load(summary)))
    problems["flows"], count = flow_problems(events, documents)
    if count == 0:
        problems["flows"].append("no flow in the file")
    return problems


def main() -> int:
    export, run, summary = (Path(arg) for arg in sys.argv[1:4])
    failed = False
    for name, found in check(export, run, summary).items():
        print(f"{name}: {'ok' if not found else f'{len(found)} problem(s)'}")
        for problem in found[:10]:
            print(f"  {problem}")
        failed = failed or bool(found)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
