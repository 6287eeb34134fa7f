"""Split sizes of the all-to-alls no `record_param_comms` describes (gloo): `c10d::alltoall_base_`'s `Concrete
Inputs` (docs/metrics.md, "MoE balance")."""

from __future__ import annotations

import re
from typing import Any

import msgspec
from traceview.parsers.kineto._schema import Args

Column = list[Any]

ALLTOALL_BASE = "c10d::alltoall_base_"
"""The op whose `Concrete Inputs` name its split sizes: (output, input, group, output_split_sizes,
input_split_sizes, ...); where no `record_param_comms` says them (gloo), they are its `In/Out split size`."""
_SPLIT_ARGS = {"in_split": 4, "out_split": 3}


def alltoall_splits(data: dict[str, Any], args: list[Args]) -> dict[str, Column]:
    """`in_split`/`out_split` with the split sizes of every `ALLTOALL_BASE` row that has none from its comm
    args, read from its `Concrete Inputs` (a row without them, or with a malformed list, keeps null)."""
    names = data["name"]
    found: dict[str, Column] = {}
    for column, index in _SPLIT_ARGS.items():
        given = data.get(column)
        values = [None] * len(names) if given is None else list(given)
        for row, name in enumerate(names):
            if name == ALLTOALL_BASE and values[row] is None:
                values[row] = _concrete_list(args[row].concrete_inputs, index)
        found[column] = values
    return found


def _concrete_list(raw: msgspec.Raw, index: int) -> str | None:
    """The `index`-th concrete input when it is a list of integers (`"[1, 3]"`), else None."""
    try:
        inputs = msgspec.json.decode(raw, type=list[str]) if raw else []
    except msgspec.DecodeError:
        return None
    text = inputs[index].strip() if index < len(inputs) else ""
    return text if re.fullmatch(r"\[\s*(?:-?\d+\s*,\s*)*-?\d*\s*\]", text) and text != "[]" else None
