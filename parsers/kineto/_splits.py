"""Split sizes of the all-to-alls no `record_param_comms` describes (gloo): `c10d::alltoall_base_`'s `Concrete
Inputs` (docs/metrics.md, "MoE balance")."""

from __future__ import annotations

import re
from itertools import compress
from typing import Any

import msgspec
import polars as pl
from traceview.parsers.kineto._schema import Args

Column = list[Any]

ALLTOALL_BASE = "c10d::alltoall_base_"
"""The op whose `Concrete Inputs` name its split sizes: (output, input, group, output_split_sizes,
input_split_sizes, ...); where no `record_param_comms` says them (gloo), they are its `In/Out split size`."""
_SPLIT_ARGS = {"in_split": 4, "out_split": 3}


def alltoall_splits(data: dict[str, Any], args: list[Args]) -> dict[str, Column]:
    """`in_split`/`out_split` with the split sizes of every `ALLTOALL_BASE` row that has none from its comm
    args, read from its `Concrete Inputs` (a row without them, or with a malformed list, keeps null). The
    rare rows are found first, by a filter over the names (no Python per row)."""
    rows = _rows_named(data["name"], ALLTOALL_BASE)
    found: dict[str, Column] = {}
    for column, index in _SPLIT_ARGS.items():
        given = data.get(column)
        values = [None] * len(args) if given is None else list(given)
        for row in rows:
            if values[row] is None:
                values[row] = _concrete_list(args[row].concrete_inputs, index)
        found[column] = values
    return found


def _rows_named(names: pl.Series | list[str], name: str) -> list[int]:
    """The positions of the rows called `name`: a polars filter over a column, a loop in C over a list."""
    if isinstance(names, pl.Series):
        return names.eq(name).arg_true().to_list()
    return list(compress(range(len(names)), map(name.__eq__, names)))


def _concrete_list(raw: msgspec.Raw, index: int) -> str | None:
    """The `index`-th concrete input when it is a list of integers (`"[1, 3]"`), else None."""
    try:
        inputs = msgspec.json.decode(raw, type=list[str]) if raw else []
    except msgspec.DecodeError:
        return None
    text = inputs[index].strip() if index < len(inputs) else ""
    return text if re.fullmatch(r"\[\s*(?:-?\d+\s*,\s*)*-?\d*\s*\]", text) and text != "[]" else None
