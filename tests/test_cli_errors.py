"""The error model of the command line: usage errors exit 2 in one line, a bad rank makes a partial run (exit
4) with the others analysed, internal errors exit 3 with the traceback in a file, and nothing raw reaches
stderr."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import kineto_factory as kf
from tests import report_factory as rf
from traceview import __version__

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def traceview(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "traceview", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rf.write_run(tmp_path_factory.mktemp("errors") / "run")


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("sumary", "x"), "No such command"),
        (("summary", "--bogus", "x"), "No such option: --bogus"),
        (("summary",), "Missing argument"),
        (("summary", "RUN", "--workers", "0"), "--workers"),
        (("summary", "RUN", "--workers", "-3"), "--workers"),
        (("summary", "RUN", "--params", "nan"), "--params"),
        (("summary", "RUN", "--local-batch", "inf"), "--local-batch"),
        (("summary", "RUN", "--efficiency", "2"), "--efficiency"),
        (("summary", "RUN", "--fail-on", "gamma>>1"), "--fail-on"),
        (("summary", "RUN", "--nccl-log", "MISSING"), "--nccl-log"),
        (("report", "RUN", "-o", "/nonexistent-dir/r.html"), "cannot write"),
        (("report", "RUN", "--plotlyjs", "nope"), "--plotlyjs"),
        (("summary", "RUN", "--executor", "nope"), "--executor"),
        (("summary", "RUN", "--comm-pattern", "("), "--comm-pattern"),
        (("summary", "RUN", "--virtual-stages", "99999999999999999999"), "--virtual-stages"),
        (("summary", "RUN", "--bandwidth", "1e400"), "--bandwidth"),
        (("summary", "RUN", "--params", "1e300"), "--params"),
        (("export", "RUN", "--ranks", "0-99999999999"), "--ranks"),
        (("export", "RUN", "--steps", "5-2"), "--steps"),
        (("export", "RUN", "--window", "nan:inf"), "--window"),
        (("export", "RUN", "--max-events", "99999999999999999999"), "--max-events"),
        (("compare", "RUN", "RUN", "--threshold", "nan"), "--threshold"),
        (("compare", "RUN", "RUN", "-o", "/nonexistent-dir/c.html"), "cannot write"),
        (("compare", "RUN", "RUN", "--thresholds", "BINARY"), "not a UTF-8 TOML file"),
        (("compare", "RUN", "RUN", "--thresholds", "NEGATIVE"), "threshold_pct = -5.0"),
    ],
)
def test_usage_errors_exit_2_in_one_line(
    run_dir: Path, tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    (tmp_path / "binary.toml").write_bytes(b"\xff\xfe")
    (tmp_path / "negative.toml").write_text("[compare]\nthreshold_pct = -5.0\n")
    named = {"RUN": run_dir, "MISSING": tmp_path / "missing.log"}
    named |= {"BINARY": tmp_path / "binary.toml", "NEGATIVE": tmp_path / "negative.toml"}
    done = traceview(*[str(named.get(a, a)) for a in args])
    assert done.returncode == 2, done.stderr
    line = one_line(done)
    assert says in line
    assert line.endswith("--help')"), line  # the usage hint, naming the command where there is one


def test_an_error_of_the_operating_system_is_input_not_a_bug() -> None:
    done = traceview("summary", "x" * 5000)  # a file name the kernel refuses (ENAMETOOLONG)
    assert done.returncode == 2, done.stderr
    assert "File name too long" in one_line(done)


def test_version_and_help() -> None:
    version = traceview("--version")
    assert (version.returncode, version.stdout.strip()) == (0, f"traceview {__version__}")
    helped = traceview("--help")
    assert helped.returncode == 0
    assert "summary" in helped.stdout
    bare = traceview()
    assert bare.returncode == 2
    assert bare.stderr.count("\n") == 1  # one line: the commands and the hint, no help screen
    assert bare.stderr.startswith("traceview: error: no command given; one of: summary, report,")
    assert bare.stderr.rstrip().endswith("(see 'traceview --help')")
    assert bare.stdout == ""


def test_shell_expanded_glob_is_one_run(run_dir: Path) -> None:
    files = sorted(str(p) for p in run_dir.iterdir())
    done = traceview("summary", *files, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["run"]["ranks"] == [0, 1]


def test_a_bad_rank_is_skipped_named_and_the_run_partial(run_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for trace in run_dir.iterdir():
        (run / trace.name).write_bytes(trace.read_bytes())
    bad = run / "rank-7.json"
    bad.write_bytes(b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "\xff\xfe", "ts": [}')
    done = traceview("summary", str(run), "--json")
    assert done.returncode == 4, done.stderr
    document = json.loads(done.stdout)
    assert document["run"]["ranks"] == [0, 1]
    assert [path for path, _ in document["run"]["skipped"]] == [str(bad)]
    assert str(bad) in done.stderr
    assert "Traceback" not in done.stderr


def test_control_characters_from_a_trace_never_reach_the_terminal(tmp_path: Path) -> None:
    evil = "\x1b]0;owned\x07\x1b[2J\x00\u202e"
    doc = kf.document([kf.kernel(evil + "gemm", 0.0, 10.0)], rank=0)
    doc["deviceProperties"] = [{"name": "A100" + evil}]
    doc["distributedInfo"]["pg_config"] = [{"pg_name": "0", "pg_desc": evil, "ranks": [0]}]
    path = kf.write(doc, tmp_path / ("rank0" + "\x1b[31m" + ".json"))
    done = traceview("summary", str(path))
    assert done.returncode == 0, done.stderr
    assert not CONTROL.search(done.stdout.replace("\n", "")), done.stdout
    assert not CONTROL.search(done.stderr.replace("\n", "")), done.stderr
    missing = traceview("summary", str(tmp_path / "no\x1b[31mfile"))
    assert missing.returncode == 2
    assert not CONTROL.search(missing.stderr.replace("\n", ""))


def _rank_file(folder: Path, rank: int, world: int, base_ns: int | None = None, **top: Any) -> Path:
    doc = kf.document([kf.kernel("gemm", 10.0 * rank, 10.0)], rank=rank, world_size=world, base_ns=base_ns)
    doc["distributedInfo"].update(top)
    return kf.write(doc, folder / f"rank{rank}.json")


DAY_NS = 86_400 * 10**9
BASE_NS = 1_700_000_000 * 10**9


@pytest.mark.parametrize(
    ("odd", "says"),
    [
        ({"world": 8}, "world size 8"),
        ({"base_ns": BASE_NS + 3 * DAY_NS}, "base time"),
        ({"rank": 9}, "beyond its world size"),
        ({"pg_config": [{"pg_name": "9", "pg_desc": "other", "ranks": [0, 1, 2, 3, 4]}]}, "process groups"),
    ],
)
def test_a_trace_of_another_job_is_set_apart_and_named(
    tmp_path: Path, odd: dict[str, Any], says: str
) -> None:
    shared_pg = [{"pg_name": "0", "pg_desc": "default_pg", "ranks": [0, 1, 2, 3]}]
    for rank in (0, 1, 2):
        _rank_file(tmp_path, rank, 4, BASE_NS + rank * 10**9, pg_config=shared_pg)
    rank = odd.get("rank", 3)
    options = {"pg_config": odd.get("pg_config", shared_pg)}
    other = _rank_file(tmp_path, rank, odd.get("world", 4), odd.get("base_ns", BASE_NS), **options)
    done = traceview("summary", str(tmp_path), "--json")
    assert done.returncode == 4, done.stderr
    document = json.loads(done.stdout)
    assert document["run"]["ranks"] == [0, 1, 2]
    [(path, reason)] = document["run"]["skipped"]
    assert (path, "another job" in reason, says in reason) == (str(other), True, True)
    assert [w for w in document["run"]["warnings"] if "more than one job" in w and str(other) in w]
    assert str(other) in done.stderr


def test_two_whole_jobs_in_one_folder_keep_the_larger(tmp_path: Path) -> None:
    for rank in range(3):
        _rank_file(tmp_path, rank, 3)
    small = [
        kf.write(
            kf.document([kf.kernel("gemm", 0.0, 5.0)], rank=r, world_size=2), tmp_path / f"job2-rank{r}.json"
        )
        for r in (0, 1)
    ]
    done = traceview("summary", str(tmp_path), "--json")
    assert done.returncode == 4, done.stderr
    document = json.loads(done.stdout)
    assert document["run"]["ranks"] == [0, 1, 2]
    skipped = {path for path, _ in document["run"]["skipped"]}
    assert skipped == {str(p) for p in small}


def test_a_file_without_a_rank_among_several_is_skipped(tmp_path: Path) -> None:
    for rank in (0, 1):
        _rank_file(tmp_path, rank, 2)
    unranked = kf.write(kf.document([kf.kernel("gemm", 0.0, 5.0)], rank=None), tmp_path / "trace.json")
    done = traceview("summary", str(tmp_path), "--json")
    assert done.returncode == 4, done.stderr
    document = json.loads(done.stdout)
    assert document["run"]["ranks"] == [0, 1]
    assert [path for path, _ in document["run"]["skipped"]] == [str(unranked)]


def test_an_unreadable_nccl_log_is_skipped_named_and_the_run_partial(run_dir: Path, tmp_path: Path) -> None:
    log = tmp_path / "broken.log"
    log.write_bytes(b"\x00\x01 this is no NCCL log \x1b[2J")
    done = traceview("summary", str(run_dir), "--json", "--nccl-log", str(log))
    assert done.returncode == 4, done.stderr
    assert str(log) in done.stderr
    assert json.loads(done.stdout)["nccl"]["skipped"][0]["path"] == str(log)
    assert not CONTROL.search(done.stderr.replace("\n", ""))


@pytest.mark.parametrize("command", ["collectives", "stragglers"])
def test_in_memory_commands_report_a_bad_rank_too(run_dir: Path, tmp_path: Path, command: str) -> None:
    for trace in run_dir.iterdir():
        (tmp_path / trace.name).write_bytes(trace.read_bytes())
    bad = tmp_path / "rank-5.json"
    bad.write_bytes(b'{"traceEvents": [')
    done = traceview(command, str(tmp_path), "--json")
    assert done.returncode == 4, done.stderr
    assert str(bad) in done.stderr
    json.loads(done.stdout)


def test_an_internal_error_writes_the_traceback_to_a_log_not_the_screen(tmp_path: Path) -> None:
    code = (
        "import sys, traceview.cli.main as c, traceview.cli.app as a\n"
        "def boom(*a, **k): raise ZeroDivisionError('planted')\n"
        "a.analyse = boom\n"
        "sys.argv = ['traceview', 'summary', 'x']\n"
        "c.main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert done.returncode == 3
    line = one_line(done)
    [log] = list(tmp_path.glob("traceview-crash-*.log"))
    assert str(log) in line
    assert "planted" in log.read_text()
    assert "Traceback" in log.read_text()


def test_max_trace_bytes_skips_the_file_that_passes_it(tmp_path: Path) -> None:
    small = _rank_file(tmp_path, 0, 2)
    big_doc = kf.document([kf.kernel("gemm", float(i), 1.0) for i in range(400)], rank=1, world_size=2)
    big = kf.write(big_doc, tmp_path / "rank1.json.gz", compress=True)
    limit = 2 * big.stat().st_size  # the gzip file itself and the small file fit; the big one's text does not
    assert len(gzip.decompress(big.read_bytes())) > limit > small.stat().st_size
    done = traceview("summary", str(tmp_path), "--json", "--max-trace-bytes", str(limit))
    assert done.returncode == 4, done.stderr
    [(path, reason)] = json.loads(done.stdout)["run"]["skipped"]
    assert (path, f"passes {limit} bytes" in reason, "--max-trace-bytes" in reason) == (str(big), True, True)
    alone = traceview("collectives", str(big), "--max-trace-bytes", str(limit))
    assert alone.returncode == 2
    assert str(big) in one_line(alone)
    assert traceview("summary", str(tmp_path), "--max-trace-bytes", "0").returncode == 2


def test_skipped_inputs_are_named_in_the_report_inputs_section(run_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for trace in run_dir.iterdir():
        (run / trace.name).write_bytes(trace.read_bytes())
    bad = run / "rank-3<b>.json"
    bad.write_bytes(b"\x1b[2J not a trace")
    out = tmp_path / "report.html"
    done = traceview("report", str(run), "-o", str(out))
    assert done.returncode == 4, done.stderr
    page = out.read_text(encoding="utf-8")
    inputs = page[page.index('id="inputs"') :]
    assert "rank-3&lt;b&gt;.json" in inputs
    assert "skipped" in inputs
    assert f"wrote {out}" in done.stderr


@pytest.mark.parametrize("command", ["stragglers", "collectives", "summary"])
def test_a_rank_without_its_base_is_aligned_with_a_warning_in_every_command(
    tmp_path: Path, command: str
) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    for rank in (0, 1):
        listed = rf.rank_events(rank)
        for event in listed:
            event["ts"] += 1.7e15 * rank  # rank 1: microseconds since 1970, and no base (an older writer)
        base = rf.BASE_NS if rank == 0 else None
        kf.write(
            kf.document(listed, rank=rank, world_size=2, base_ns=base, hostname=f"h{rank}"),
            folder / f"rank{rank}.json",
        )
    done = traceview(command, str(folder), "--json")
    assert done.returncode == 0, done.stderr
    said = done.stdout if command == "summary" else done.stderr
    assert "rank 1 has no usable baseTimeNanoseconds" in said
    if command != "collectives":
        document = json.loads(done.stdout)
        crossrank = document["across_ranks"] if command == "summary" else document
        assert [row["offset_us"] for row in crossrank["clock_offsets"]] == [0.0, 0.0]
