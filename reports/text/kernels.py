"""Terminal tables of the kernels analysis (rich). Renders only: every figure comes from
`traceview.kernels.analysis.KernelAnalysis` (or the slow-rank explanation the command asked for)."""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from traceview.reports.text.collectives import Cell, gbps, ms, plain
from traceview.reports.text.fit import print_table

from traceview.core.sanitize import printable
from traceview.events.kernel_classes import COMPUTE_CLASSES, OVERLAP
from traceview.kernels.analysis import KernelAnalysis
from traceview.kernels.slow_rank import SlowRank

MAX_RANKS = 32
NAME_CHARS = 70
NAMES = ("kernel", "operator")
"""The name columns: they wrap within the room the others leave (`traceview.reports.text.fit`)."""
DROP_FIRST = (
    "p99 ms",
    "median ms",
    "ranks",
    "median rank n",
    "n",
    "slower ms",
    "more work ms",
    "duration x",
    "calls",
    "dtype",
    "count",
    "peak TFLOP/s",
    "of roof",
    "FLOP/byte",
    "GB/s",
    "kernels",
    "short kernels",
    "shorter than launch",
    "queue median ms",
    "graph kernels",
)
"""The columns hidden first on a narrow terminal, in this order (then from the right): the time, the class,
the cause and the straggler's extra time per step stay longest."""


def _print(console: Console, table: Table) -> None:
    print_table(console, table, DROP_FIRST, NAMES)


def _name(value: object) -> str:
    text = printable(value) if value is not None else "-"
    return escape(text if len(text) <= NAME_CHARS else text[: NAME_CHARS - 1] + "…")


def _share(value: object) -> str:
    return f"{value:.1%}" if isinstance(value, int | float) else "-"


def _tflops(value: object) -> str:
    return f"{value / 1e12:.1f}" if isinstance(value, int | float) else "-"


def _count(value: object) -> str:
    return f"{value:.0f}" if isinstance(value, int | float) else "-"


def _table(title: str, frame: pl.DataFrame, columns: Mapping[str, tuple[str, Cell]], rows: int) -> Table:
    table = Table(title=escape(printable(title)), title_justify="left")
    for header, _ in columns.values():
        table.add_column(header, justify="left" if header in NAMES else "right")
    for row in frame.head(rows).iter_rows(named=True):
        table.add_row(*(cell(row.get(name)) for name, (_, cell) in columns.items()))
    if frame.height > rows:
        table.caption = f"{frame.height - rows} more rows (traceview kernels --json lists them)"
    return table


def _class_table(per_class: pl.DataFrame, title: str) -> Table:
    """One row per rank, one column per class present (exclusive time; overlap; others their union)."""
    present = per_class.filter(pl.col("time_us") > 0).get_column("kernel_class").unique().to_list()
    order = [c for c in (*COMPUTE_CLASSES, OVERLAP) if c in present]
    order += sorted(c for c in present if c not in order)
    wide = per_class.pivot(on="kernel_class", index="rank", values="shown").sort("rank")
    columns = {"rank": ("rank", plain), **{c: (c, ms) for c in order if c in wide.columns}}
    return _table(title, wide, columns, MAX_RANKS)


