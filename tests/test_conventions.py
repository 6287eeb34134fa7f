"""One bytes and busbw convention (nccl-tests', SPEC 3) computed in one place, for kernels and priced calls;
`--alpha 0` accepted; the size limits of the house style (DEVELOPERS.md, "Style"): no module of the installed
package past `MODULE_LINES_MAX` lines, no function past `FUNCTION_LINES_MAX`."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
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


ROOT = Path(__file__).resolve().parents[1]
PACKAGE_FOLDERS = ("traceview", "parsers", "reports")
"""The installed package's source folders (pyproject's `package-dir`)."""
MODULE_LINES_MAX = 400
FUNCTION_LINES_MAX = 60
"""From the `def` line to the function's last line, its docstring included (decorators not counted)."""


def _package_modules() -> list[Path]:
    return sorted(path for folder in PACKAGE_FOLDERS for path in (ROOT / folder).rglob("*.py"))


def _long_functions(source: str, limit: int = FUNCTION_LINES_MAX) -> list[tuple[str, int]]:
    """(name, lines) of every function or method of `source` longer than `limit` lines."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > limit:
                found.append((node.name, lines))
    return found


def test_the_function_measure_counts_from_def_to_the_last_line() -> None:
    body = "    total = 0\n" * 58
    fits = f'def fits():\n    """Doc."""\n{body}'  # 1 + 1 + 58 = 60 lines
    too_long = f"@decorated\ndef too_long():\n    pass\n{body}    return total\n"  # 61, decorator not counted
    assert _long_functions(fits) == []
    assert _long_functions(too_long) == [("too_long", 1 + 1 + 58 + 1)]
    method = "class C:\n" + textwrap.indent(fits, "    ")
    assert _long_functions(method, limit=59) == [("fits", 60)]


def test_package_modules_stay_under_the_line_limit() -> None:
    modules = _package_modules()
    assert len(modules) > 100  # the folders were found
    long = {
        str(path.relative_to(ROOT)): lines
        for path in modules
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MODULE_LINES_MAX
    }
    assert long == {}, f"modules past {MODULE_LINES_MAX} lines: split them into cohesive private modules"


def test_package_functions_stay_under_the_line_limit() -> None:
    long = {
        f"{path.relative_to(ROOT)}:{name}": lines
        for path in _package_modules()
        for name, lines in _long_functions(path.read_text(encoding="utf-8"))
    }
    assert long == {}, f"functions past {FUNCTION_LINES_MAX} lines: shorten them"
