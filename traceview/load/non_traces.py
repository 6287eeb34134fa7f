"""What a run is made of, said once: the files beside the traces that are not traces.

A job's folder holds more than its rank traces: sidecar JSON (`*_facts_rank3.json`), another tool's run
file, a timeline of another format. A file found by listing a folder, a glob or a prefix that reads as
something other than a Kineto trace (`NotKinetoError`: `SkippedInput.not_a_trace`) is no part of the run: it
is ignored, counted in one line, and never makes the run partial (docs/metrics.md, "Errors and exit codes").
A file the user or a run.json named is different: one it lists that is not a trace is a rank the run lacks,
a skipped input (exit 4).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from traceview.core.records import record
from traceview.model.trace import SkippedInput

EXAMPLES = 3
"""Names the one line (and the JSON's `run.ignored.examples`) quotes; the count says the rest."""


@record
class IgnoredInputs:
    """The files found beside the traces that are not traces: how many, and the first few by path."""

    count: int = 0
    examples: tuple[str, ...] = ()


def named_by_manifest(skipped: Sequence[SkippedInput]) -> list[SkippedInput]:
    """`skipped` as inputs a run.json named: none of them is set apart as not a trace."""
    return [replace(one, not_a_trace=False) if one.not_a_trace else one for one in skipped]


DAMAGED = ("not JSON", "no JSON")
"""Reasons that say a file named `.json` holds no JSON at all: a damaged file (a rank lost), not another
tool's document; it stays a skipped input."""


def _ignorable(one: SkippedInput) -> bool:
    """Readable as another kind of document, and not named as a trace either (`rank3.pt.trace.json` that is
    not one, or a `.json` holding no JSON, is a rank the run lacks: skipped)."""
    name = one.path.replace("\\", "/").rsplit("/", 1)[-1].lower()
    reason = one.reason.removeprefix(f"{one.path}: ")
    return one.not_a_trace and "trace" not in name and not reason.startswith(DAMAGED)


def set_apart_non_traces(skipped: Sequence[SkippedInput]) -> tuple[tuple[SkippedInput, ...], IgnoredInputs]:
    """The inputs truly skipped, and the files that are not traces (nor named as traces), ignored."""
    others = sorted(one.path for one in skipped if _ignorable(one))
    kept = tuple(one for one in skipped if not _ignorable(one))
    return kept, IgnoredInputs(len(others), tuple(others[:EXAMPLES]))


def ignored_line(ignored: IgnoredInputs) -> str | None:
    """The one line that says the files that are not traces were ignored (None when there were none)."""
    if not ignored.count:
        return None
    more = ignored.count - len(ignored.examples)
    names = ", ".join(ignored.examples) + (f" and {more} more" if more else "")
    return f"ignored {ignored.count} file(s) beside the traces that are not traces: {names}"
