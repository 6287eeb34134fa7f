"""The map's Ray executor (`traceview.map.executors`, `--executor ray`): one Ray task per batch on a cluster
(`ray_address`, else `RAY_ADDRESS`, else a local Ray), a connection to a given address bounded in time.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import socket
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from traceview.core.errors import UsageError
from traceview.core.sanitize import printable

RAY_CONNECT_TIMEOUT_S = 10.0
"""How long `--ray-address HOST:PORT` may take to accept a connection before the run is refused."""


def _check_reachable(address: str | None) -> None:
    """Refuse, within `RAY_CONNECT_TIMEOUT_S`, a Ray address whose host cannot be reached (Ray itself retries
    for minutes); `auto`, `local` and addresses without a port are left to Ray."""
    host, _, port = (address or "").removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=RAY_CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise UsageError(
            f"--ray-address {printable(address)}: cannot connect within {RAY_CONNECT_TIMEOUT_S:g} s "
            f"({reason})"
        ) from None


@contextlib.contextmanager
def _connect_within(address: str, seconds: float) -> Iterator[None]:
    """Bound a connection to a Ray cluster: Ray's own messages (its retries print a line a second) are held
    back, and when it has not connected after `seconds` the command ends with one line and exit 2 (Ray retries
    inside its C++ client, where no Python exception can reach it, so the process ends from a timer)."""
    done = threading.Event()
    saved = os.dup(2)

    def give_up() -> None:
        if done.is_set():
            return
        os.dup2(saved, 2)
        line = (
            f"traceview: error: --ray-address {printable(address)}: no Ray cluster answered within "
            f"{seconds:g} s\n"
        )
        os.write(2, line.encode("utf-8", "backslashreplace"))
        os._exit(2)

    timer = threading.Timer(seconds, give_up)
    timer.daemon = True
    with open(os.devnull, "wb") as devnull:
        os.dup2(devnull.fileno(), 2)
    timer.start()
    try:
        yield
    finally:
        done.set()
        timer.cancel()
        os.dup2(saved, 2)
        os.close(saved)


def _ray_init(ray: Any, address: str | None) -> None:
    """Start or join Ray: a given address within `RAY_CONNECT_TIMEOUT_S` (one line when it cannot)."""
    settings = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.ERROR}
    if not address or address in ("auto", "local"):
        ray.init(address=address, **settings)
        return
    _check_reachable(address)
    try:
        with _connect_within(address, RAY_CONNECT_TIMEOUT_S):
            ray.init(address=address, **settings)
    except ConnectionError as exc:
        raise UsageError(f"--ray-address {printable(address)}: {printable(exc)}") from None


RAY_BATCH_SHARE = 16
"""Ray's batches are cut as for this many workers (a cluster's size is not known before it starts)."""


def ray_results(
    summarize_files: Callable[[Sequence[Any]], list[Any]],
    tasks: Sequence[Sequence[Any]],
    address: str | None,
    threads_variable: str,
) -> Iterable[Any]:
    """Each batch of `tasks` summarised (`summarize_files`) in one Ray task, the results in order."""
    try:
        ray: Any = importlib.import_module("ray")
    except ImportError as exc:
        raise UsageError("--executor ray needs Ray: pip install 'traceview[ray]'") from exc
    if not ray.is_initialized():
        _ray_init(ray, address or os.environ.get("RAY_ADDRESS"))
    threads = {"env_vars": {threads_variable: "1"}}
    remote = ray.remote(num_cpus=1, runtime_env=threads)(summarize_files)
    pending = deque(remote.remote(batch) for batch in tasks)
    try:
        while pending:  # in order: finished tasks' summaries wait in Ray's object store, let go once read
            yield from ray.get(pending[0])
            pending.popleft()
    except BaseException:  # an interrupt: the tasks still running are cancelled
        for reference in pending:
            with contextlib.suppress(Exception):
                ray.cancel(reference, force=True)
        raise
