"""The command line on real inputs: exit codes 0 (ok), 1 (a --fail-on threshold crossed), 2 (bad input),
one line of error naming the file, the versioned JSON, and quiet stderr when it is not a terminal."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import report_factory as rf
from tests.shared_data import NOT_KINETO as NOT_KINETO_DIR
from tests.shared_data import REAL_KINETO, real_files, requires_shared

NOT_KINETO = real_files(NOT_KINETO_DIR)
REAL_RUN = REAL_KINETO / "hta_sampled_2rank"


def documented_schema_version() -> str:
    """The current schema version as docs/json-schema.md states it (`Current: **MAJOR.MINOR**`)."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "json-schema.md").read_text(encoding="utf-8")
    found = re.search(r"Current: \*\*(\d+\.\d+)\*\*", text)
    assert found is not None
    return found[1]


def traceview(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "traceview", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        check=False,
    )


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rf.write_run(tmp_path_factory.mktemp("cli") / "run")


@requires_shared
@pytest.mark.parametrize("path", NOT_KINETO, ids=lambda p: p.name)
def test_not_kineto_is_exit_2_with_one_line_naming_the_file(path: Path) -> None:
    done = traceview("summary", str(path))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert str(path) in lines[0]
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


@requires_shared
def test_json_summary_of_a_real_run(tmp_path: Path) -> None:
    done = traceview("summary", str(REAL_RUN), "--json")
    # ranks 0 and 1 of a 128-rank job: the folder lacks ranks its traces promise (partial, exit 4, one line)
    assert done.returncode == 4, done.stderr
    document = json.loads(done.stdout)
    assert document["schema_version"] == documented_schema_version()
    assert list(document)[:6] == [
        "schema_version",
        "traceview_version",
        "run",
        "verdict",
        "recommendations",
        "timeline",
    ]
    assert document["run"]["ranks"] == [0, 1]  # sampled_rank-0 and sampled_rank-1
    # no progress bar when stderr is not a terminal: only the ranks not read
    assert done.stderr == "traceview: warning: rank(s) 2-127 not read: the run has 2 of world size 128\n"


def test_fail_on_crossed_is_exit_1_and_still_prints(small_run: Path) -> None:
    # exposed gamma per step: rank 0 200/400 = 0.5, rank 1 200/500 = 0.4 (three steps each) -> median 0.45
    crossed = traceview("summary", str(small_run), "--json", "--fail-on", "exposed_gamma>0.44")
    assert crossed.returncode == 1
    assert "exposed_gamma>0.44" in crossed.stderr
    assert "0.45" in crossed.stderr
    assert json.loads(crossed.stdout)["schema_version"]
    held = traceview("summary", str(small_run), "--fail-on", "exposed_gamma>0.46")
    assert held.returncode == 0, held.stderr
    assert held.stdout.index("verdict") < held.stdout.index("Time budget per rank")  # the verdict comes first


def test_bad_threshold_and_missing_input_are_exit_2(small_run: Path, tmp_path: Path) -> None:
    assert traceview("summary", str(small_run), "--fail-on", "exposed_gamma>>1").returncode == 2
    missing = traceview("summary", str(tmp_path / "nothing-here"))
    assert missing.returncode == 2
    assert str(tmp_path / "nothing-here") in missing.stderr


def test_report_writes_a_self_contained_page(small_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    done = traceview("report", str(small_run), "-o", str(out))
    assert done.returncode == 0, done.stderr
    page = out.read_text(encoding="utf-8")
    assert 'id="plotly-js"' in page
    assert 'id="verdict-sentence"' in page
    cdn = traceview("report", str(small_run), "-o", str(tmp_path / "cdn.html"), "--plotlyjs", "cdn")
    assert cdn.returncode == 0
    assert (tmp_path / "cdn.html").stat().st_size < out.stat().st_size / 5


def test_report_open_hands_the_page_to_the_default_browser(small_run: Path, tmp_path: Path) -> None:
    """`--open` opens the written page with the user's browser: $BROWSER (Python's `webbrowser` reads it)
    here names a command that records the address it is given."""
    import os
    import shlex

    out, seen = tmp_path / "report.html", tmp_path / "opened.txt"
    recorder = f"import sys; open({str(seen)!r}, 'w').write(sys.argv[1])"
    environment = {**os.environ, "BROWSER": f"{shlex.quote(sys.executable)} -c {shlex.quote(recorder)} %s"}
    done = subprocess.run(
        [sys.executable, "-m", "traceview", "report", str(small_run), "-o", str(out), "--open"],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert seen.read_text(encoding="utf-8") == out.resolve().as_uri()
    seen.unlink()
    without = subprocess.run(
        [sys.executable, "-m", "traceview", "report", str(small_run), "-o", str(tmp_path / "b.html")],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
        check=False,
    )
    assert without.returncode == 0
    assert not seen.exists()  # without --open, nothing is opened
