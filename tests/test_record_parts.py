"""The recorder's torch-free half: settings through the environment, per-rank parts merged into one run.json,
and `traceview record` around commands that record nothing or fail."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec

from traceview.options.manifest import (
    ManifestGroup,
    ManifestLog,
    ManifestModel,
    ManifestTrace,
    ManifestVersions,
    RunManifest,
    load_manifest,
)
from traceview.record.parts import (
    RecordSettings,
    merge_parts,
    nccl_log_name,
    settings_env,
    settings_from_env,
    write_part,
)


def test_settings_survive_the_environment() -> None:
    settings = RecordSettings(
        wait=2, warmup=0, active=5, record_shapes=False, local_batch=8.0, nic="ib_ndr", step_on="train:step"
    )
    assert settings_from_env(settings_env(settings)) == settings
    assert settings_from_env({}) == RecordSettings()


def _part(rank: int, host: str, pid: int) -> RunManifest:
    return RunManifest(
        backend="gloo",
        world_size=4,
        traces=[ManifestTrace(rank=rank, path=f"rank{rank}.pt.trace.json.gz", host=host)],
        nccl_logs=[ManifestLog(path=nccl_log_name(host, pid), rank=rank, host=host)],
        process_groups=[ManifestGroup(name="0", ranks=[0, 1, 2, 3]), ManifestGroup(name=str(10 + rank % 2))],
        devices=[f"dev{rank % 2}"],
        versions=ManifestVersions(torch="2.13.0" if rank == 0 else None, python="3.11"),
        model=ManifestModel(local_batch=4.0 if rank == 2 else None),
    )


def test_parts_merge_into_one_manifest(tmp_path: Path) -> None:
    hosts = {0: "a.cluster", 1: "a.cluster", 2: "a.cluster", 3: "b"}
    for rank in (3, 1, 0, 2):  # written in any order
        write_part(tmp_path, rank, _part(rank, hosts[rank], 100 + rank))
    (tmp_path / nccl_log_name("a.cluster", 101)).write_text("NCCL INFO\n", encoding="utf-8")
    merged = load_manifest(merge_parts(tmp_path) or tmp_path / "missing")
    assert [t.rank for t in merged.traces] == [0, 1, 2, 3]
    assert merged.ranks_per_host == 3  # three ranks on host a
    assert [log.path for log in merged.nccl_logs] == ["nccl.a.101.log"]  # only the log NCCL wrote
    assert [g.name for g in merged.process_groups] == ["0", "10", "11"]
    assert merged.devices == ["dev0", "dev1"]
    assert (merged.versions.torch, merged.model.local_batch) == ("2.13.0", 4.0)
    assert (merged.world_size, merged.backend) == (4, "gloo")


def test_no_parts_no_manifest(tmp_path: Path) -> None:
    assert merge_parts(tmp_path) is None
    assert not (tmp_path / "run.json").exists()


def _record(folder: Path, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "traceview", "record", "-o", str(folder), "--", *command],
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_command_that_records_nothing_is_a_one_line_error(tmp_path: Path) -> None:
    done = _record(tmp_path / "run", sys.executable, "-c", "pass")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "no rank recorded anything" in done.stderr
    assert "--step-on" in done.stderr  # it says what to do


def test_a_failing_command_that_recorded_nothing_keeps_its_code(tmp_path: Path) -> None:
    done = _record(tmp_path / "run", sys.executable, "-c", "raise SystemExit(5)")
    assert done.returncode == 5
    assert "no rank recorded anything" in done.stderr
    assert "exited with code 5" in done.stderr


def test_parts_state_their_sources_and_the_ranks_that_are_missing(tmp_path: Path) -> None:
    for rank in (0, 2):  # of a world of 4
        part = _part(rank, "h", rank)
        sources = {"model.local_batch": f"measured on rank {rank}", **({"devices": "d"} if rank else {})}
        write_part(tmp_path, rank, msgspec.structs.replace(part, sources=sources))
    merged = load_manifest(merge_parts(tmp_path) or tmp_path / "missing")
    assert merged.sources == {"devices": "d", "model.local_batch": "measured on rank 0"}
    assert "2 of 4 ranks recorded no trace: 1, 3" in merged.notes


def test_a_failing_command_is_said_after_the_manifest_is_written_and_its_code_kept(tmp_path: Path) -> None:
    code = 3
    part = _part(0, "h", 1)
    script = (
        "import os, sys; from traceview.record.parts import write_part; "
        "from traceview.options.manifest import *; "
        f"write_part(__import__('pathlib').Path(os.environ['TRACEVIEW_RUN_DIR']), 0, RunManifest("
        f"traces=[ManifestTrace(rank=0, path='{part.traces[0].path}')])); sys.exit({code})"
    )
    done = _record(tmp_path / "run", sys.executable, "-c", script)
    assert done.returncode == code
    assert f"exited with code {code}" in done.stderr
    assert [t.rank for t in load_manifest(tmp_path / "run" / "run.json").traces] == [0]


def test_a_folder_with_a_run_is_refused(tmp_path: Path) -> None:
    write_part(tmp_path, 0, _part(0, "h", 1))
    done = _record(tmp_path, sys.executable, "-c", "pass")
    assert done.returncode == 2
    assert "holds a recorded run already" in done.stderr


def test_nothing_imports_torch_until_a_profile_starts() -> None:
    probe = (
        "import sys, traceview, traceview.cli.main, traceview.record.profile; traceview.profile; assert "
        "'torch' not in sys.modules"
    )
    assert subprocess.run([sys.executable, "-c", probe], check=False).returncode == 0
