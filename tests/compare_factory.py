"""Modified copies of a recorded run for the compare tests: kernel durations scaled or jittered in the JSON.

Only `dur` of GPU kernels changes (timestamps stay), so each planted change is known exactly: every kernel
the rule selects is `factor` times longer. `ncclKernel`/`ncclDevKernel` names are communication kernels.
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
"""Edits one kernel event in place; gets the event and the rank index (the file's position in the folder)."""


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
        for event in document.get("traceEvents", []):
            if edit is not None and event.get("cat") == "kernel" and "dur" in event:
                edit(event, index)
        _dump(document, target / path.name)
    return target


def scale_collective(collective: str, factor: float) -> Edit:
    """Kernels of `collective` (in the NCCL kernel name) `factor` times longer."""

    def edit(event: dict[str, Any], _rank: int) -> None:
        if NCCL.search(event["name"]) and collective.lower() in event["name"].lower():
            event["dur"] = event["dur"] * factor

    return edit


def scale_compute(factor: float, only_rank: int | None = None) -> Edit:
    """Every compute (non-NCCL) kernel `factor` times longer, on every rank or only `only_rank`."""

    def edit(event: dict[str, Any], rank: int) -> None:
        if not NCCL.search(event["name"]) and (only_rank is None or rank == only_rank):
            event["dur"] = event["dur"] * factor

    return edit


def jitter(relative: float, seed: int = 7) -> Edit:
    """Every kernel's duration times a uniform factor in [1 - relative, 1 + relative] (fixed seed)."""
    generator = random.Random(seed)

    def edit(event: dict[str, Any], _rank: int) -> None:
        event["dur"] = event["dur"] * generator.uniform(1 - relative, 1 + relative)

    return edit
