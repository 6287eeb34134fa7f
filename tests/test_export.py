"""`traceview export`: one Chrome/Perfetto trace of the run on the aligned clock, read back as data."""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from types import ModuleType

import pytest

from tests.shared_data import REAL_KINETO, requires_shared

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
PLANTED_OFFSET_US = 25_000.0  # host 1 (ranks 4-7) records 25 ms ahead (sample_traces/README.md)


def traceview(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "traceview", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    out = tmp_path_factory.mktemp("export") / "run.perfetto.json.gz"
    done = traceview("export", str(SAMPLES / "dp8_straggler"), "-o", str(out), "--steps", "1-3")
    assert done.returncode == 0, done.stderr
    document: dict[str, object] = json.loads(gzip.decompress(out.read_bytes()))
    return document


def _events(document: dict[str, object]) -> list[dict[str, object]]:
    return document["traceEvents"]  # type: ignore[return-value]


def test_valid_chrome_trace(exported: dict[str, object]) -> None:
    events = _events(exported)
    slices = [e for e in events if e["ph"] == "X"]
    assert slices
    for event in slices:
        assert {"name", "ts", "dur", "pid", "tid"} <= event.keys()
        assert isinstance(event["ts"], float | int)
        assert event["dur"] >= 0  # type: ignore[operator]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}  # type: ignore[index]
    assert sorted(names) == list(range(8))
    assert "straggler" in str(names[5])


def _original_kernels(rank: int) -> dict[tuple[str, int], float]:
    """(name, correlation) -> ts of every kernel of one rank's own trace file, by a plain JSON pass."""
    path = SAMPLES / "dp8_straggler" / f"rank-{rank}.pt.trace.json.gz"
    document = json.loads(gzip.decompress(path.read_bytes()))
    kernels = [e for e in document["traceEvents"] if e.get("cat") == "kernel"]
    return {(e["name"], e["args"]["correlation"]): e["ts"] for e in kernels}


def test_each_rank_is_shifted_by_its_hosts_offset(exported: dict[str, object]) -> None:
    exported_kernels = defaultdict(dict)
    for event in _events(exported):
        if event["ph"] == "X" and event.get("cat") == "kernel":
            exported_kernels[event["pid"]][(event["name"], event["args"]["correlation"])] = event["ts"]  # type: ignore[index]
    for rank in (0, 5):
        original = _original_kernels(rank)
        shifts = {ts - original[key] for key, ts in exported_kernels[rank].items() if key in original}  # type: ignore[attr-defined]
        expected = 0.0 if rank < 4 else -PLANTED_OFFSET_US
        assert shifts
        assert all(abs(s - expected) < 1e-3 for s in shifts), (rank, sorted(shifts)[:3])


def test_flows_join_the_members_of_one_instance(exported: dict[str, object]) -> None:
    by_id = defaultdict(list)
    for event in _events(exported):
        if event["ph"] in ("s", "f"):
            by_id[event["id"]].append(event)
    assert by_id
    for pair in by_id.values():
        start, end = sorted(pair, key=lambda e: e["ph"] != "s")
        assert start["ph"] == "s"
        assert (end["ph"], end.get("bp")) == ("f", "e")
        assert start["name"] == end["name"]  # the same instance
        assert start["pid"] != end["pid"]
        assert start["ts"] <= end["ts"]  # from the first rank to arrive
    # every flow ends on an exported collective kernel of its rank, on the aligned clock
    kernels = {
        (e["pid"], round(e["ts"], 3))
        for e in _events(exported)
        if e["ph"] == "X" and "AllReduce" in str(e["name"])
    }
    assert all((p["pid"], round(p["ts"], 3)) in kernels for pair in by_id.values() for p in pair)


def test_bounds_are_stated(exported: dict[str, object]) -> None:
    other = exported["otherData"]
    assert other["bounds"]["steps"] == [1, 2, 3]  # type: ignore[index]
    assert other["truncated"] is False  # type: ignore[index]


# ------------------------------------------------- the independent checker (tools/check_export.py)


@pytest.fixture(scope="module")
def checker() -> ModuleType:
    script = Path(__file__).resolve().parents[1] / "tools" / "check_export.py"
    spec = importlib.util.spec_from_file_location("check_export", script)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def export_and_summary(run: Path, out: Path, *bounds: str) -> tuple[Path, Path]:
    """`traceview export RUN` (with `bounds`) and `traceview summary RUN --json`, as files."""
    trace, summary = out / "run.perfetto.json.gz", out / "summary.json"
    described = traceview("summary", str(run), "--json", "--quiet")
    header = json.loads(described.stdout)["run"]
    # a folder holding some ranks of a larger job (hta_sampled_2rank: 2 of 128) is partial: exit 4
    partial = len(header["ranks"]) < (header["world_size"] or 0)
    assert described.returncode == (4 if partial else 0), described.stderr
    done = traceview("export", str(run), "-o", str(trace), "--quiet", *bounds)
    assert done.returncode == (4 if partial else 0), done.stderr
    summary.write_text(described.stdout, encoding="utf-8")
    return trace, summary


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return export_and_summary(SAMPLES / "dp8_straggler", tmp_path_factory.mktemp("whole"))


def test_the_whole_run_passes_the_independent_checks(checker: ModuleType, whole: tuple[Path, Path]) -> None:
    problems = checker.check(whole[0], SAMPLES / "dp8_straggler", whole[1])
    assert problems == {"format": [], "offsets": [], "flows": []}
    document = json.loads(gzip.decompress(whole[0].read_bytes()))
    flows = [e for e in document["traceEvents"] if e["ph"] == "s"]
    collectives = len(
        checker.collective_identity(checker.load(SAMPLES / "dp8_straggler" / "rank-0.pt.trace.json.gz"))
    )
    assert len(flows) == collectives * (8 - 1)  # every instance: the first arrival to each of the 7 others
    # rank 5, the planted straggler (sample_traces/README.md), is last in every instance: never a flow's
    # start, the end of one flow per instance
    assert 5 not in {e["pid"] for e in flows}
    assert sum(e["ph"] == "f" and e["pid"] == 5 for e in document["traceEvents"]) == collectives


def test_the_checker_catches_a_wrong_shift_and_a_flow_between_instances(
    checker: ModuleType, whole: tuple[Path, Path], tmp_path: Path
) -> None:
    document = json.loads(gzip.decompress(whole[0].read_bytes()))
    events = document["traceEvents"]
    for event in events:
        if event["ph"] == "X" and event["pid"] == 6:
            event["ts"] += 1.0  # rank 6 one microsecond off
    ends = [e for e in events if e["ph"] == "f"]
    ends[0]["ts"], ends[1]["ts"] = ends[1]["ts"], ends[0]["ts"]  # two flows end on each other's kernel
    ends[0]["pid"], ends[1]["pid"] = ends[1]["pid"], ends[0]["pid"]
    ends[0]["tid"], ends[1]["tid"] = ends[1]["tid"], ends[0]["tid"]
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(document), encoding="utf-8")
    problems = checker.check(broken, SAMPLES / "dp8_straggler", whole[1])
    assert [p.split(":")[0] for p in problems["offsets"]] == ["rank 6"]
    assert len(problems["flows"]) >= 1
    ends[0]["bp"] = "s"
    broken.write_text(json.dumps(document), encoding="utf-8")
    assert checker.check(broken, SAMPLES / "dp8_straggler", whole[1])["format"]


