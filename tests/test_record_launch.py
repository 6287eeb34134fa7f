"""`traceview record` around a command, without PyTorch: the start-up hook on the command's path (chained to
the environment's own sitecustomize, armed only under `traceview record`), the command's output, exit status
and signals passed through, and `traceview record-merge` of per-node folders."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from traceview.options.manifest import ManifestTrace, RunManifest, load_manifest, manifest_files
from traceview.record.launch import HOOK_DIR, hook_env
from traceview.record.parts import write_part

PROBE = (
    "import json, sys; print(json.dumps({"
    "'watching': any(type(f).__name__ == 'AfterImport' for f in sys.meta_path), "
    "'traceview': 'traceview' in sys.modules, "
    "'site': getattr(sys.modules.get('sitecustomize'), 'MARK', None)}))"
)


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)


@pytest.fixture
def own_site(tmp_path: Path) -> Path:
    """A folder with the environment's own sitecustomize: it leaves a mark."""
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text("MARK = 'theirs'\n", encoding="utf-8")
    return folder


def test_the_hook_goes_first_on_the_path_and_keeps_the_callers(own_site: Path) -> None:
    env = hook_env({"PYTHONPATH": str(own_site)})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(HOOK_DIR), str(own_site)]
    assert hook_env({})["PYTHONPATH"] == str(HOOK_DIR)
    assert [p.name for p in HOOK_DIR.iterdir() if p.suffix == ".py"] == ["sitecustomize.py"]


def test_outside_traceview_record_the_hook_only_chains(own_site: Path) -> None:
    env = {**os.environ, **hook_env({"PYTHONPATH": str(own_site)})}
    env.pop("TRACEVIEW_RECORD", None)
    seen = json.loads(_python(PROBE, env).stdout)
    assert seen == {"watching": False, "traceview": False, "site": "theirs"}


def test_armed_it_waits_for_torch_without_importing_anything(own_site: Path, tmp_path: Path) -> None:
    env = {**os.environ, **hook_env({"PYTHONPATH": str(own_site)})}
    env.update(TRACEVIEW_RECORD="1", TRACEVIEW_RUN_DIR=str(tmp_path / "run"))
    seen = json.loads(_python(PROBE, env).stdout)
    assert seen == {"watching": True, "traceview": False, "site": "theirs"}


