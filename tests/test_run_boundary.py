"""The run's boundary (docs/run-manifest.md, "The run's boundary"): a run.json names only files inside its
folder (or below --run-root), never a system file nor a special one, each once; what is refused is named in
one line and never opened, and no text of a file that is not a trace is ever quoted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import report_factory as rf
from traceview.core.boundary import RunBoundary, folder_files, special_kind
from traceview.core.errors import InputError, TraceviewError
from traceview.options.manifest import RunManifest, load_manifest, manifest_files

SECRET = "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def traceview(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "traceview", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, cwd=cwd)


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


def _manifest(folder: Path, entries: list[str]) -> Path:
    traces = [{"rank": rank, "path": path} for rank, path in enumerate(entries)]
    path = folder / "run.json"
    path.write_text(json.dumps({"schema_version": "1.0", "kind": "traceview-run", "traces": traces}))
    return path


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    """A run of two ranks in `lab/run`, a credentials file and a valid trace outside it."""
    rf.write_run(tmp_path / "run")
    (tmp_path / "creds").write_text(SECRET + "\n")
    rf.write_run(tmp_path / "secret")
    os.mkfifo(tmp_path / "run" / "pipe.json")
    (tmp_path / "run" / "out.json").symlink_to(tmp_path / "secret" / "rank0.json")
    (tmp_path / "run" / "environ.json").symlink_to("/proc/self/environ")
    return tmp_path


OUTSIDE = [
    ("..", "../creds", "lies outside the run"),
    ("a valid trace outside", "../secret/rank1.json", "lies outside the run"),
    ("absolute", "{lab}/creds", "lies outside the run"),
    ("/etc/passwd", "/etc/passwd", "lies outside the run"),
    ("/proc", "/proc/self/environ", "resolves outside the run"),
    ("/dev", "/dev/zero", "lies outside the run"),
    ("symlink out", "out.json", "resolves outside the run"),
    ("symlink to /proc", "environ.json", "resolves outside the run"),
    ("URL", "s3://bucket/run/rank1.json", "is a URL"),
    ("FIFO", "pipe.json", "is a FIFO"),
]


@pytest.mark.parametrize(("kind", "entry", "says"), OUTSIDE, ids=[case[0] for case in OUTSIDE])
def test_an_entry_outside_the_run_is_refused_in_one_line(lab: Path, kind: str, entry: str, says: str) -> None:
    entry = entry.replace("{lab}", str(lab))
    manifest = _manifest(lab / "run", ["rank0.json", entry])
    done = traceview("summary", str(manifest), "--json")
    line = one_line(done)
    assert done.returncode == 2
    assert done.stdout == ""  # nothing analysed, nothing printed
    assert f"traces[1].path {entry!r} {says}" in line
    assert "refused, not read" in line
    assert "wJalr" not in done.stderr + done.stdout


def test_run_root_widens_the_boundary(lab: Path) -> None:
    """An entry below --run-root is the run's (the API's run_root= is the same field)."""
    manifest = _manifest(lab / "run", ["rank0.json", "../secret/rank1.json"])
    assert traceview("summary", str(manifest), "--json").returncode == 2
    done = traceview("summary", str(manifest), "--json", "--run-root", str(lab))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["run"]["ranks"] == [0, 1]


def test_the_api_takes_run_root(lab: Path) -> None:
    import traceview

    manifest = _manifest(lab / "run", ["rank0.json", "../secret/rank1.json"])
    with pytest.raises(TraceviewError, match=r"lies outside the run \(.*; run_root widens it\)"):
        traceview.analyze(manifest)
    assert traceview.analyze(manifest, run_root=lab).summary()["run"]["ranks"] == [0, 1]


def test_run_root_never_takes_in_a_system_or_special_file(lab: Path) -> None:
    boundary = RunBoundary.of_manifest(lab / "run" / "run.json", "/")
    with pytest.raises(InputError, match=r"is a system file \(under /proc\)"):
        boundary.entry("/proc/self/environ", "traces[0].path")
    with pytest.raises(InputError, match=r"is a character device|system file \(under /dev\)"):
        boundary.entry("/dev/zero", "traces[0].path")


def test_url_entries_only_under_the_manifests_own_prefix() -> None:
    boundary = RunBoundary.of_manifest("s3://bucket/nightly/run.json")
    assert boundary.entry("rank0.json", "traces[0].path") == "s3://bucket/nightly/rank0.json"
    assert boundary.entry("s3://bucket/nightly/r/1.json", "traces[1].path") == "s3://bucket/nightly/r/1.json"
    for entry in (
        "s3://other/nightly/x.json",
        "gs://bucket/nightly/x.json",
        "../x.json",
        "s3://bucket/n.json",
    ):
        with pytest.raises(InputError, match="outside the run"):
            boundary.entry(entry, "traces[1].path")


def test_a_file_named_twice_is_found_before_anything_is_read(lab: Path) -> None:
    """5,000 entries naming one file: refused at once (it ran past 240 s when each entry was read first)."""
    entries = ["rank0.json", *(["./rank1.json", "rank1.json"] * 2500)]
    manifest = _manifest(lab / "run", entries)
    started = time.monotonic()
    with pytest.raises(InputError, match=r"traces\[2\]\.path names the file traces\[1\]\.path names already"):
        manifest_files(manifest, load_manifest(manifest))
    assert time.monotonic() - started < 5
    done = traceview("summary", str(manifest))
    assert done.returncode == 2
    assert "names the file traces[1].path names already" in one_line(done)


def test_nccl_log_entries_go_through_the_boundary(lab: Path) -> None:
    manifest = lab / "run" / "run.json"
    document = {"schema_version": "1.0", "kind": "traceview-run", "nccl_logs": [{"path": "../creds"}]}
    manifest.write_text(json.dumps(document))
    with pytest.raises(InputError, match=r"nccl_logs\[0\]\.path '\.\./creds' lies outside the run"):
        manifest_files(manifest, RunManifest(nccl_logs=load_manifest(manifest).nccl_logs))


def test_a_folder_the_user_named_follows_its_links_but_never_into_the_system(lab: Path) -> None:
    """Inside a folder the user named, links are followed (out.json is a trace elsewhere); a link into /proc
    and a FIFO are named as skipped, never opened, and nothing of them is quoted."""
    (lab / "run" / "run.json").unlink(missing_ok=True)
    done = traceview("summary", str(lab / "run"), "--json")
    assert done.returncode == 4, done.stderr
    assert "environ.json: a system file (under /proc)" in done.stderr
    assert "pipe.json: a FIFO" in done.stderr
    assert "SHELL=" not in done.stderr + done.stdout
    skipped = {Path(path).name for path, _ in json.loads(done.stdout)["run"]["skipped"]}
    assert {"environ.json", "pipe.json"} <= skipped
    assert special_kind(lab / "run" / "environ.json") == "a system file (under /proc)"


def test_a_folder_walk_lists_regular_files_only(lab: Path) -> None:
    names = [path.name for path in folder_files(lab / "run", lambda name: name.endswith(".json"))]
    assert names == ["out.json", "rank0.json", "rank1.json"]


@pytest.mark.parametrize("content", [SECRET + "\n", "SHELL=/bin/bash\x00HOME=/root\x00"])
def test_a_file_of_another_kind_is_described_never_quoted(tmp_path: Path, content: str) -> None:
    """A text file named as a trace: stderr, the JSON summary and the report say what kind it is."""
    run = rf.write_run(tmp_path / "run")
    (run / "rank2.json").write_text(content)
    done = traceview("summary", str(run), "--json")
    assert done.returncode == 4
    kind = "text" if "\x00" not in content else "binary data"
    assert f"rank2.json: not JSON ({kind}): not a Kineto trace" in done.stderr
    report = tmp_path / "r.html"
    assert traceview("report", str(run), "-o", str(report)).returncode == 4
    for said in (done.stderr, done.stdout, report.read_text()):
        assert "wJalr" not in said
        assert "SHELL" not in said
