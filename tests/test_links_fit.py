"""The least squares of "Links measured" (docs/metrics.md): alpha constrained non-negative, B reported
when its 95% interval lies within +-25% whatever the number of calls, alpha only where small calls see it;
checked on hand-made samples and on the real 2-rank gloo job against a plain-Python least squares read
straight from the trace files (no traceview code)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.shared_data import REAL_KINETO, requires_shared
from traceview.api import analyze
from traceview.links_measured.analysis import class_table
from traceview.links_measured.fit import line_fits

KEYS = ["collective", "group_size", "link", "scope", "protocol"]


def _samples(x: list[float], y: list[float], k: float = 2.0) -> pl.DataFrame:
    n = len(x)
    return pl.DataFrame(
        {
            "collective": ["AllReduce"] * n,
            "group_size": [2] * n,
            "link": ["l"] * n,
            "scope": ["intra"] * n,
            "protocol": ["unknown"] * n,
            "k": [k] * n,
            "x": x,
            "y": y,
            "size_bytes": [int(v) for v in x],
            "alpha_s": [None] * n,
            "bandwidth_Bps": [None] * n,
        },
        schema_overrides={"alpha_s": pl.Float64, "bandwidth_Bps": pl.Float64},
    )


def test_a_negative_intercept_refits_through_the_origin() -> None:
    x = [1e6, 2e6, 3e6, 4e6]
    y = [0.0009, 0.0020, 0.0031, 0.0042]  # free fit: slope 1.1e-9, intercept 2.55e-3 - 2.75e-3 < 0
    row = line_fits(_samples(x, y), KEYS).row(0, named=True)
    assert row["constrained"]
    assert row["intercept"] == 0.0
    assert row["intercept_lo"] == 0.0
    sxy = sum(a * b for a, b in zip(x, y, strict=True))
    sxx = sum(a * a for a in x)
    assert row["slope"] == pytest.approx(sxy / sxx)  # b alone: sum(xy) / sum(x^2)


def test_four_tight_calls_are_fitted_and_a_loose_class_is_not() -> None:
    x = [1e3, 1e6, 2e6, 4e6]
    bandwidth, alpha = 1e9, 5e-6
    tight = [2 * alpha + v / bandwidth * (1 + e) for v, e in zip(x, (0.0, 0.01, -0.01, 0.005), strict=True)]
    row = class_table(_samples(x, tight)).row(0, named=True)
    assert row["fitted"], row["reason"]
    assert row["calls"] == 4
    assert row["bandwidth_Bps"] == pytest.approx(bandwidth, rel=0.05)
    assert row["bandwidth_lo_Bps"] >= 0.75 * row["bandwidth_Bps"]
    assert row["bandwidth_hi_Bps"] <= 1.25 * row["bandwidth_Bps"]
    assert row["alpha_determined"]  # the 1 kB call: its transfer term 1 us is below k alpha
    loose = [v / bandwidth * (1 + e) for v, e in zip(x, (0.0, 0.6, -0.5, 0.4), strict=True)]
    row = class_table(_samples(x, loose)).row(0, named=True)
    assert not row["fitted"]
    assert "wider than +-25%" in row["reason"]
    assert row["r2"] is not None


def _gloo_transfers(folder: Path) -> tuple[list[float], list[float]]:
    """(bytes, seconds) of every all-reduce: the members paired by step and order, the shorter duration."""
    per_rank: list[dict[str, list[tuple[float, float, int]]]] = []
    for rank in (0, 1):
        with gzip.open(folder / f"gloo_rank{rank}.json.gz") as handle:
            events: list[dict[str, Any]] = json.load(handle)["traceEvents"]
        steps = [
            (e["ts"], e["ts"] + e["dur"], e["name"])
            for e in events
            if e.get("name", "").startswith("ProfilerStep#") and e.get("cat") == "user_annotation"
        ]
        calls = sorted(
            (e["ts"], e["dur"], e["args"]["Input Dims"][0][0] * 4)
            for e in events
            if e.get("name") == "gloo:all_reduce" and "Input Dims" in e["args"]
        )
        per_rank.append({name: [c for c in calls if start <= c[0] < end] for start, end, name in steps})
    sizes, seconds = [], []
    for step, mine in per_rank[0].items():
        for a, b in zip(mine, per_rank[1][step], strict=True):
            sizes.append(float(a[2]))
            seconds.append(min(a[1], b[1]) * 1e-6)
    return sizes, seconds


@requires_shared
def test_the_gloo_job_fit_against_plain_least_squares() -> None:
    folder = REAL_KINETO / "h200_pt211_gloo_dp2"
    x, y = _gloo_transfers(folder)  # an all-reduce over 2 ranks: f = 1, k = 2
    n = len(x)
    mx, my = sum(x) / n, sum(y) / n
    sxx = sum((a - mx) ** 2 for a in x)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    syy = sum((b - my) ** 2 for b in y)
    slope = sxy / sxx
    intercept = my - slope * mx
    s2 = (syy - slope * sxy) / (n - 2)
    t = 2.005  # Student's t(0.975, 54)
    slope_half = t * (s2 / sxx) ** 0.5
    intercept_half = t * (s2 * (1 / n + mx * mx / sxx)) ** 0.5
    analysis = analyze(folder, workers=1).raw
    assert analysis.links_measured is not None
    row = analysis.links_measured.classes.row(0, named=True)
    assert n == 56
    assert row["calls"] == n
    assert row["fitted"], row["reason"]
    assert row["bandwidth_Bps"] == pytest.approx(1 / slope, rel=1e-6)
    assert row["bandwidth_lo_Bps"] == pytest.approx(1 / (slope + slope_half), rel=1e-3)
    assert row["bandwidth_hi_Bps"] == pytest.approx(1 / (slope - slope_half), rel=1e-3)
    assert row["r2"] == pytest.approx(1 - (syy - slope * sxy) / syy, rel=1e-6)
    # the 33 MB calls' transfer term outweighs the latency's bound: alpha is only bounded
    assert min(x) * slope > intercept + intercept_half
    assert row["alpha_us"] is None
    assert row["alpha_hi_us"] == pytest.approx((intercept + intercept_half) / 2 * 1e6, rel=1e-3)
    assert "alpha undetermined at these sizes" in row["alpha_note"]
    scope = analysis.links_measured.scopes.row(0, named=True)
    assert (scope["scope"], scope["fitted"]) == ("host", True)
    assert scope["bandwidth_Bps"] == pytest.approx(1 / slope, rel=1e-6)  # one class: the pooled fit is it
    assert scope["r2"] == pytest.approx(row["r2"], rel=1e-6)
    assert analysis.prediction is not None
    host = analysis.prediction.inputs.host_link
    assert host is not None
    assert (host.source, host.bandwidth_Bps) == ("measured", pytest.approx(1 / slope, rel=1e-6))
    assert analysis.prediction.sentence.startswith("The link of host collectives inside a host")
