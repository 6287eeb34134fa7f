"""The cores a run may use (`traceview.core.cores`): the affinity mask and the cgroups' CPU quotas, each
written as the kernel writes it, in a folder standing for /sys/fs/cgroup."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from traceview.core.cores import usable_cores
from traceview.map import executors


@pytest.fixture
def eight_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """An affinity mask of eight CPUs, whatever this machine has."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def _cores(tmp_path: Path, cgroups: str, files: dict[str, str]) -> int:
    root = tmp_path / "cgroup"
    root.mkdir()
    _write(root, files)
    (tmp_path / "self_cgroup").write_text(cgroups)
    return usable_cores(root, tmp_path / "self_cgroup")


@pytest.mark.usefixtures("eight_cpus")
@pytest.mark.parametrize(
    ("cgroups", "files", "expected"),
    [
        ("0::/\n", {"cpu.max": "200000 100000\n"}, 200000 // 100000),
        ("0::/\n", {"cpu.max": "max 100000\n"}, 8),
        ("0::/\n", {"cpu.max": "150000 100000\n"}, 150000 // 100000),  # whole cores: 1.5 is one
        ("0::/\n", {"cpu.max": "50000 100000\n"}, 1),  # half a core: at least one
        ("0::/\n", {"cpu.max": "12 cores\n"}, 8),  # unreadable: no quota
        ("0::/\n", {"cpu.max": "100000 0\n"}, 8),  # a period of zero: no quota
        ("0::/\n", {}, 8),
        # nested: the least quota on the way up, a level without one ignored
        (
            "0::/job/step\n",
            {"job/step/cpu.max": "max 100000\n", "job/cpu.max": "300000 100000\n", "cpu.max": "max 100000\n"},
            300000 // 100000,
        ),
        ("0::/job/step\n", {"job/step/cpu.max": "400000 100000\n", "job/cpu.max": "600000 100000\n"}, 4),
        # v1: a container's cgroup named by the host's path, the container's own mounted at the root
        (
            "4:cpu,cpuacct:/docker/0123abcd\n3:memory:/docker/0123abcd\n",
            {"cpu,cpuacct/cpu.cfs_quota_us": "400000\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"},
            400000 // 100000,
        ),
        ("1:cpu:/\n", {"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, 8),
        (
            "1:cpu:/\n",
            {"cpu/cpu.cfs_quota_us": "250000\n", "cpu/cpu.cfs_period_us": "50000\n"},
            250000 // 50000,
        ),
        ("3:memory:/\n", {"memory/cpu.cfs_quota_us": "100000\n", "memory/cpu.cfs_period_us": "100000\n"}, 8),
        ("not a cgroup line\n", {"cpu.max": "100000 100000\n"}, 8),
    ],
)
def test_quotas(tmp_path: Path, cgroups: str, files: dict[str, str], expected: int) -> None:
    assert _cores(tmp_path, cgroups, files) == expected


def test_affinity_below_the_quota(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 5, 9}, raising=False)
    assert _cores(tmp_path, "0::/\n", {"cpu.max": "400000 100000\n"}) == 3


def test_without_affinity_or_cgroups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A system without affinity masks (macOS) counts the machine's CPUs; no cgroup list: no quota."""
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert usable_cores(tmp_path, tmp_path / "missing") == 6


def test_this_machine() -> None:
    """Here: at least one core, no more than the machine has, and within the process's own mask."""
    found = usable_cores()
    assert 1 <= found <= (os.cpu_count() or 1)
    if hasattr(os, "sched_getaffinity"):
        assert found <= len(os.sched_getaffinity(0))


def test_the_map_sizes_from_the_usable_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers and their threads: from the cores this process may use, not from the machine's count."""
    monkeypatch.setattr(executors, "usable_cores", lambda: 4)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert executors.worker_threads(2) == 4 // 2
    assert executors.worker_threads(8) == 1
    pools: list[int] = []
    monkeypatch.setattr(executors, "_pooled", lambda batches, count: pools.append(count) or [])
    tasks = [executors.MapTask(f"rank{i}") for i in range(10)]
    list(executors._local(tasks, ([1] * len(tasks),) * 2, None, parallel_min_bytes=0))
    list(executors._local(tasks[:3], ([1] * 3,) * 2, None, parallel_min_bytes=0))
    list(executors._local(tasks, ([1] * len(tasks),) * 2, 6, parallel_min_bytes=0))  # asked for: as asked
    assert pools == [4, 3, 6]


def test_many_small_files_are_worth_a_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small runs stay in this process; many small files go to a pool of several workers, their fixed cost
    counted (`FILE_COST_BYTES`); one worker is a pool only for a large input; `parallel_min_bytes` decides."""
    pools: list[int] = []
    monkeypatch.setattr(executors, "_pooled", lambda batches, count: pools.append(count) or [])
    monkeypatch.setattr(executors, "summarize_files", lambda batch: [])
    minimum = executors.PARALLEL_MIN_BYTES
    per_file = executors.FILE_COST_BYTES + 9_000
    many = -(-minimum // per_file)  # the fewest 9 KB files worth a pool

    def pooled(files: int, cores: int, parallel_min_bytes: int = minimum) -> bool:
        monkeypatch.setattr(executors, "usable_cores", lambda: cores)
        tasks = [executors.MapTask(f"rank{i}") for i in range(files)]
        before = len(pools)
        list(executors._local(tasks, ([9_000] * files,) * 2, None, parallel_min_bytes))
        return len(pools) > before

    assert not pooled(many - 1, cores=2)
    assert pooled(many, cores=2)
    assert not pooled(many, cores=1)  # one worker: not for small files
    assert pooled(minimum // 9_000 + 1, cores=1)  # but for a large input
    assert not pooled(4096, cores=16, parallel_min_bytes=1 << 62)
    assert pooled(2, cores=2, parallel_min_bytes=0)
