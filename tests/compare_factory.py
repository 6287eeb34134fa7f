"""Modified copies of a recorded run for the compare tests: kernel durations scaled or jittered in the JSON.

Only `dur` of GPU kernels changes (timestamps stay), so each planted change is known exactly: every kernel
the rule selects is `factor` times longer. `ncclKernel`/`ncclDevKernel` names are communication kernels; a
collective's kernels are those whose name says it, or (older NCCL runs every collective as a SendRecv kernel)
those launched inside the collective's CPU annotation (`nccl:all_reduce`, ...), found by the launch's
correlation id.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

NCCL = re.compile(r"nccl", re.IGNORECASE)

Edit = Callable[[dict[str, Any], int], None]
"""Edits one trace document in place; gets the document and the rank index (the file's position)."""
ANNOTATIONS = {
    "AllReduce": "nccl:all_reduce",
    "AllGather": "nccl:_all_gather_base",
    "AllToAll": "nccl:all_to_all",
}


def kernels(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The GPU kernel events of a trace document."""
    return [e for e in document.get("traceEvents", []) if e.get("cat") == "kernel" and "dur" in e]


def _load(path: Path) -> Any:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)


def _dump(document: Any, path: Path) -> None:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as handle:
        json.dump(document, handle)


def planted_copy(source: Path, target: Path, edit: Edit | None = None) -> Path:
    """Copy every trace of `source` to `target`, applying `edit` to each GPU kernel event."""
    target.mkdir(parents=True, exist_ok=True)
    for index, path in enumerate(sorted(p for p in source.iterdir() if p.is_file())):
        document = _load(path)
        if edit is not None:
            edit(document, index)
        _dump(document, target / path.name)
    return target


def _launched_inside(document: dict[str, Any], annotation: str) -> set[int]:
    """Correlation ids of the runtime launches inside a CPU annotation named `annotation` (same thread)."""
    events = document.get("traceEvents", [])
    spans = [
        (e["tid"], e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == annotation and "dur" in e
    ]
    launches = [e for e in events if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})]
    return {
        e["args"]["correlation"]
        for e in launches
        for tid, start, end in spans
        if e.get("tid") == tid and start <= e["ts"] <= end
    }


def scale_collective(collective: str, factor: float) -> Edit:
    """Kernels of `collective` (by kernel name, or launched inside its annotation) `factor` times longer."""

    def edit(document: dict[str, Any], _rank: int) -> None:
        linked = _launched_inside(document, ANNOTATIONS.get(collective, ""))
        for event in kernels(document):
            named = NCCL.search(event["name"]) and collective.lower() in event["name"].lower()
            if named or event.get("args", {}).get("correlation") in linked:
                event["dur"] = event["dur"] * factor

    return edit


def scale_compute(factor: float, only_rank: int | None = None) -> Edit:
    """Every compute (non-NCCL) kernel `factor` times longer, on every rank or only `only_rank`."""

    def edit(document: dict[str, Any], rank: int) -> None:
        for event in kernels(document):
            if not NCCL.search(event["name"]) and (only_rank is None or rank == only_rank):
                event["dur"] = event["dur"] * factor

    return edit


def jitter(relative: float, seed: int = 7) -> Edit:
    """Every kernel's duration times a uniform factor in [1 - relative, 1 + relative] (fixed seed)."""
    generator = random.Random(seed)

    def edit(document: dict[str, Any], _rank: int) -> None:
        for event in kernels(document):
            event["dur"] = event["dur"] * generator.uniform(1 - relative, 1 + relative)

    return edit
