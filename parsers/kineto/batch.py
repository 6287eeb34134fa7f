"""A batch of Kineto files parsed together: each file read on its own, the queries of every file
(`Opened.plans`: its frames' extremes, its step candidates, its local device) run once for the batch,
keyed by file.

A small file's parse is a few milliseconds, and its one `collect_all` was a third of it: a query costs its
call, not its rows (docs/scaling.md). Stacked with a `_file` column, 64 small files cost the queries of one.
Each file's answers are its own rows of the keyed answers, equal to what its own queries give (a file without
rows of a kind gets the answer of an empty frame); a file that cannot be read costs only itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import polars as pl
from traceview.parsers.kineto import Opened, finished, opened
from traceview.parsers.kineto._meta import local_device, step_candidates
from traceview.parsers.kineto.limits import DEFAULT_LIMITS, ParseLimits, frame_extremes

from traceview.core.engine import in_memory
from traceview.core.frames import labelled
from traceview.core.location import Url, location
from traceview.model.trace import RankTrace

FILE = "_file"
"""The column naming each row's file (its position in the batch)."""
_KEYS = (FILE,)
Answers = list[pl.DataFrame]


@in_memory
def parse_many(
    paths: Sequence[str | Path | Url], limits: ParseLimits = DEFAULT_LIMITS
) -> list[RankTrace | Exception]:
    """`parse` of each of `paths`, in order: its trace, or the error its own `parse` would raise; the files'
    queries answered together (module docstring)."""
    files = [_opened(path, limits) for path in paths]
    ready = [file for file in files if isinstance(file, Opened)]
    answers = iter(_answers(ready))
    return [file if isinstance(file, Exception) else _finished(file, next(answers), limits) for file in files]


def _opened(path: str | Path | Url, limits: ParseLimits) -> Opened | Exception:
    try:
        return opened(location(path), limits)
    except Exception as error:  # the file's own error, reported as its own `parse` would raise it
        return error


def _finished(file: Opened, found: Answers | Exception, limits: ParseLimits) -> RankTrace | Exception:
    if isinstance(found, Exception):
        return found
    try:
        return finished(file, found, limits)
    except Exception as error:
        return error


def _answers(files: Sequence[Opened]) -> list[Answers | Exception]:
    """Each file's answers to its `plans`: keyed for the batch; each file alone when there is one, or when
    the batch's query meets a defect (it then costs no file but the one that has it)."""
    if len(files) > 1:
        try:
            return list(_keyed_answers(files))
        except Exception:  # each file alone below
            pass
    return [_alone(file) for file in files]


def _alone(file: Opened) -> Answers | Exception:
    try:
        return pl.collect_all(file.plans())
    except Exception as error:
        return error


def _keyed_answers(files: Sequence[Opened]) -> list[Answers]:
    gpu, cpu = _stacked([file.gpu for file in files]), _stacked([file.cpu for file in files])
    annotated = {i: file.gpu_steps for i, file in enumerate(files) if file.gpu_steps is not None}
    gpu_steps = _stacked(list(annotated.values()), list(annotated)) if annotated else None
    found = pl.collect_all(
        [
            frame_extremes(gpu, _KEYS),
            frame_extremes(cpu, _KEYS),
            step_candidates(gpu_steps, cpu, _KEYS),
            local_device(gpu, _KEYS),
        ]
    )
    parts = [_by_file(answer, len(files), one_row=k != 2) for k, answer in enumerate(found)]
    return [[part[i] for part in parts] for i in range(len(files))]


def _stacked(frames: Sequence[pl.DataFrame], positions: Sequence[int] | None = None) -> pl.DataFrame:
    """`frames` one above the other, each row with its file's position (`positions`, else the frames' own)
    in `FILE` (`traceview.core.frames.labelled`: no query)."""
    return labelled(frames, FILE, range(len(frames)) if positions is None else positions)


def _by_file(answer: pl.DataFrame, count: int, one_row: bool) -> list[pl.DataFrame]:
    """The keyed `answer`'s rows of each of `count` files, without `FILE`, in order; a file without rows
    gets what its own query gives on an empty frame: one row of nulls for an aggregate (`one_row`), else no
    rows."""
    parts = answer.partition_by(FILE, as_dict=True, maintain_order=True, include_key=False)
    missing = answer.drop(FILE).clear(1 if one_row else 0)
    return [parts.get((i,), missing) for i in range(count)]
