"""Frames as JSON rows (`traceview.reports.json.records`): every value as it is, a float that is not finite
(NaN, inf, -inf) as null, in float columns of either width; other columns and nested values untouched."""

from __future__ import annotations

import math

import polars as pl
from traceview.reports.json.records import clean, records


def test_non_finite_floats_become_null_and_nothing_else_changes() -> None:
    frame = pl.DataFrame(
        {
            "rank": [0, 1, 2, 3],
            "idle_us": [1.5, math.nan, math.inf, None],
            "ratio": pl.Series([-math.inf, 0.25, 2.0, 3.0], dtype=pl.Float32),
            "name": ["a", None, "nan", "c"],
            "samples": [[1.0, math.nan], [], None, [2.0]],
        }
    )
    rows = records(frame)
    assert [row["idle_us"] for row in rows] == [1.5, None, None, None]
    assert [row["ratio"] for row in rows] == [None, 0.25, 2.0, 3.0]
    assert [row["rank"] for row in rows] == [0, 1, 2, 3]
    assert [row["name"] for row in rows] == ["a", None, "nan", "c"]
    assert rows[0]["samples"][0] == 1.0
    assert math.isnan(rows[0]["samples"][1])  # nested: left as it is
    assert list(rows[0]) == frame.columns
    reference = [{k: clean(v) for k, v in row.items()} for row in frame.drop("samples").to_dicts()]
    assert [{k: v for k, v in row.items() if k != "samples"} for row in rows] == reference


def test_a_frame_without_rows_or_floats() -> None:
    assert records(pl.DataFrame(schema={"x": pl.Float64})) == []
    assert records(pl.DataFrame({"n": [1, 2]})) == [{"n": 1}, {"n": 2}]
