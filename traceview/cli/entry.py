"""The `traceview` console script: an interrupt while the program is still importing (the first few hundred
milliseconds) ends it with one line and exit 130, like one at any later time (`traceview.cli.main`)."""

from __future__ import annotations

import os
import sys


def main() -> None:
    """Import the command line, then run it; Ctrl-C during the import: `traceview: interrupted`, exit 130."""
    try:
        from traceview.cli.main import main as run
    except KeyboardInterrupt:
        if sys.stderr is not None:
            sys.stderr.write("traceview: interrupted\n")
            sys.stderr.flush()
        os._exit(130)
    run()
