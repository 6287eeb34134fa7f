"""A batch's summaries as a worker sends them to the parent: every kind of frame of the batch's summaries
stacked into one frame, and split back into each summary's frames (slices, no copy) when the batch arrives.

A polars frame pickles at a fixed cost of tens of microseconds, and a summary holds about 35 frames
(`traceview.map.rank_summary.RankSummary`, its compact trace and its kernels' parts): sent one by one, the
frames of a tiny rank cost more to move than to compute. Packed, a batch of 16 summaries is 35 frames. A kind
of frame whose columns or types differ between the batch's summaries is sent as it is. Nothing is computed:
the summaries that arrive equal those sent, frame for frame.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from itertools import accumulate
from typing import Any

import polars as pl

from traceview.core.frames import strictly_stacked
from traceview.map.rank_summary import RankSummary

Path = tuple[str, ...]


def frame_paths(value: Any, prefix: Path = ()) -> list[Path]:
    """The attribute paths of every frame in `value`, a dataclass, and in the dataclasses it holds."""
    paths: list[Path] = []
    for field in dataclasses.fields(value):
        inner = getattr(value, field.name)
        if isinstance(inner, pl.DataFrame):
            paths.append((*prefix, field.name))
        elif dataclasses.is_dataclass(inner) and not isinstance(inner, type):
            paths.extend(frame_paths(inner, (*prefix, field.name)))
    return paths


def _get(value: Any, path: Path) -> Any:
    for name in path:
        value = getattr(value, name)
    return value


def with_values(value: Any, values: Mapping[Path, Any]) -> Any:
    """`value` (a frozen dataclass) with the attribute at each path of `values` set: one copy per dataclass
    on the paths."""
    here: dict[str, Any] = {}
    deeper: dict[str, dict[Path, Any]] = {}
    for (head, *rest), new in values.items():
        if rest:
            deeper.setdefault(head, {})[tuple(rest)] = new
        else:
            here[head] = new
    here |= {head: with_values(getattr(value, head), inner) for head, inner in deeper.items()}
    return dataclasses.replace(value, **here)


class PackedResults(list[Any]):
    """A worker's results (summaries, and what could not be read, in order), pickled packed (module
    docstring); in the process that made them, a plain list."""

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _unpacked, _packed(list(self))


Packed = tuple[list[Any], list[Path], list[pl.DataFrame], list[list[int]]]


def _packed(results: list[Any]) -> Packed:
    """The results with their summaries' stackable frames taken out (None in their place), those frames
    stacked per kind, and each summary's row counts."""
    positions = [i for i, result in enumerate(results) if isinstance(result, RankSummary)]
    if len(positions) < 2:
        return results, [], [], []
    summaries = [results[i] for i in positions]
    paths, stacks, heights = [], [], []
    for path in frame_paths(summaries[0]):
        frames = [_get(summary, path) for summary in summaries]
        stacked = strictly_stacked(frames, rechunk=True)  # other types: sent as they are
        if stacked is not None:
            paths.append(path)
            stacks.append(stacked)
            heights.append([frame.height for frame in frames])
    hollow = list(results)
    for position in positions:
        hollow[position] = with_values(results[position], dict.fromkeys(paths))
    return hollow, paths, stacks, heights


def _unpacked(
    hollow: list[Any], paths: list[Path], stacks: list[pl.DataFrame], heights: list[list[int]]
) -> list[Any]:
    """The results as sent: each summary's frames slices of the stacked frames."""
    if not paths:
        return hollow
    positions = [i for i, result in enumerate(hollow) if isinstance(result, RankSummary)]
    starts = [list(accumulate(counts, initial=0)) for counts in heights]
    results = list(hollow)
    for k, position in enumerate(positions):
        frames = {
            path: stacked.slice(begin[k], counts[k])
            for path, stacked, counts, begin in zip(paths, stacks, heights, starts, strict=True)
        }
        results[position] = with_values(hollow[position], frames)
    return results
