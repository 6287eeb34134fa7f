"""The progress bar of long loads on stderr: ranks done, MB/s read, time left. Silent when stderr is not a
terminal or the user asked for quiet (`--quiet`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from traceview.map.executors import Progress as ProgressCallback


@contextmanager
def load_progress(console: Console, quiet: bool = False) -> Iterator[ProgressCallback | None]:
    """A callback `(ranks done, ranks in all, bytes done)` drawing the bar, or None when silent."""
    if quiet or not console.is_terminal:
        yield None
        return
    started = time.perf_counter()
    columns = (
        TextColumn("reading ranks"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("ranks", total=None, rate="")

        def update(done: int, total: int, done_bytes: int) -> None:
            elapsed = max(time.perf_counter() - started, 1e-9)
            bar.update(task, completed=done, total=total, rate=f"{done_bytes / elapsed / 1e6:.1f} MB/s")

        yield update
