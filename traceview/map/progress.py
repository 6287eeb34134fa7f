"""The progress bar of long loads on stderr: ranks done, MB/s read, time left. Silent when stderr is not a
terminal or the user asked for quiet (`--quiet`); rich's progress module is imported only when the bar is
drawn."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from traceview.map.executors import Progress as ProgressCallback

if TYPE_CHECKING:
    from rich.console import Console


@contextmanager
def load_progress(console: Console | None, quiet: bool = False) -> Iterator[ProgressCallback | None]:
    """A callback `(ranks done, ranks in all, bytes done)` drawing the bar, or None when silent (no console,
    or one that is not a terminal)."""
    if console is None or quiet or not console.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

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
