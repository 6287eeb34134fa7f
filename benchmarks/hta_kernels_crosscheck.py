"""Cross-check of traceview's computation / communication / memory split against HolisticTraceAnalysis's
kernel breakdown (issue 23), on the same files.

    python benchmarks/hta_kernels_crosscheck.py [TRACE_DIR ...]

HTA (`BreakdownAnalysis.get_gpu_kernel_breakdown(..., include_memory_kernels=True)`, hta 0.5, read from its
source) classes each device event by name (`^nccl.*Kernel` communication; `^Memcpy`, `^Memset`, `^dma` memory;
the rest computation), merges each class's intervals, and sweeps them: each moment is counted once, under the
set of classes running then ("COMPUTATION", "COMPUTATION overlapping COMMUNICATION", ...), summed over ranks.
The union of one class is therefore the sum of every status that names it. traceview's side: its kernel
classes (`traceview.events.kernel_classes`) grouped as HTA groups (the compute classes, `communication`, the
memory classes), each group's union over exactly HTA's event set and rounding (`hta_crosscheck.hta_event_set`:
the events launched before the last `ProfilerStep` starts). The two must agree to 0.5 % of the class's time
(HTA's integer microseconds are the residue).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import polars as pl
from hta.analyzers.breakdown_analysis import (  # type: ignore[import-not-found,import-untyped,unused-ignore]
    BreakdownAnalysis,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hta_crosscheck as base

from traceview.core.intervals import union_length
from traceview.events.kernel_classes import COMMUNICATION, COMPUTE_CLASSES, MEMORY_CLASSES, with_kernel_class
from traceview.load.inputs import load_run

CLASSES = {"compute": "COMPUTATION", "comm": "COMMUNICATION", "memory": "MEMORY"}
DEFAULT_DIRS = tuple(base.REAL / name for name in ("hta_df_index_resolver", "hta_16rank_job_rank0"))
TOLERANCE = 0.005


@dataclass(frozen=True)
class Split:
    """One class's union (us) over a folder's ranks: ours on HTA's event set, and HTA's."""

    trace: str
    event_class: str
    ours_us: float
    hta_us: float

    @property
    def relative(self) -> float:
        """(ours - HTA) / HTA (0 when both are 0)."""
        return 0.0 if self.hta_us == 0 else (self.ours_us - self.hta_us) / self.hta_us


def hta_split(trace_dir: Path) -> dict[str, float]:
    """HTA's union of each class: the sum of every status of its kernel breakdown naming the class."""
    analysis = base.hta_load(trace_dir)
    kernel_types, _ = BreakdownAnalysis.get_gpu_kernel_breakdown(
        analysis.t, visualize=False, include_memory_kernels=True
    )
    statuses = list(zip(kernel_types["kernel_type"], kernel_types["sum"], strict=True))
    return {
        ours: float(sum(total for status, total in statuses if hta in str(status).split(" overlapping ")))
        for ours, hta in CLASSES.items()
    }


def _group() -> pl.Expr:
    """HTA's three groups of our kernel classes."""
    return (
        pl.when(pl.col("kernel_class").is_in(list(COMPUTE_CLASSES)))
        .then(pl.lit("compute"))
        .when(pl.col("kernel_class") == COMMUNICATION)
        .then(pl.lit("comm"))
        .when(pl.col("kernel_class").is_in(list(MEMORY_CLASSES)))
        .then(pl.lit("memory"))
    )


def ours_split(trace_dir: Path) -> dict[str, float]:
    """Our union of each group of kernel classes over HTA's event set, summed over ranks."""
    run = load_run(trace_dir, workers=1)
    events = pl.concat([base.hta_event_set(trace) for trace in run], how="vertical_relaxed")
    kept = with_kernel_class(events.filter(pl.col("in_whole"))).with_columns(_group().alias("group"))
    unions = union_length(kept.select("rank", "group", "start_us", "end_us"), ["rank", "group"])
    totals = unions.group_by("group").agg(pl.col("length_us").sum())
    found = dict(totals.iter_rows())
    return {name: float(found.get(name, 0.0)) for name in CLASSES}


def compare(trace_dir: Path) -> list[Split]:
    """The three classes of one folder, ours against HTA's."""
    hta, ours = hta_split(trace_dir), ours_split(trace_dir)
    return [Split(trace_dir.name, name, ours[name], hta[name]) for name in CLASSES]


def main(argv: list[str]) -> int:
    """Print the split of every folder named; exit 1 past the tolerance."""
    worst = 0.0
    print(f"{'trace':<24} {'class':<8} {'ours us':>14} {'HTA us':>14} {'ours/HTA - 1':>13}")
    for trace_dir in [Path(a) for a in argv] or list(DEFAULT_DIRS):
        for split in compare(trace_dir):
            worst = max(worst, abs(split.relative))
            print(
                f"{split.trace:<24} {split.event_class:<8} {split.ours_us:>14.1f} {split.hta_us:>14.1f} "
                f"{split.relative:>13.5f}"
            )
    print(f"\nlargest |ours / HTA - 1|: {worst:.5f} (target <= {TOLERANCE})")
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
