"""The `traceview` console script (`traceview`, `python -m traceview`): `traceview --version` is answered
before anything else is imported; Ctrl-C is answered by one mechanism from the first moment
(`traceview.cli.interrupts`), so an interrupt while the program is still importing (the first few hundred
milliseconds) ends it with one line and exit 130, like one at any later time (`traceview.cli.main`)."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """Hold Ctrl-C back while the command line imports: an interrupt raised inside an import's callbacks
    would be printed by Python as an ignored exception; held, it arrives when the block ends, in this
    frame (threads started meanwhile inherit the mask: they never take the signal)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def main() -> None:
    """Import the command line, then run it; Ctrl-C at any point: `traceview: interrupted`, exit 130."""
    if sys.argv[1:] == ["--version"]:
        from traceview.core.version import __version__

        sys.stdout.write(f"traceview {__version__}\n")
        sys.exit(0)
    from traceview.cli.interrupts import guard_interrupts, interrupted_exit

    guard_interrupts()
    try:
        with _interrupts_held():
            from traceview.cli.main import main as run

        run()
    except KeyboardInterrupt:
        interrupted_exit()
