"""A nightly job end to end (docs/compare.md, "History"): seven nights simulated, each folder's run.json
stating when it ran and at which commit, summarised by `traceview summary --json` into files whose names do
not sort by time, one night (the last) a planted compute regression; `traceview trend FOLDER --history
h.parquet` orders the runs by their recorded time, labels them by date and commit, finds the regressed
night and exits 1; a malformed summary among them is named and skipped (exit 4 when nothing regressed). The
history is a Parquet file polars reads, rewritten atomically and safe against two writers at once."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import msgspec
import polars as pl
import pytest

from tests.simulate.engine import write_run
from tests.simulate.manifest import scenario_manifest
from tests.simulate.scenario import CollectiveSpec, ProcessGroupSpec, Scenario
from traceview.options.manifest import write_manifest

FIRST_NIGHT = dt.datetime(2026, 11, 20, 2, 0, tzinfo=dt.UTC)
NIGHTS = 7
COMPUTE_US = 20_000.0
REGRESSION = 1.3
"""The last night computes 30% longer (a slower kernel merged that day)."""
COMMITS = [f"{n:x}" * 8 for n in range(0xA1, 0xA1 + NIGHTS)]


def traceview(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "traceview", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, cwd=cwd)


def night_scenario(night: int) -> Scenario:
    world = ProcessGroupSpec("0", "default_pg", tuple(range(4)))
    slower = REGRESSION if night == NIGHTS - 1 else 1.0
    return Scenario(
        ranks=4,
        steps=6,
        collectives=(CollectiveSpec("AllReduce", 8 << 20, world, "BFloat16"),),
        compute_us=COMPUTE_US * slower,
        ranks_per_host=4,
        jitter=0.03,
        seed=night,
    )


def write_night(root: Path, night: int) -> Path:
    """Night `night`'s run folder: the traces and a run.json stating its time and commit."""
    folder = root / f"run-{night}"
    scenario = night_scenario(night)
    write_run(scenario, folder, gzip=True)
    files = sorted(
        folder.glob("rank-*.pt.trace.json.gz"), key=lambda p: int(p.name.split("-")[1].split(".")[0])
    )
    manifest = scenario_manifest("nightly", scenario, files)
    created = (FIRST_NIGHT + dt.timedelta(days=night)).strftime("%Y-%m-%dT%H:%M:%SZ")
    write_manifest(
        folder / "run.json", msgspec.structs.replace(manifest, created=created, commit=COMMITS[night])
    )
    return folder


