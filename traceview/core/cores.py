"""The CPU cores this process may use, which on a cluster node is rarely the machine's count.

`os.cpu_count()` counts the machine's CPUs. A job is usually given fewer: an affinity mask (`taskset`,
Slurm's and Kubernetes' cpusets, `docker --cpuset-cpus`) or a CPU quota of its cgroup (`docker --cpus`,
Kubernetes CPU limits). A map sized from the machine's count would start more workers, and give each more
polars threads, than the cores it can run on. `usable_cores` is the least of the affinity mask and of every
quota on the way from the process's cgroup to the root, whole cores (a quota of 1.5 CPUs is one core), at
least one: the rule polars itself follows for its own thread pool.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path, PurePosixPath

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROCESS_CGROUPS = Path("/proc/self/cgroup")


def _quota_v2(folder: Path) -> int | None:
    """cgroup v2 `cpu.max`: `max PERIOD` (no quota) or `QUOTA PERIOD`, in microseconds."""
    quota, period = (folder / "cpu.max").read_text().split()[:2]
    return None if quota == "max" else int(quota) // int(period)


def _quota_v1(folder: Path) -> int | None:
    """cgroup v1 `cpu.cfs_quota_us` (-1: no quota) over `cpu.cfs_period_us`."""
    quota = int((folder / "cpu.cfs_quota_us").read_text())
    return None if quota < 0 else quota // int((folder / "cpu.cfs_period_us").read_text())


QuotaReader = Callable[[Path], "int | None"]


def usable_cores(root: Path = CGROUP_ROOT, cgroups: Path = PROCESS_CGROUPS) -> int:
    """The cores this process may run on: its affinity mask and its cgroups' CPU quotas (module docstring),
    at least one. `root` and `cgroups` are where the cgroup file systems and the process's own cgroup list
    are read (a test points them at a folder of its own)."""
    quotas = [quota for quota in _quotas(root, cgroups) if quota is not None]
    return max(1, min([_affinity(), *quotas]))


def _affinity() -> int:
    """CPUs in this process's affinity mask (the machine's count where the system has no such mask)."""
    with contextlib.suppress(AttributeError, OSError):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _quotas(root: Path, cgroups: Path) -> list[int | None]:
    """The CPU quota, in whole cores, at each level of each of the process's CPU cgroups that can be read."""
    try:
        lines = cgroups.read_text().splitlines()
    except OSError:
        return []
    return [quota for line in lines for folder, read in _levels(root, line) for quota in _read(read, folder)]


def _levels(root: Path, line: str) -> list[tuple[Path, QuotaReader]]:
    """The folders of one line of /proc/self/cgroup (`ID:CONTROLLERS:PATH`) that hold a CPU quota, from the
    process's own cgroup up to the mount's root (inside a container the path may name a cgroup of the host,
    not mounted there: the levels that do not exist are not read), each with its reader."""
    fields = line.split(":", 2)
    if len(fields) != 3:
        return []
    _, controllers, path = fields
    if controllers == "":
        mounts, read = [root], _quota_v2
    elif "cpu" in controllers.split(","):
        mounts, read = [root / controllers, root / "cpu", root / "cpu,cpuacct"], _quota_v1
    else:
        return []
    relative = PurePosixPath(path or "/").relative_to("/")
    levels = [relative, *relative.parents] if relative.parts else [relative]
    return [(mount / level, read) for mount in dict.fromkeys(mounts) for level in levels]


def _read(read: QuotaReader, folder: Path) -> list[int | None]:
    """The quota `read` finds in `folder`: none where the folder or its files are missing or unreadable (a
    period of zero included)."""
    with contextlib.suppress(OSError, ValueError, ArithmeticError):
        return [read(folder)]
    return []
