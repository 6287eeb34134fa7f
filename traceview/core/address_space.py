"""An address-space limit (`ulimit -v`, RLIMIT_AS) read at start, before polars is imported (docs/metrics.md,
"Input limits"): below `MIN_ADDRESS_SPACE_BYTES` the command cannot run at all and says so in one line
(exit 2); above it, the threads that reserve address space without using it are capped to fit: polars' thread
pool (`POLARS_MAX_THREADS`, each thread's stack and allocator arena), the arenas of polars' allocator
(jemalloc: one arena, no background thread) and of the C library (glibc: one arena, where each thread's
would reserve 64 MiB). Without a limit nothing changes. A setting the user made in the environment is kept.

The open-files limit (`ulimit -n`, RLIMIT_NOFILE) is read at the same time: a soft limit below
`WANTED_OPEN_FILES` is raised toward the hard one (any process may), and a hard limit below `MIN_OPEN_FILES`
is one line (exit 2): under it polars' runtime cannot start (a panic) and the workers' pipes cannot open.

Nothing here imports polars or anything that does: the caps only hold when set before it is first imported.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource

MIB = 1 << 20
MIN_ADDRESS_SPACE_BYTES = 320 * MIB
"""Measured: the least address space in which `traceview summary` of a small run completes once capped
(the interpreter, polars and the analyses' libraries mapped: about 200 MiB; the rest is the analysis')."""
BYTES_PER_THREAD = 64 * MIB
"""Address space one more polars thread may take (its stack, its share of the allocators' reservations)."""
BASE_BYTES = 256 * MIB
"""Address space taken before any polars thread works (the libraries mapped, the first arena)."""
JEMALLOC_CONF = "narenas:1,background_thread:false"
"""polars' jemalloc (prefixed `_rjem_`): one arena, no background purging thread."""
GLIBC_ARENA_MAX = -8  # mallopt's M_ARENA_MAX


MIN_OPEN_FILES = 16
"""Measured: `summary` of 8 ranks with 2 workers runs from 9 open files; polars' runtime panics at 7."""
WANTED_OPEN_FILES = 1024


class AddressSpaceTooSmall(Exception):
    """The address-space or open-files limit is below the least the command needs (exit 2, one line)."""


def fit_open_files() -> None:
    """Raise a soft open-files limit below `WANTED_OPEN_FILES` toward the hard limit; raises
    `AddressSpaceTooSmall` with its one line when the hard limit itself is below it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= WANTED_OPEN_FILES:
        return
    if hard != resource.RLIM_INFINITY and hard < MIN_OPEN_FILES:
        raise AddressSpaceTooSmall(
            f"the open-files limit (ulimit -n) is {hard}, below the {MIN_OPEN_FILES} traceview needs: "
            "raise it"
        )
    wanted = WANTED_OPEN_FILES if hard == resource.RLIM_INFINITY else min(hard, WANTED_OPEN_FILES)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def address_space_limit() -> int | None:
    """The soft RLIMIT_AS in bytes, None when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft


def threads_that_fit(limit: int, cores: int) -> int:
    """polars threads that fit under `limit` bytes of address space, at least 1 and at most `cores`."""
    return max(1, min(cores, (limit - BASE_BYTES) // BYTES_PER_THREAD))


def fit_address_space(environ: dict[str, str] | None = None) -> int | None:
    """Read the limit and fit under it (see the module docstring); returns the limit (None: unlimited).
    Raises `AddressSpaceTooSmall` with its one line when the limit is below the minimum."""
    environ = os.environ if environ is None else environ  # type: ignore[assignment]
    assert environ is not None
    limit = address_space_limit()
    if limit is None:
        return None
    if limit < MIN_ADDRESS_SPACE_BYTES:
        need = MIN_ADDRESS_SPACE_BYTES // MIB
        raise AddressSpaceTooSmall(
            f"the address-space limit (ulimit -v) is {limit // MIB} MiB, below the {need} MiB traceview "
            'needs: raise it (docs/metrics.md, "Input limits")'
        )
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    environ.setdefault("POLARS_MAX_THREADS", str(threads_that_fit(limit, cores)))
    stated = environ.get("_RJEM_MALLOC_CONF", "")
    if "narenas" not in stated:  # polars itself states decay times here: kept, ours added
        environ["_RJEM_MALLOC_CONF"] = f"{stated},{JEMALLOC_CONF}" if stated else JEMALLOC_CONF
    environ.setdefault("MALLOC_ARENA_MAX", "1")  # for the worker processes, read at their start
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to cap
        ctypes.CDLL(None).mallopt(GLIBC_ARENA_MAX, 1)
    return limit


def fitted_threads(threads: int) -> int:
    """`threads` polars threads for a worker process, fewer when they would not fit under the limit."""
    limit = address_space_limit()
    return threads if limit is None else min(threads, threads_that_fit(limit, threads))


def limit_text() -> str:
    """The address-space limit in words, for a line about memory ("" when unlimited)."""
    limit = address_space_limit()
    return "" if limit is None else f"the address-space limit (ulimit -v) of {limit // MIB} MiB"
