"""The terminal's parallelism lines (docs/metrics.md, "Parallelism dimensions", "MoE balance", "Links
measured", "Communication roofline"): one line per dimension, then one sentence per other analysis.
Renders, never computes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rich.markup import escape

from traceview.core.durations import duration_text
from traceview.core.sanitize import printable
from traceview.reduce.analysis import RunAnalysis


def _ms(value: float | None) -> str:
    return "-" if value is None else duration_text(value)


def _size(value: float | None) -> str:
    if value is None:
        return "bytes unknown"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value:.0f} B"


def _bandwidth(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e9:.3g} GB/s"


def dimension_line(row: dict[str, Any]) -> str:
    """`tp (groups 3, 4 of 2 ranks; confidence 1.00; NVLink): 16 calls, 16.0 MiB, T_comm 0.12 ms, exposed 0.00
    ms, waiting 0.00 ms, busbw 140 GB/s per step` (medians over (rank, step))."""
    names = row.get("groups") or []
    groups = (
        ", ".join(names[:4]) + (f" (+{len(names) - 4})" if len(names) > 4 else "") if names else "none seen"
    )
    size = f" of {row['group_size']:.0f} ranks" if row.get("group_size") is not None else ""
    link = f"; {row['link']}" if row.get("link") else ""
    sure = f"; confidence {row['confidence']:.2f}" if row.get("confidence") is not None else ""
    return (
        f"{row['dimension']} (groups {groups}{size}{sure}{link}): "
        f"{row['calls']:.0f} calls, {_size(row['bytes'])}, T_comm {_ms(row['comm_us'])}, exposed "
        f"{_ms(row['exposed_us'])}, waiting {_ms(row['wait_us'])}, busbw {_bandwidth(row['busbw_Bps'])} per "
        f"step"
    )


def dimension_lines(analysis: RunAnalysis) -> Iterator[str]:
    """Every line of the terminal's parallelism block, as plain text."""
    found = analysis.dimensions
    if found is not None and found.per_dimension.height:
        yield f"Parallelism dimensions (named at confidence >= {found.threshold:.2f}; medians per step):"
        for row in found.per_dimension.iter_rows(named=True):
            yield "  " + dimension_line(row)
        for row in found.volumes.filter(found.volumes["ratio"].is_not_null()).iter_rows(named=True):
            yield (
                f"  volume {row['dimension']} {row['collectives']}: {row['ratio']:.2f}x expected: "
                f"{row['cause']}"
            )
        if found.layout_note:
            yield f"  {found.layout_note}"
    for part in (analysis.moe, analysis.links_measured, analysis.roofline):
        if part is not None and part.sentence:
            yield part.sentence


def print_dimensions(analysis: RunAnalysis, console: Any) -> None:
    """Print the parallelism block (input text escaped: group names come from the traces)."""
    for line in dimension_lines(analysis):
        console.print(escape(printable(line)), highlight=False, markup=True)
