"""What finding gloo's all-to-all rows costs the parse (issue 42): `alltoall_splits` against the loop it
replaced (every host row's name compared in Python, twice), on the host rows of one real rank, in alternating
pairs in this process.

    python benchmarks/splits_cost.py [RANK] [--pairs 5]

The default rank is `hta_16rank_job_rank0` (25,545 host rows, 55 of them `c10d::alltoall_base_`). Both
give the same columns (checked before timing). Printed: the medians in ms of CPU and the paired ratio
new / old with its range.
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import time
from pathlib import Path
from typing import Any

import msgspec
import polars as pl
from traceview.parsers.kineto._schema import Args
from traceview.parsers.kineto._splits import _SPLIT_ARGS, ALLTOALL_BASE, _concrete_list, alltoall_splits

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RANK = ROOT.parent / "shared/data/real/kineto/hta_16rank_job_rank0/rank0.json.gz"
HOST = ("cpu_op", "user_annotation", "python_function")


def row_by_row(data: dict[str, Any], args: list[Args]) -> dict[str, list[Any]]:
    """The replaced loop: every row's name compared in Python, once per split column."""
    names = data["name"]
    found: dict[str, list[Any]] = {}
    for column, index in _SPLIT_ARGS.items():
        values: list[Any] = [None] * len(names)
        for row, name in enumerate(names):
            if name == ALLTOALL_BASE and values[row] is None:
                values[row] = _concrete_list(args[row].concrete_inputs, index)
        found[column] = values
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("rank", nargs="?", type=Path, default=DEFAULT_RANK)
    parser.add_argument("--pairs", type=int, default=5)
    options = parser.parse_args()
    raw = options.rank.read_bytes()
    events = msgspec.json.decode(gzip.decompress(raw) if options.rank.suffix == ".gz" else raw)["traceEvents"]
    host = [e for e in events if e.get("ph") == "X" and e.get("cat") in HOST]
    args = [msgspec.json.decode(msgspec.json.encode(e.get("args", {})), type=Args) for e in host]
    data = {"name": pl.Series([e.get("name", "") for e in host], dtype=pl.Utf8)}
    assert row_by_row(data, args) == alltoall_splits(data, args)
    pairs = []
    for _ in range(options.pairs):
        start = time.process_time()
        row_by_row(data, args)
        old = time.process_time() - start
        start = time.process_time()
        alltoall_splits(data, args)
        pairs.append((old, time.process_time() - start))
    ratios = [new / old for old, new in pairs]
    print(f"{len(host)} host rows, {data['name'].eq(ALLTOALL_BASE).sum()} {ALLTOALL_BASE}")
    print(
        f"row by row {statistics.median(p[0] for p in pairs) * 1e3:.2f} ms, "
        f"filtered {statistics.median(p[1] for p in pairs) * 1e3:.2f} ms CPU (medians)"
    )
    print(
        f"filtered / row by row: median {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})"
    )


if __name__ == "__main__":
    main()