def _rebased(source: Path, target: Path, moved: dict[int, int]) -> Path:
    """A copy of a run whose rank r records `moved[r]` seconds later base time and earlier `ts`: the same
    instants on another time base."""
    target.mkdir()
    for path in sorted(source.glob("rank-*.pt.trace.json.gz")):
        document = json.loads(gzip.decompress(path.read_bytes()))
        seconds = moved.get(int(document["distributedInfo"]["rank"]), 0)
        document["baseTimeNanoseconds"] += seconds * 1_000_000_000
        for event in document["traceEvents"]:
            if "ts" in event:
                event["ts"] -= seconds * 1_000_000
        (target / path.name).write_bytes(gzip.compress(json.dumps(document).encode()))
    return target


def test_ranks_on_another_time_base_land_on_the_same_instants(
    checker: ModuleType, whole: tuple[Path, Path], tmp_path: Path
) -> None:
    run = _rebased(SAMPLES / "dp8_straggler", tmp_path / "run", {3: 1, 6: 2})
    trace, summary = export_and_summary(run, tmp_path)
    assert checker.check(trace, run, summary) == {"format": [], "offsets": [], "flows": []}

    def kernels(path: Path) -> dict[tuple[int, str, int], float]:
        events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
        return {
            (e["pid"], e["name"], e["args"]["correlation"]): e["ts"]
            for e in events
            if e.get("cat") == "kernel"
        }

    before, after = kernels(whole[0]), kernels(trace)
    assert before.keys() == after.keys()
    assert max(abs(before[k] - after[k]) for k in before) < 1e-3


def test_bounds_keep_the_chosen_ranks_steps_window_and_count(checker: ModuleType, tmp_path: Path) -> None:
    run = SAMPLES / "dp8_straggler"
    trace, summary = export_and_summary(
        run, tmp_path, "--ranks", "2-5", "--window", "20:120", "--max-events", "300"
    )
    document = json.loads(gzip.decompress(trace.read_bytes()))
    assert checker.check(trace, run, summary) == {"format": [], "offsets": [], "flows": []}
    events = document["traceEvents"]
    assert {e["pid"] for e in events} == {2, 3, 4, 5}
    low, high = document["otherData"]["window_us"]
    assert high - low == pytest.approx(100_000)
    slices = [e for e in events if e["ph"] == "X"]
    assert all(e["ts"] < high and e["ts"] + e["dur"] > low for e in slices)
    assert document["otherData"]["truncated"] is True
    assert sum(e["ph"] == "X" and e.get("cat") != "bubble" for e in events) == 300


@requires_shared
def test_a_real_pair_of_ranks_passes_the_independent_checks(checker: ModuleType, tmp_path: Path) -> None:
    """Two real ranks recorded by an older PyTorch (NCCL kernels without process-group args)."""
    run = REAL_KINETO / "hta_sampled_2rank"
    trace, summary = export_and_summary(run, tmp_path)
    assert checker.check(trace, run, summary) == {"format": [], "offsets": [], "flows": []}
    flows = [e for e in json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"] if e["ph"] == "s"]
    assert flows