def _shown(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.with_columns(pl.coalesce("exclusive_us", "time_us").alias("shown"))


KERNEL_COLUMNS = {
    "name": ("kernel", _name),
    "kernel_class": ("class", plain),
    "count": ("count", _count),
    "total_us": ("total ms", ms),
    "median_us": ("median ms", ms),
    "p99_us": ("p99 ms", ms),
}
OPERATOR_COLUMNS = {
    "operator": ("operator", _name),
    "op_class": ("class", plain),
    "calls": ("calls", _count),
    "kernels": ("kernels", _count),
    "kernel_us": ("kernel ms", ms),
    "achieved_flops": ("TFLOP/s", _tflops),
    "dtype": ("dtype", plain),
}
ROOFLINE_COLUMNS = {
    "op_class": ("class", plain),
    "dtype": ("dtype", plain),
    "calls": ("calls", _count),
    "achieved_flops": ("TFLOP/s", _tflops),
    "achieved_bytes_per_s": ("GB/s", gbps),
    "intensity": ("FLOP/byte", plain),
    "bound": ("bound", plain),
    "peak_fraction": ("of peak", _share),
    "attainable_fraction": ("of roof", _share),
    "peak_flops": ("peak TFLOP/s", _tflops),
}
LAUNCH_COLUMNS = {
    "rank": ("rank", plain),
    "launches": ("launches/step", _count),
    "launch_us": ("CPU launch ms", ms),
    "device_us": ("GPU work ms", ms),
    "kernels": ("kernels", _count),
    "short_kernels": ("shorter than launch", _count),
    "queue_median_us": ("queue median ms", ms),
}
SLOW_COLUMNS = {
    "key": ("kernel", _name),
    "kernel_class": ("class", plain),
    "reference_count": ("median rank n", _count),
    "count": ("n", _count),
    "delta_us": ("extra ms/step", ms),
    "slower_us": ("slower ms", ms),
    "more_work_us": ("more work ms", ms),
    "duration_ratio": ("duration x", plain),
    "cause": ("cause", plain),
}
LINK_COLUMNS = {
    "rank": ("rank", plain),
    "device": ("device", plain),
    "kernels": ("kernels", _count),
    "linked_share": ("linked to an operator", _share),
    "graph_kernels": ("graph kernels", _count),
}


def _slow_rank(found: SlowRank, console: Console, top: int) -> None:
    console.print(escape(printable(found.sentence)), highlight=False)
    title = f"Rank {found.rank} against rank {found.reference_rank}, kernel by kernel (per step)"
    _print(console, _table(title, found.by_kernel, SLOW_COLUMNS, top))


def _host_table(host: pl.DataFrame) -> Table | None:
    if host.height == 0:
        return None
    wide = host.pivot(on="phase", index="rank", values="time_us").sort("rank")
    columns = {"rank": ("rank", plain), **{c: (f"{c} ms", ms) for c in wide.columns if c != "rank"}}
    return _table("Host side of the median step, per rank", wide, columns, MAX_RANKS)


def render_kernels(
    kernels: KernelAnalysis,
    console: Console,
    rank: int | None = None,
    step: int | None = None,
    top: int = 10,
    explained: SlowRank | None = None,
) -> None:
    """The device and link line, classes per rank, the slow ranks, top kernels and operators, the roofline,
    launches and the host side; for `rank` that rank's tables, for `step` that step's."""
    device = kernels.device
    known = "unknown to the hardware table" if device.spec is None else f"table row {device.spec.key}"
    console.print(
        f"device {escape(printable(device.name or 'unknown'))} ({known}); kernels linked to the operator "
        "that "
        f"launched them: {_share(kernels.linked_share)}",
        highlight=False,
    )
    parts = kernels.parts
    if step is not None:
        classes = _shown(parts.class_steps.filter(pl.col("step") == step))
        title = f"Time by kernel class in step {step} (ms; compute classes exclusive, overlap apart)"
    else:
        classes = _shown(kernels.per_rank)
        title = "Time by kernel class, median step (ms; compute classes exclusive, overlap apart)"
    if rank is not None:
        classes = classes.filter(pl.col("rank") == rank)
    if classes.height:
        _print(console, _class_table(classes, title))
    for found in [explained] if explained is not None else kernels.slow_ranks:
        _slow_rank(found, console, top)
    _kernel_tables(kernels, console, rank, step, top)
    if kernels.roofline.height:
        _print(
            console, _table("Operators on the roofline (all ranks)", kernels.roofline, ROOFLINE_COLUMNS, 40)
        )
    _per_rank_tables(kernels, console, rank)


def _kernel_tables(
    kernels: KernelAnalysis, console: Console, rank: int | None, step: int | None, top: int
) -> None:
    parts = kernels.parts
    if step is not None:
        rows = parts.key_steps.filter(pl.col("step") == step)
        rows = rows.filter(pl.col("rank") == rank) if rank is not None else rows
        columns = {
            "rank": ("rank", plain),
            "key": ("kernel", _name),
            "kernel_class": ("class", plain),
            "kernels": ("count", _count),
            "kernel_sum_us": ("total ms", ms),
        }
        _print(
            console, _table(f"Top kernels in step {step}", rows, columns, top * max(1, rows.n_unique("rank")))
        )
    elif rank is not None:
        rows = parts.top_kernels.filter(pl.col("rank") == rank)
        _print(console, _table(f"Top kernels of rank {rank} (whole trace)", rows, KERNEL_COLUMNS, top))
        ops = parts.operators.filter(pl.col("rank") == rank)
        _print(
            console,
            _table(f"Top operators of rank {rank} (innermost, by their kernels)", ops, OPERATOR_COLUMNS, top),
        )
    else:
        columns = {**KERNEL_COLUMNS, "ranks": ("ranks", _count), "per_rank_us": ("ms per rank", ms)}
        _print(
            console, _table("Top kernels over the ranks (whole traces)", kernels.run_kernels, columns, top)
        )
        op_columns = {**OPERATOR_COLUMNS, "per_rank_us": ("ms per rank", ms)}
        _print(console, _table("Top operators over the ranks", kernels.run_operators, op_columns, top))


def _per_rank_tables(kernels: KernelAnalysis, console: Console, rank: int | None) -> None:
    launches, host, links = kernels.launches_per_rank, kernels.host_per_rank, kernels.parts.ranks
    if rank is not None:
        launches, links = launches.filter(pl.col("rank") == rank), links.filter(pl.col("rank") == rank)
        host = host.filter(pl.col("rank") == rank) if host.height else host
    if launches.height:
        _print(console, _table("Launches, median step per rank", launches, LAUNCH_COLUMNS, MAX_RANKS))
    table = _host_table(host)
    if table is not None:
        _print(console, table)
    _print(console, _table("Kernels linked to operators, per rank", links, LINK_COLUMNS, MAX_RANKS))
