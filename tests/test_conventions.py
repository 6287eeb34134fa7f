"""One bytes and busbw convention (nccl-tests', SPEC 3) computed in one place, for kernels and priced calls;
`--alpha 0` accepted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.simulate.engine import write_run
from tests.simulate.scenario import data_parallel_scenario
from traceview.core.costmodel import bandwidth_exprs
from traceview.core.errors import UsageError
from traceview.load.inputs import load_run
from traceview.options.model import parse_pair
from traceview.reduce.analysis import analyze


def _bandwidths(
    rows: list[tuple[str, int | None, int | None, float]],
) -> list[tuple[float | None, float | None]]:
    frame = pl.DataFrame(
        rows, schema={"collective": pl.Utf8, "n": pl.Int64, "S": pl.Int64, "t": pl.Float64}, orient="row"
    )
    algbw, busbw = bandwidth_exprs(pl.col("collective"), pl.col("n"), pl.col("S"), pl.col("t"))
    return list(frame.select(algbw.alias("a"), busbw.alias("b")).iter_rows())


def test_bandwidths_follow_nccl_tests_by_hand() -> None:
    found = _bandwidths(
        [
            ("AllGather", 4, 4_000_000, 100.0),  # S = the gathered output of 4 x 1 MB
            ("AllReduce", 8, 1_000_000, 50.0),
            ("Broadcast", None, 1000, 10.0),  # f = 1 whatever n
            ("AllReduce", None, 1000, 10.0),  # f(n) needs n
            ("SendRecv", 2, 1000, 0.0),  # no duration
        ]
    )
    assert found[0] == pytest.approx((4e6 / 100e-6, 4e6 / 100e-6 * 3 / 4))
    assert found[1] == pytest.approx((1e6 / 50e-6, 1e6 / 50e-6 * 2 * 7 / 8))
    assert found[2] == pytest.approx((1000 / 10e-6, 1000 / 10e-6))
    assert found[3][0] == pytest.approx(1000 / 10e-6)
    assert found[3][1] is None
    assert found[4] == (None, None)


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 workers, 2 buckets of 1e6 bf16 gradients, B = 20 GB/s, alpha = 0: each all-reduce is f S / B."""
    folder = tmp_path_factory.mktemp("conv")
    write_run(data_parallel_scenario(4, 2_000_000, 16, 50e12, 20e9, buckets=2, steps=2), folder)
    return folder


def test_kernels_and_priced_calls_report_the_same_busbw(simulated: Path) -> None:
    result = analyze(load_run(str(simulated), workers=1))
    assert result.collectives is not None
    assert result.prediction is not None
    kernels = result.collectives.kernels.select("rank", "start_us", "busbw_Bps").sort("rank", "start_us")
    calls = result.prediction.calls.select("rank", "start_us", "busbw_Bps").sort("rank", "start_us")
    assert kernels.height == calls.height == 4 * 2 * 2  # one kernel per call: ranks x steps x buckets
    assert kernels["busbw_Bps"].to_list() == pytest.approx(calls["busbw_Bps"].to_list(), rel=1e-12)
    # the simulator times each call f(n) S / B exactly, so busbw = B
    assert calls["busbw_Bps"].to_list() == pytest.approx([20e9] * calls.height, rel=1e-6)


def test_alpha_zero_is_a_latency_and_zero_bandwidth_is_not() -> None:
    assert parse_pair("0", "--alpha", 1e-6, zero_ok=True) == (0.0, None)
    assert parse_pair("0,5", "--alpha", 1e-6, zero_ok=True) == pytest.approx((0.0, 5e-6))
    with pytest.raises(UsageError, match="non-negative"):
        parse_pair("-1", "--alpha", 1e-6, zero_ok=True)
    with pytest.raises(UsageError, match="positive"):
        parse_pair("0", "--bandwidth")


def test_cli_accepts_alpha_zero(simulated: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "traceview", "summary", str(simulated), "--json", "--quiet", "--alpha", "0,0"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assumptions = json.loads(done.stdout)["prediction"]["assumptions"]
    alphas = {a["name"]: (a["value"], a["source"]) for a in assumptions if a["name"].startswith("alpha")}
    assert alphas == {
        "alpha inside a node": (0.0, "command line"),
        "alpha across nodes": (0.0, "command line"),
    }
