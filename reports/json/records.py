"""Frames and floats as JSON values: a frame as row objects, a float that is not finite as null."""

from __future__ import annotations

import math
from typing import Any

import polars as pl


def records(frame: pl.DataFrame) -> list[dict[str, Any]]:
    """A frame as a list of row objects, non-finite floats as null."""
    return [{k: clean(v) for k, v in row.items()} for row in frame.to_dicts()]


def clean(value: Any) -> Any:
    """None for a float that is not finite (NaN, inf); the value otherwise."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