def test_a_failing_own_sitecustomize_fails_as_it_would_alone(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text("raise RuntimeError('theirs broke')\n", encoding="utf-8")
    env = {**os.environ, **hook_env({"PYTHONPATH": str(tmp_path)}), "TRACEVIEW_RECORD": "1"}
    env["TRACEVIEW_RUN_DIR"] = str(tmp_path / "run")
    done = _python("import sys; print(any(type(f).__name__ == 'AfterImport' for f in sys.meta_path))", env)
    assert "theirs broke" in done.stderr  # Python's own "Error in sitecustomize" line
    assert done.stdout.strip() == "True"  # and the recorder armed all the same


def _record(folder: Path, *command: str, **popen: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "traceview", "record", "-o", str(folder), "--", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **popen,  # type: ignore[call-overload]
    )


def test_the_commands_output_passes_through_byte_for_byte(tmp_path: Path) -> None:
    script = "import sys; sys.stdout.buffer.write(b'\\x00\\xffno newline'); sys.stderr.write('theirs\\n')"
    out, err = _record(tmp_path / "run", sys.executable, "-c", script).communicate(timeout=60)
    assert out == b"\x00\xffno newline"
    assert err.startswith(b"theirs\n")


def test_a_command_killed_by_a_signal_ends_the_recorder_by_it(tmp_path: Path) -> None:
    script = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    recorder = _record(tmp_path / "run", sys.executable, "-c", script)
    _, err = recorder.communicate(timeout=60)
    assert recorder.returncode == -signal.SIGTERM
    assert b"killed by signal 15" in err


@pytest.mark.parametrize(("number", "caught"), [(signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT")])
def test_a_signal_to_the_recorder_reaches_the_command(tmp_path: Path, number: int, caught: str) -> None:
    ready, seen = tmp_path / "ready", tmp_path / "seen"
    script = (
        "import signal, sys, time, pathlib\n"
        "def got(n, _): pathlib.Path(sys.argv[2]).write_text(signal.Signals(n).name); sys.exit(7)\n"
        "signal.signal(signal.SIGTERM, got); signal.signal(signal.SIGINT, got)\n"
        "pathlib.Path(sys.argv[1]).write_text('up')\n"
        "time.sleep(60)\n"
    )
    recorder = _record(tmp_path / "run", sys.executable, "-c", script, str(ready), str(seen))
    deadline = time.monotonic() + 60
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    recorder.send_signal(number)  # to the recorder alone, as `kill` or a scheduler does
    recorder.communicate(timeout=60)
    assert seen.read_text(encoding="utf-8") == caught
    assert recorder.returncode == 7


def test_a_bad_step_on_is_a_usage_error(tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "traceview",
        "record",
        "-o",
        str(tmp_path / "r"),
        "--step-on",
        "train.py",
    ]
    done = subprocess.run(
        [*command, "--", sys.executable, "-c", "pass"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "MODULE:FUNCTION" in done.stderr
    assert not (tmp_path / "r").exists()


def _node(folder: Path, ranks: list[int], host: str, world_size: int) -> None:
    folder.mkdir(parents=True)
    for rank in ranks:
        (folder / f"rank{rank}.pt.trace.json.gz").write_bytes(b"")
        trace = ManifestTrace(rank=rank, path=f"rank{rank}.pt.trace.json.gz", host=host)
        write_part(folder, rank, RunManifest(backend="nccl", world_size=world_size, traces=[trace]))


def _merge(*args: str | Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "traceview", "record-merge", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def test_per_node_folders_merge_into_one_run(tmp_path: Path) -> None:
    _node(tmp_path / "job" / "node0", [0, 1], "a", 4)
    _node(tmp_path / "job" / "node1", [2, 3], "b", 4)
    done = _merge(tmp_path / "job")
    assert done.returncode == 0, done.stderr
    path = tmp_path / "job" / "run.json"
    merged = load_manifest(path)
    assert [(t.rank, t.path, t.host) for t in merged.traces] == [
        (0, "node0/rank0.pt.trace.json.gz", "a"),
        (1, "node0/rank1.pt.trace.json.gz", "a"),
        (2, "node1/rank2.pt.trace.json.gz", "b"),
        (3, "node1/rank3.pt.trace.json.gz", "b"),
    ]
    assert (merged.world_size, merged.ranks_per_host, merged.notes) == (4, 2, [])
    assert all(trace.is_file() for trace in manifest_files(path, merged)[0])


def test_node_folders_named_one_by_one_merge_into_their_parent_or_elsewhere(tmp_path: Path) -> None:
    _node(tmp_path / "n0", [0], "a", 3)
    _node(tmp_path / "n1", [1], "b", 3)
    assert _merge(tmp_path / "n0", tmp_path / "n1").returncode == 0
    assert [t.path for t in load_manifest(tmp_path / "run.json").traces] == [
        "n0/rank0.pt.trace.json.gz",
        "n1/rank1.pt.trace.json.gz",
    ]
    elsewhere = tmp_path / "out"
    assert _merge(tmp_path / "n0", tmp_path / "n1", "-o", elsewhere).returncode == 0
    merged = load_manifest(elsewhere / "run.json")
    assert merged.traces[0].path == "../n0/rank0.pt.trace.json.gz"
    assert merged.notes == ["1 of 3 ranks recorded no trace: 2"]


def test_a_rank_in_two_node_folders_is_refused(tmp_path: Path) -> None:
    _node(tmp_path / "n0", [0, 1], "a", 2)
    _node(tmp_path / "n1", [1], "b", 2)
    done = _merge(tmp_path / "n0", tmp_path / "n1")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "rank 1 is recorded twice" in done.stderr
    assert not (tmp_path / "run.json").exists()


def test_a_folder_without_parts_is_refused(tmp_path: Path) -> None:
    done = _merge(tmp_path)
    assert done.returncode == 2
    assert "no run.rank<N>.json part" in done.stderr
