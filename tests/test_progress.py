"""The load progress bar: silent off a terminal or with --quiet, counting ranks and MB/s on one."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from traceview.cli.streams import may_be_terminal
from traceview.map.progress import load_progress


def test_silent_when_not_a_terminal_or_quiet() -> None:
    piped = Console(file=io.StringIO(), force_terminal=False)
    with load_progress(piped) as callback:
        assert callback is None
    terminal = Console(file=io.StringIO(), force_terminal=True)
    with load_progress(terminal, quiet=True) as callback:
        assert callback is None


def test_counts_ranks_and_rate_on_a_terminal() -> None:
    out = io.StringIO()
    terminal = Console(file=out, force_terminal=True, width=100)
    with load_progress(terminal) as callback:
        assert callback is not None
        callback(3, 8, 3_000_000)
        callback(8, 8, 8_000_000)
    assert "8/8" in out.getvalue()
    assert "MB/s" in out.getvalue()


def test_no_console_is_silent() -> None:
    with load_progress(None) as callback:
        assert callback is None


def test_a_pipe_may_not_be_a_terminal_unless_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    piped = io.StringIO()
    for name in ("TTY_COMPATIBLE", "FORCE_COLOR", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)
    assert not may_be_terminal(piped)
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert may_be_terminal(piped)
    monkeypatch.setenv("NO_COLOR", "1")  # wins: the console is then a terminal only on a tty
    assert not may_be_terminal(piped)
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    assert not may_be_terminal(piped)
    monkeypatch.delenv("NO_COLOR")
    assert may_be_terminal(piped)


def test_summary_json_to_a_pipe_imports_no_rich(tmp_path: Path) -> None:
    trace = Path(__file__).resolve().parents[1] / "sample_traces"
    script = (
        "import sys, runpy; sys.argv = ['traceview', 'summary', sys.argv[1], '--json']\n"
        "try:\n    runpy.run_module('traceview', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "sys.stderr.write(str(any(m.startswith('rich') for m in sys.modules)))"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    command = [sys.executable, "-c", script, str(trace / "dp8_straggler")]
    done = subprocess.run(command, check=False, capture_output=True, text=True, env=env)
    assert done.stderr.endswith("False"), done.stderr[-500:]
