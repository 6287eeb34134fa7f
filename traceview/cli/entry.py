"""The `traceview` console script: Ctrl-C is answered by one mechanism from the first moment
(`traceview.cli.interrupts`), so an interrupt while the program is still importing (the first few hundred
milliseconds) ends it with one line and exit 130, like one at any later time (`traceview.cli.main`)."""

from __future__ import annotations

from traceview.cli.interrupts import guard_interrupts, interrupted_exit


def main() -> None:
    """Import the command line, then run it; Ctrl-C at any point: `traceview: interrupted`, exit 130."""
    guard_interrupts()
    try:
        from traceview.cli.main import main as run

        run()
    except KeyboardInterrupt:
        interrupted_exit()