@pytest.fixture(scope="module")
def summaries(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Seven summaries in one folder, their names shuffled against time (`<random word>.json`)."""
    root = tmp_path_factory.mktemp("nightly")
    folder = root / "summaries"
    folder.mkdir()
    names = [f"{word}.json" for word in ("kiwi", "apple", "mango", "fig", "banana", "cherry", "date")]
    random.Random(3).shuffle(names)
    assert sorted(names) != names  # name order is not time order
    for night in range(NIGHTS):
        done = traceview("summary", str(write_night(root, night)), "--json", "-q")
        assert done.returncode == 0, done.stderr
        (folder / names[night]).write_text(done.stdout, encoding="utf-8")
    return folder


def test_trend_orders_by_run_time_labels_by_commit_and_finds_the_regressed_night(
    summaries: Path, tmp_path: Path
) -> None:
    history = tmp_path / "h.parquet"
    done = traceview(
        "trend", str(summaries), "--history", str(history), "--json", "-o", str(tmp_path / "t.html")
    )
    assert done.returncode == 1, done.stderr  # the latest night regressed
    document = json.loads(done.stdout)
    details = document["run_details"]
    dates = [(FIRST_NIGHT + dt.timedelta(days=n)).strftime("%Y-%m-%dT%H:%M:%SZ") for n in range(NIGHTS)]
    assert [d["recorded_at"] for d in details] == dates  # ordered by recorded time, not by name
    assert [d["commit"] for d in details] == COMMITS
    assert [d["time_source"] for d in details] == ["run.json created"] * NIGHTS
    assert details[-1]["label"] == f"2026-11-26 02:00 {COMMITS[-1][:12]}"
    regressed = {j["metric"]: j for j in document["latest"] if j["outcome"] == "regression"}
    assert {"step_us", "comp_us"} <= set(regressed)
    assert regressed["comp_us"]["change_pct"] == pytest.approx((REGRESSION - 1) * 100, abs=5)
    assert COMMITS[-1][:12] in document["verdict"]
    frame = pl.read_parquet(history)
    assert frame.get_column("run_key").n_unique() == NIGHTS
    assert frame.get_column("commit").unique().sort().to_list() == sorted(COMMITS)
    assert frame.height == NIGHTS * 4 * 6  # a row per (run, rank, step)
    page = (tmp_path / "t.html").read_text(encoding="utf-8")
    assert '"type":"date"' in page.replace(" ", "")  # dates on the axis


def test_the_history_alone_gives_the_same_trend(summaries: Path, tmp_path: Path) -> None:
    history = tmp_path / "h.parquet"
    first = traceview("trend", str(summaries), "--history", str(history), "--json")
    again = traceview("trend", "--history", str(history), "--json")
    assert again.returncode == first.returncode == 1
    assert json.loads(again.stdout)["latest"] == json.loads(first.stdout)["latest"]
    rerun = traceview("trend", str(summaries), "--history", str(history), "--json")  # the same runs again
    assert pl.read_parquet(history).get_column("run_key").n_unique() == NIGHTS
    assert json.loads(rerun.stdout)["run_details"] == json.loads(first.stdout)["run_details"]


def test_night_by_night_and_two_writers_at_once(summaries: Path, tmp_path: Path) -> None:
    """Each night adds its own summary to the history; two writers started together both land."""
    history = tmp_path / "h.parquet"
    files = sorted(summaries.glob("*.json"))
    for path in files[:3]:
        assert traceview("trend", str(path), "--history", str(history), "--json").returncode in (0, 1)
    command = [sys.executable, "-m", "traceview", "trend", "--history", str(history), "--json"]
    writers = [
        subprocess.Popen([*command, str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for path in files[3:]
    ]
    for writer in writers:
        assert writer.wait(timeout=300) in (0, 1), writer.stderr.read() if writer.stderr else ""
    assert pl.read_parquet(history).get_column("run_key").n_unique() == NIGHTS
    assert not list(tmp_path.glob(".traceview-*"))  # no temporary file left


def test_a_malformed_summary_is_named_and_skipped(summaries: Path, tmp_path: Path) -> None:
    folder = tmp_path / "with-broken"
    folder.mkdir()
    for path in summaries.glob("*.json"):
        (folder / path.name).write_bytes(path.read_bytes())
    (folder / "broken.json").write_text('{"schema_version": "1.6", "time_budget": {"per_st', encoding="utf-8")
    done = traceview("trend", str(folder), "--json")
    assert done.returncode == 1  # the regression outranks the skipped file
    assert "skipped" in done.stderr
    assert "broken.json" in done.stderr
    assert len(json.loads(done.stdout)["runs"]) == NIGHTS
    regressed = sorted(summaries.glob("*.json"), key=lambda p: json.loads(p.read_text())["run"]["commit"])[-1]
    (folder / regressed.name).unlink()  # without the regressed night: exit 4, the broken file named
    calm = traceview("trend", str(folder))
    assert calm.returncode == 4, calm.stderr
    assert "broken.json" in calm.stderr.splitlines()[0]


def test_summaries_without_a_recorded_time_are_placed_by_file_time(summaries: Path, tmp_path: Path) -> None:
    folder = tmp_path / "timeless"
    folder.mkdir()
    for index, path in enumerate(sorted(summaries.glob("*.json"))[:3]):
        document = json.loads(path.read_text())
        for key in ("recorded_at", "recorded_at_source", "base_times_ns"):
            document["run"].pop(key, None)
        for row in document["time_budget"]["per_step"]:
            row["window_start_us"] = 0.0
        target = folder / f"n{index}.json"
        target.write_text(json.dumps(document))
        stamp = (FIRST_NIGHT + dt.timedelta(days=10 - index)).timestamp()
        os.utime(target, (stamp, stamp))
    done = traceview("trend", str(folder), "--json")
    assert done.returncode in (0, 1), done.stderr
    assert "placed by its file's modification time" in done.stderr
    document = json.loads(done.stdout)
    assert document["runs"] == ["n2.json", "n1.json", "n0.json"]  # by file time
    assert document["ordered_by"] == "run time and file time"
