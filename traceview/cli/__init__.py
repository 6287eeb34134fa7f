"""The `traceview` command line: one module per command (`traceview.cli.main` registers them and maps errors to
exit codes). `main` here is the console entry point: `traceview --version` is answered before anything else is
imported; every other command line goes to `traceview.cli.main.main`."""

from __future__ import annotations

import sys


def main() -> None:
    """Console entry point (`traceview`, `python -m traceview`)."""
    if sys.argv[1:] == ["--version"]:
        from traceview.core.version import __version__

        sys.stdout.write(f"traceview {__version__}\n")
        sys.exit(0)
    from traceview.cli.main import main as run

    run()
