"""A second, plain-Python derivation of the critical path of one step (docs/metrics.md, "Critical path"):
only `json`, `gzip` and `re`, no traceview import; an explicit sweep with a set of open events instead of the
tool's running sums per priority.

What it derives, for one window [start, end) of one trace on the trace's own clock: the device's time (any
kernel, memory copy or set; communication when a kernel's name starts with `nccl`/`rccl`), and each host
category of the docs' table, read by the docs' rules from the launching threads' events (threads whose
runtime calls share a correlation id with a device event). Kernel classes are not split here (that is the
kernel-class table's business): the device's categories are compared as one sum.

    python tests/critical_path_plain.py TRACE.json.gz START_US END_US
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from itertools import pairwise
from pathlib import Path
from typing import Any

DEVICE_CATEGORIES = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset", "mtia_ccp_events"}
KINDS = {
    "cpu_op": "op",
    "Operator": "op",
    "operator": "op",
    "user_annotation": "annotation",
    "cuda_runtime": "runtime",
    "Runtime": "runtime",
    "cuda_driver": "runtime",
    "mtia_runtime": "runtime",
}
HOST_RULES = [  # (category, kinds, regex, shortest duration): the docs' table, first match wins
    (
        "blocking_module_load",
        {"runtime"},
        r"^(cu|hip)(Module(Load\w*|GetFunction)|LibraryLoad\w*|LibraryGetKernel)",
        0,
    ),
    ("blocking_module_load", {"runtime"}, r"^(cuda|hip|cu)(LaunchKernel|LaunchCooperativeKernel)", 1000.0),
    (
        "blocking_alloc",
        {"runtime"},
        r"^(cuda|hip)(Free|Malloc|FreeHost|MallocHost|HostAlloc|HostFree|MallocManaged)"
        r"(_v\d+)?$|^cuMem(Alloc|Free)",
        0,
    ),
    ("blocking_copy", {"runtime"}, r"^(cuda|hip|cu)Memcpy", 0),
    ("blocking_sync", {"runtime"}, r"^(cuda|hip|cu)(Device|Stream|Event|Ctx)(Synchronize|Query)", 0),
    ("graph_replay", {"runtime"}, r"^(cuda|hip|cu)GraphLaunch", 0),
    ("launch", {"runtime"}, r".", 0),
    (
        "host_data",
        {"op", "annotation"},
        r"^enumerate\(DataLoader\)#|DataLoader|^## ?(load_batch|data_load\w*"
        r"|wait_for_batch) ?##$",
        0,
    ),
    (
        "host_optimizer",
        {"op", "annotation"},
        r"^Optimizer\.(step|zero_grad)#|^## (optimizer|zero_grad) ##$",
        0,
    ),
    ("host_other", {"op"}, r".", 0),
    ("host_python", {"annotation"}, r".", 0),
]
ORDER = ["device", "comm", *dict.fromkeys(rule[0] for rule in HOST_RULES)]


def _events(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        document = json.load(handle)
    events = document["traceEvents"] if isinstance(document, dict) else document
    return [e for e in events if e.get("ph") == "X" and e.get("ts") is not None and e.get("dur") is not None]


def _host_category(event: dict[str, Any]) -> str | None:
    kind, name, dur = KINDS.get(event.get("cat", "")), event.get("name") or "", float(event["dur"])
    for category, kinds, regex, shortest in HOST_RULES:
        if kind in kinds and re.search(regex, name) and dur >= shortest:
            return category
    return None


def _intervals(events: list[dict[str, Any]], start: float, end: float) -> list[tuple[float, float, str]]:
    """(start, end, category) of every event the path may pass through, cut to [start, end)."""
    device = [e for e in events if e.get("cat") in DEVICE_CATEGORIES]
    launched = {(e.get("args") or {}).get("correlation") for e in device} - {None}
    threads = {
        e.get("tid")
        for e in events
        if KINDS.get(e.get("cat", "")) == "runtime" and (e.get("args") or {}).get("correlation") in launched
    }
    found = []
    for event in events:
        if event.get("cat") in DEVICE_CATEGORIES:
            comm = re.match(r"(?i)^(nccl|rccl)", event.get("name") or "") is not None
            category: str | None = "comm" if comm else "device"
        elif event.get("cat") in KINDS and (not threads or event.get("tid") in threads):
            category = _host_category(event)
        else:
            category = None
        low, high = max(float(event["ts"]), start), min(float(event["ts"]) + float(event["dur"]), end)
        if category is not None and high > low:
            found.append((low, high, category))
    return found


def path_of(path: Path, start: float, end: float) -> dict[str, float]:
    """Microseconds of [start, end) held by each category (`other` when nothing is open)."""
    intervals = _intervals(_events(path), start, end)
    points = sorted({start, end, *(i[0] for i in intervals), *(i[1] for i in intervals)})
    opening: dict[float, list[str]] = {}
    closing: dict[float, list[str]] = {}
    for low, high, category in intervals:
        opening.setdefault(low, []).append(category)
        closing.setdefault(high, []).append(category)
    open_count = dict.fromkeys(ORDER, 0)
    held = dict.fromkeys([*ORDER, "other"], 0.0)
    for here, following in pairwise(points):
        for category in closing.get(here, []):
            open_count[category] -= 1
        for category in opening.get(here, []):
            open_count[category] += 1
        holder = next((c for c in ORDER if open_count[c] > 0), "other")
        held[holder] += following - here
    return held


if __name__ == "__main__":
    found = path_of(Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]))
    print(json.dumps(found, indent=1))
