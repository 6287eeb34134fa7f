"""The load progress bar: silent off a terminal or with --quiet, counting ranks and MB/s on one."""

from __future__ import annotations

import io

from rich.console import Console

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
