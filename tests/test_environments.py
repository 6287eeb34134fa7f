"""Hostile environments, odd file kinds and signals, each through the one mechanism that handles its class
(docs/metrics.md, "Errors and exit codes"): a data table of cases, each run as a subprocess, its exit code and
the first line it writes on stderr checked against the table (no traceback, ever).

Each case writes its row (case, exit code, the line) to `test-artifacts/exit-codes/`; `python -m
tests.test_environments` joins them into `test-artifacts/exit-codes.md`.
"""

from __future__ import annotations

import gzip
import lzma
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.optional import require

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "dp8_straggler"
ARTIFACTS = ROOT / "test-artifacts" / "exit-codes"
GIB = 1 << 30


pytestmark = pytest.mark.usefixtures("interruptible")


def _bomb(path: Path, inflated: int, byte: bytes = b"\0", start: bytes = b"") -> Path:
    """A gzip bomb of `inflated` bytes of `byte` after `start`: members of 64 MiB (a few MiB on disk)."""
    member = gzip.compress(byte * (64 << 20), compresslevel=9)
    with path.open("wb") as out:
        out.write(gzip.compress(start))
        for _ in range(inflated // (64 << 20)):
            out.write(member)
    return path


def _copy_run(lab: Path, name: str) -> Path:
    folder = lab / name
    shutil.copytree(SAMPLE, folder, ignore=shutil.ignore_patterns("run.json"))
    return folder


def _recompressed(folder: Path, rank: int, suffix: str, compress: Callable[[bytes], bytes]) -> None:
    source = folder / f"rank-{rank}.pt.trace.json.gz"
    data = gzip.decompress(source.read_bytes())
    source.unlink()
    (folder / f"rank-{rank}.pt.trace.json{suffix}").write_bytes(compress(data))


def _padded_run(folder: Path) -> None:
    """The sample run uncompressed, each rank padded with 3 MiB of blanks (valid JSON): past the 16 MB from
    which the local executor starts worker processes."""
    folder.mkdir()
    for source in sorted(SAMPLE.glob("rank-*.pt.trace.json.gz")):
        target = folder / source.name.removesuffix(".gz")
        target.write_bytes(gzip.decompress(source.read_bytes()) + b" " * (3 << 20))


def _zstd(data: bytes) -> bytes:
    import zstandard

    return bytes(zstandard.ZstdCompressor().compress(data))


def _build_lab(lab: Path) -> None:
    """Every input the cases name, under `lab`."""
    _copy_run(lab, "run")
    os.mkfifo(lab / "pipe.json")
    os.mkfifo(lab / "pipe.log")
    os.mkfifo(lab / "out-pipe.html")
    os.mkfifo(_copy_run(lab, "fifo-run") / "rank-9.pt.trace.json")
    with socket.socket(socket.AF_UNIX) as server:  # the socket file stays once closed
        server.bind(str(_copy_run(lab, "socket-run") / "rank-9.pt.trace.json"))
    for name in ("sparse.json", "sparse.log"):
        with (lab / name).open("wb") as sparse:
            sparse.truncate(4 * GIB)
    _bomb(lab / "bomb.json.gz", GIB)
    _bomb(lab / "bomb10.json.gz", 10 * GIB, b" ", b'{"traceEvents": [')
    _bomb(lab / "newlines.log.gz", GIB, b"\n")
    compressed = _copy_run(lab, "compressed-run")
    _recompressed(compressed, 3, ".zst", _zstd)
    _recompressed(compressed, 4, ".xz", lzma.compress)
    _recompressed(compressed, 5, ".bz2", lambda data: __import__("bz2").compress(data))
    _padded_run(lab / "big-run")
    lz4 = _copy_run(lab, "lz4-run")
    _recompressed(lz4, 3, ".lz4", lambda data: b"\x04\x22\x4d\x18" + zlib.compress(data))
    odd = _copy_run(lab, "bytes-run")
    os.rename(odd / "rank-3.pt.trace.json.gz", os.fsencode(odd) + b"/rank-3\xff.pt.trace.json.gz")
    (_copy_run(lab, "greek-run") / "rank-9-\u03b3.pt.trace.json").write_text("hi\n")
    named = _copy_run(lab, "markup-run")
    (named / "rank-9 :x: [red]:fire:[bold].pt.trace.json").write_text("hi\n")
    (lab / "nccl.log").write_text(
        "host:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 1 cudaDev 0 busId 100 - Init COMPLETE\n"
    )


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("lab")
    _build_lab(folder)
    return folder


@dataclass(frozen=True)
class Case:
    """One row of the table: the command (`{lab}` the lab folder), how it is run, what it must give."""

    name: str
    args: tuple[str, ...]
    code: int
    line: str  # a regular expression the first line on stderr must match ("" : nothing on stderr)
    env: Mapping[str, str | None] = field(default_factory=dict)  # None: unset
    stdout: str = "pipe"  # pipe | closed | broken (reader gone before the first write) | full (/dev/full)
    stderr: str = "pipe"  # pipe | closed
    interrupt_after_s: float | None = None  # Ctrl-C to the command's process group after so many seconds
    absent: str | None = None  # a path (under {lab}) that must not exist afterwards
    stdout_has_no: str | None = None  # a regular expression stdout must not match
    needs: tuple[str, ...] = ()  # optional modules the case runs (skipped without them outside CI)


CASES: tuple[Case, ...] = (
    # the environment: standard streams, terminals, temporary folder, colours
    Case("stdout's reader gone (| head)", ("summary", "{lab}/run"), 0, "", stdout="broken"),
    Case("stdout closed (>&-)", ("summary", "{lab}/run"), 0, "", stdout="closed"),
    Case("collectives | head", ("collectives", "{lab}/run"), 0, "", stdout="broken"),
    Case("stragglers | head", ("stragglers", "{lab}/run"), 0, "", stdout="broken"),
    Case("nccl | head", ("nccl", "{lab}/nccl.log"), 0, "", stdout="broken"),
    Case("summary --json | head", ("summary", "{lab}/run", "--json"), 0, "", stdout="broken"),
    Case(
        "stdout closed, report -o",
        ("report", "{lab}/run", "-o", "{lab}/closed.html"),
        0,
        r"^wrote .*closed\.html \(\d",
        stdout="closed",
    ),
    Case("stderr closed (2>&-)", ("summary", "{lab}/run"), 0, "", stderr="closed"),
    Case(
        "stdout on a full disk",
        ("summary", "{lab}/run"),
        2,
        r"standard output: cannot write: No space left on device",
        stdout="full",
    ),
    Case(
        "ASCII terminal (PYTHONIOENCODING)",
        ("stragglers", "{lab}/run"),
        0,
        "",
        env={"PYTHONIOENCODING": "ascii"},
    ),
    Case("C locale", ("stragglers", "{lab}/run"), 0, "", env={"LANG": "C", "LC_ALL": "C", "PYTHONUTF8": "0"}),
    Case("latin-1 terminal", ("summary", "{lab}/run"), 0, "", env={"PYTHONIOENCODING": "latin-1"}),
    Case(
        "ASCII terminal, a skipped name not ASCII",
        ("summary", "{lab}/greek-run"),
        4,
        r"skipped .*rank-9-\\u03b3\.pt\.trace\.json: ",
        env={"PYTHONIOENCODING": "ascii"},
    ),
    Case(
        "TMPDIR missing",
        ("report", "{lab}/run", "--workers", "2", "-o", "{lab}/tmpdir.html"),
        0,
        r"^wrote ",
        env={"TMPDIR": "/nonexistent/tmp"},
    ),
    Case(
        "NO_COLOR beats FORCE_COLOR",
        ("summary", "{lab}/run"),
        0,
        "",
        env={"NO_COLOR": "1", "FORCE_COLOR": "1"},
        stdout_has_no="\x1b",
    ),
    Case("NO_COLOR", ("stragglers", "{lab}/run"), 0, "", env={"NO_COLOR": "1"}, stdout_has_no="\x1b"),
    # file kinds: checked before they are opened
    Case(
        "FIFO as the run",
        ("summary", "{lab}/pipe.json"),
        2,
        r"pipe\.json: a FIFO \(named pipe\), not a regular file",
    ),
    Case(
        "FIFO in the run folder",
        ("summary", "{lab}/fifo-run"),
        4,
        r"skipped .*rank-9\.pt\.trace\.json: .*a FIFO",
    ),
    Case(
        "FIFO as -o",
        ("report", "{lab}/run", "-o", "{lab}/out-pipe.html"),
        2,
        r"-o .*out-pipe\.html: is a FIFO \(named pipe\), not a file",
    ),
    Case(
        "FIFO as --nccl-log",
        ("summary", "{lab}/run", "--nccl-log", "{lab}/pipe.log"),
        4,
        r"NCCL log skipped: .*pipe\.log: a FIFO",
    ),
    Case("FIFO as an NCCL log", ("nccl", "{lab}/pipe.log"), 2, r"pipe\.log: a FIFO \(named pipe\)"),
    Case(
        "/dev/zero as an NCCL log",
        ("nccl", "/dev/zero"),
        2,
        r"/dev/zero: a character device, not a regular file",
    ),
    Case(
        "socket in the run folder",
        ("summary", "{lab}/socket-run"),
        4,
        r"skipped .*rank-9\.pt\.trace\.json: .*a socket",
    ),
    Case(
        "sparse 4 GiB trace",
        ("summary", "{lab}/sparse.json"),
        2,
        r"sparse\.json: a sparse file: 4294967296 bytes of which 0 are stored",
    ),
    Case("sparse 4 GiB NCCL log", ("nccl", "{lab}/sparse.log"), 2, r"sparse\.log: a sparse file"),
    Case(
        "gzip bomb (1 GiB) as a trace",
        ("summary", "{lab}/bomb.json.gz"),
        2,
        r"bomb\.json\.gz: not JSON \(binary data\)",  # 8 MiB of NUL bytes: before the budget
    ),
    Case(
        "gzip bomb (10 GiB) as a trace",
        ("summary", "{lab}/bomb10.json.gz"),
        2,
        r"gzip inflates more than 200 times .*a decompression bomb",
    ),
    Case(
        "gzip bomb of newlines as an NCCL log",
        ("nccl", "{lab}/newlines.log.gz"),
        2,
        r"newlines\.log\.gz \(compressed byte \d+\): gzip inflates more than 200 times",
    ),
    Case(".json.zst, .json.xz, .json.bz2 ranks", ("summary", "{lab}/compressed-run"), 0, ""),
    Case(
        ".json.lz4 rank",
        ("summary", "{lab}/lz4-run"),
        4,
        r"skipped .*rank-3\.pt\.trace\.json\.lz4: .*lz4-compressed: not read",
    ),
    Case("a name that is not UTF-8", ("summary", "{lab}/bytes-run", "--json"), 0, ""),
    Case(
        "a name that is not UTF-8, C locale",
        ("summary", "{lab}/bytes-run"),
        0,
        "",
        env={"LANG": "C", "LC_ALL": "C", "PYTHONUTF8": "0"},
    ),
    Case(
        "markup and emoji codes in a name",
        ("summary", "{lab}/markup-run"),
        4,
        r"skipped .*rank-9 :x: \[red\]:fire:\[bold\]\.pt\.trace\.json: ",
    ),
    # outputs never written over an input
    Case(
        "export -o onto a rank",
        ("export", "{lab}/run", "-o", "{lab}/run/rank-0.pt.trace.json.gz"),
        2,
        r"-o .*rank-0\.pt\.trace\.json\.gz: is an input of this command",
    ),
    Case(
        "report -o onto a rank",
        ("report", "{lab}/run", "-o", "{lab}/run/rank-1.pt.trace.json.gz"),
        2,
        r"-o .*rank-1\.pt\.trace\.json\.gz: is an input of this command \(.*\); refusing to write over it",
    ),
    Case(
        "export of nothing",
        ("export", "{lab}/run", "--ranks", "90-99", "-o", "{lab}/none.json.gz"),
        2,
        r"--ranks 90, 91, .*: the run has none of them",
        absent="none.json.gz",
    ),
    # gates: checked before anything is read
    Case(
        "--fail-on a misspelled metric",
        ("summary", "{lab}/run", "--fail-on", "exposed_gama>0.5"),
        2,
        r"--fail-on .*exposed_gama.*did you mean exposed_gamma",
    ),
    # signals and executors
    Case(
        "SIGINT while reading ranks",
        ("report", "{lab}/run", "--workers", "2", "-o", "{lab}/sigint.html"),
        130,
        r"^traceview: interrupted$",
        interrupt_after_s=1.0,
        absent="sigint.html",
    ),
    Case(
        "SIGINT while worker processes parse",
        ("report", "{lab}/big-run", "--workers", "4", "-o", "{lab}/sigint-pool.html"),
        130,
        r"^traceview: interrupted$",
        interrupt_after_s=2.0,
        absent="sigint-pool.html",
    ),
    Case(
        "SIGINT at start-up",
        ("report", "{lab}/run", "-o", "{lab}/sigint0.html"),
        130,
        r"^traceview: interrupted$",
        interrupt_after_s=0.4,
        absent="sigint0.html",
    ),
    Case(
        "unreachable --ray-address",
        ("summary", "{lab}/run", "--executor", "ray", "--ray-address", "nowhere.invalid:1"),
        2,
        r"--ray-address nowhere\.invalid:1: cannot connect within 10 s",
        needs=("ray",),
    ),
)


def _argv(case: Case, lab: Path) -> list[str]:
    return [sys.executable, "-m", "traceview", *(arg.replace("{lab}", str(lab)) for arg in case.args)]


def _environment(case: Case) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    for name, value in case.env.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def _streams(case: Case) -> tuple[list[str], dict[str, object]]:
    """A shell prefix closing a stream, and the Popen keyword arguments for the others."""
    prefix = []
    closing = " ".join(
        ">&-" if s == "stdout" else "2>&-" for s in ("stdout", "stderr") if getattr(case, s) == "closed"
    )
    if closing:
        prefix = ["bash", "-c", f'exec "$@" {closing}', "bash"]
    stdout: object = subprocess.PIPE
    if case.stdout == "full":
        stdout = open("/dev/full", "wb")  # noqa: SIM115 - closed after the run
    return prefix, {"stdout": stdout, "stderr": subprocess.PIPE}


def run_case(case: Case, lab: Path) -> tuple[int, str, bytes, float | None]:
    """Run `case`: its exit code, stderr, stdout and (interrupted) the seconds from the signal to the exit."""
    prefix, streams = _streams(case)
    process = subprocess.Popen(  # type: ignore[call-overload]
        [*prefix, *_argv(case, lab)],
        env=_environment(case),
        cwd=lab,
        start_new_session=True,
        **streams,
    )
    if case.stdout == "broken":
        process.stdout.close()  # the reader is gone before the command writes
    stopped = None
    if case.interrupt_after_s is not None:
        time.sleep(case.interrupt_after_s)
        signalled = time.monotonic()
        os.killpg(process.pid, signal.SIGINT)  # to the process group, workers included, as a terminal does
        process.wait(timeout=60)
        stopped = time.monotonic() - signalled
    out = b"" if case.stdout in ("broken", "closed", "full") else process.stdout.read()
    err = process.stderr.read()
    process.wait(timeout=300)
    if not isinstance(streams["stdout"], int):
        getattr(streams["stdout"], "close", lambda: None)()
    return process.returncode, err.decode("utf-8", "replace"), out, stopped


def _record(case: Case, code: int, line: str, stopped: float | None) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    index = CASES.index(case)
    shown = line.replace("|", "\\|") or "(nothing)"
    timing = f" (exit {stopped:.2f} s after the signal)" if stopped is not None else ""
    (ARTIFACTS / f"{index:02d}.md").write_text(f"| {case.name} | {code} | `{shown}`{timing} |\n")


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_environment_and_file_kind(case: Case, lab: Path) -> None:
    if "zst" in case.name:
        pytest.importorskip("zstandard")
    if case.needs:
        require(*case.needs)
    code, err, out, stopped = run_case(case, lab)
    lines = [line for line in err.splitlines() if line.strip()]
    first = lines[0] if lines else ""
    _record(case, code, first, stopped)
    assert "Traceback" not in err, err
    assert "Error:" not in first, err
    assert code == case.code, err
    assert re.search(case.line, first) if case.line else first == "", err
    assert len(lines) <= (2 if case.code == 4 else 1), err  # a partial run adds its summary line
    if case.absent is not None:
        assert not (lab / case.absent).exists()
        assert not list(lab.glob(".traceview-*")), "a temporary output was left behind"
    if case.stdout_has_no is not None:
        assert not re.search(case.stdout_has_no, out.decode("utf-8", "replace"))
    if stopped is not None:
        assert stopped < 1.5, f"exit {stopped:.2f} s after SIGINT"


def test_inputs_are_untouched_by_refused_outputs(lab: Path) -> None:
    """The refused `-o` left the rank as it was (the table's two cases ran first or run here)."""
    rank = lab / "run" / "rank-0.pt.trace.json.gz"
    before = rank.read_bytes()
    case = next(c for c in CASES if c.name == "export -o onto a rank")
    assert run_case(case, lab)[0] == 2
    assert rank.read_bytes() == before == (SAMPLE / rank.name).read_bytes()


def test_a_name_that_is_not_utf8_is_shown_as_its_bytes(lab: Path) -> None:
    case = next(c for c in CASES if c.name == "a name that is not UTF-8")
    code, _, out, _ = run_case(case, lab)
    assert code == 0
    assert b"rank-3\\\\xff.pt.trace.json.gz" in out  # the byte as \xff, JSON-escaped backslash


def join_table() -> str:
    """The table the cases wrote (run the tests first)."""
    rows = "".join(path.read_text() for path in sorted(ARTIFACTS.glob("*.md")))
    return "| case | exit code | the line on stderr |\n|---|---|---|\n" + rows


if __name__ == "__main__":
    table = join_table()
    (ARTIFACTS.parent / "exit-codes.md").write_text(table)
    sys.stdout.write(table)
