"""A run read from object storage (`s3://...`, through fsspec) gives exactly what the same files give on disk,
on the local executor and on Ray; a local S3-compatible server (moto) on the loopback stands in for S3 (CI
installs `traceview[remote]` and moto)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from polars.testing import assert_frame_equal
from traceview.parsers import kineto
from traceview.parsers.kineto import _gzip as kineto_gzip
from traceview.parsers.kineto.limits import DEFAULT_LIMITS

from tests.s3_server import s3_server
from traceview.core.location import Url, is_url, location

NEEDED = ("fsspec", "s3fs", "moto", "flask")
if any(importlib.util.find_spec(name) is None for name in NEEDED):
    if os.environ.get("CI") == "true":
        raise ImportError("s3fs or moto is missing: .ci/run installs traceview[remote] and moto[server]")
    pytest.skip("URL input needs pip install 'traceview[remote]' 'moto[server]'", allow_module_level=True)

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
BUCKET = "nightly"


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[dict[str, str]]:
    """A moto S3 server on the loopback with bucket `nightly` holding dp8_straggler's traces under `dp8/`."""
    with s3_server(BUCKET) as (env, storage):
        for trace in sorted((SAMPLES / "dp8_straggler").glob("*.json.gz")):
            storage.put_file(str(trace), f"{BUCKET}/dp8/{trace.name}")
        storage.pipe_file(f"{BUCKET}/dp8/notes.txt", b"not a trace")
        yield env


@pytest.fixture
def local_copy(tmp_path: Path) -> Path:
    """dp8_straggler's traces alone (no run.json: the URL run has none) in a local folder."""
    folder = tmp_path / "dp8"
    folder.mkdir()
    for trace in (SAMPLES / "dp8_straggler").glob("*.json.gz"):
        shutil.copy(trace, folder / trace.name)
    return folder


def summary_json(run: str, env: dict[str, str], *options: str) -> dict[str, object]:
    command = [sys.executable, "-m", "traceview", "summary", run, "--json", "--quiet", *options]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **env}, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.replace(run.rstrip("/"), "RUN"))  # type: ignore[no-any-return]


def test_locations_tell_urls_from_paths() -> None:
    assert is_url("s3://bucket/run/")
    assert is_url("https://host/rank0.json")
    assert not is_url("file:///tmp/run")
    assert not is_url("/tmp/run")
    assert not is_url(Path("s3:/x"))
    assert location("file:///tmp/run") == Path("/tmp/run")
    assert location("s3://b/run/rank_3.json.gz").name == "rank_3.json.gz"


def test_a_run_read_from_s3_equals_the_run_read_from_disk(
    s3_endpoint: dict[str, str], local_copy: Path
) -> None:
    on_disk = summary_json(str(local_copy), s3_endpoint)
    from_s3 = summary_json(f"s3://{BUCKET}/dp8", s3_endpoint)
    assert from_s3 == on_disk
    assert len(on_disk["run"]["ranks"]) == 8  # type: ignore[index]


def test_a_glob_url_and_a_streamed_rank(s3_endpoint: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    from traceview.load.inputs import resolve_trace_files

    found = resolve_trace_files(f"s3://{BUCKET}/dp8/rank-[0-3].pt.trace.json.gz")
    assert [str(f) for f in found] == [f"s3://{BUCKET}/dp8/rank-{r}.pt.trace.json.gz" for r in range(4)]
    assert all(isinstance(f, Url) and f.size_bytes for f in found)
    monkeypatch.setattr(kineto_gzip, "INFLATED_SLICE", 4096)
    streamed = kineto.parse(found[3], replace(DEFAULT_LIMITS, stream_above_bytes=1, stream_chunk_bytes=16384))
    whole = kineto.parse(SAMPLES / "dp8_straggler" / "rank-3.pt.trace.json.gz")
    assert_frame_equal(streamed.gpu.rechunk(), whole.gpu)
    assert streamed.meta == whole.meta


def test_a_missing_object_is_one_line_and_exit_2(s3_endpoint: dict[str, str]) -> None:
    env = {**os.environ, **s3_endpoint}
    for run in (f"s3://{BUCKET}/nothing-here/", f"s3://{BUCKET}/dp8/rank-99.pt.trace.json.gz"):
        done = subprocess.run(
            [sys.executable, "-m", "traceview", "summary", run],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        assert run.rstrip("/") in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(
    importlib.util.find_spec("ray") is None and os.environ.get("CI") != "true", reason="no Ray"
)
def test_ray_reads_the_ranks_from_s3(s3_endpoint: dict[str, str], local_copy: Path) -> None:
    on_disk = summary_json(str(local_copy), s3_endpoint)
    on_ray = summary_json(f"s3://{BUCKET}/dp8", s3_endpoint, "--executor", "ray")
    assert on_ray == on_disk


def test_trend_reads_summaries_from_a_bucket(s3_endpoint: dict[str, str], tmp_path: Path) -> None:
    """Saved summaries under a prefix and a glob, as a nightly job keeps them in a bucket: ordered by their
    recorded time, not by name."""
    import s3fs

    today: dict[str, Any] = summary_json(str(SAMPLES / "dp8_straggler"), s3_endpoint)
    storage = s3fs.S3FileSystem(endpoint_url=s3_endpoint["AWS_ENDPOINT_URL"], key="testing", secret="testing")
    for name, day in (("b.json", "2026-11-20"), ("a.json", "2026-11-21")):
        document = {**today, "run": {**today["run"], "recorded_at": f"{day}T02:00:00Z"}}
        storage.pipe_file(f"{BUCKET}/summaries/{name}", json.dumps(document).encode())
    for spec in (f"s3://{BUCKET}/summaries/", f"s3://{BUCKET}/summaries/*.json"):
        done = subprocess.run(
            [sys.executable, "-m", "traceview", "trend", spec, "--json"],
            capture_output=True,
            text=True,
            env={**os.environ, **s3_endpoint},
            check=False,
        )
        assert done.returncode == 0, done.stderr
        document = json.loads(done.stdout)
        assert document["runs"] == ["b.json", "a.json"]
        assert document["ordered_by"] == "run time"
