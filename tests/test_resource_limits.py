"""Every resource limit is one line (docs/metrics.md, "Input limits"): an address-space limit read at start
(below the stated minimum: exit 2 before polars is imported; above it, the threads capped so that the run
fits: it aborted with allocator errors under `ulimit -v 600M`, and a MemoryError during import under 400M
ended in a traceback and exit 1), a MemoryError anywhere, a worker killed by a signal, too many open files,
and Ctrl-C in the first tenth of a second."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

from tests import report_factory as rf
from tests.shared_data import REAL, requires_shared
from traceview.core.address_space import MIB, MIN_ADDRESS_SPACE_BYTES, MIN_OPEN_FILES, threads_that_fit
from traceview.map.executors import _worker_death

BIG_RANK = REAL / "kineto" / "hta_df_index_resolver" / "df_index_resolver.json.gz"  # 54 MB of JSON


def _limited(kind: int, limit: int) -> None:
    resource.setrlimit(kind, (limit, limit))


def traceview_under(
    limit_bytes: int, *args: str, kind: int = resource.RLIMIT_AS, code: str | None = None
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", code] if code else [sys.executable, "-m", "traceview", *args]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=lambda: _limited(kind, limit_bytes),
        check=False,
        env={k: v for k, v in os.environ.items() if k not in ("POLARS_MAX_THREADS", "MALLOC_ARENA_MAX")},
    )


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rf.write_run(tmp_path_factory.mktemp("limits") / "run")


@pytest.mark.parametrize("megabytes", [400, 600])
def test_a_run_fits_under_an_address_space_limit(run: Path, megabytes: int) -> None:
    done = traceview_under(megabytes * MIB, "summary", str(run), "--json")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


@requires_shared
@pytest.mark.parametrize("megabytes", [400, 600])
def test_the_54_mb_rank_fits_under_400_and_600_mb(megabytes: int) -> None:
    """It ended with exit 139 (600M) and a traceback with exit 1 (400M)."""
    done = traceview_under(megabytes * MIB, "summary", str(BIG_RANK), "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    assert '"ranks": [' in done.stdout


def test_below_the_minimum_is_one_line_before_polars(run: Path) -> None:
    limit = MIN_ADDRESS_SPACE_BYTES - 64 * MIB
    done = traceview_under(limit, "summary", str(run))
    assert done.returncode == 2
    line = one_line(done)
    assert f"the address-space limit (ulimit -v) is {limit // MIB} MiB, below the" in line
    assert f"{MIN_ADDRESS_SPACE_BYTES // MIB} MiB traceview needs" in line


def test_threads_are_capped_to_fit() -> None:
    assert threads_that_fit(MIN_ADDRESS_SPACE_BYTES, 64) == 1
    assert threads_that_fit(1 << 40, 8) == 8
    assert threads_that_fit(600 * MIB, 64) == (600 - 256) // 64


def test_polars_sees_the_caps_under_a_limit() -> None:
    code = (
        "import sys; sys.argv = ['traceview', '--help']\n"
        "from traceview.core.address_space import fit_address_space; fit_address_space()\n"
        "import polars, os; print(polars.thread_pool_size(), os.environ['_RJEM_MALLOC_CONF'])"
    )
    done = traceview_under(400 * MIB, code=code)
    assert done.returncode == 0, done.stderr
    threads, conf = done.stdout.split()
    assert int(threads) <= (400 - 256) // 64
    assert conf.endswith("narenas:1,background_thread:false")


@pytest.mark.parametrize(
    "where",
    ["traceview.cli.app.analyse", "traceview.cli.main._run"],
    ids=["during the analysis", "outside every handler"],
)
def test_a_memory_error_anywhere_is_one_line(run: Path, where: str) -> None:
    module, name = where.rsplit(".", 1)
    code = (
        f"import sys, importlib; sys.argv = ['traceview', 'summary', {str(run)!r}]\n"
        "def oom(*args, **kwargs): raise MemoryError\n"
        f"importlib.import_module({module!r}).{name} = oom\n"
        "from traceview.cli.entry import main; main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 2, done.stderr
    assert "traceview: error: out of memory" in one_line(done)


def _die_by(signal_number: int) -> None:
    os.kill(os.getpid(), signal_number)


def test_a_worker_killed_by_a_signal_is_one_line_naming_it() -> None:
    pool = ProcessPoolExecutor(max_workers=1)
    try:
        with pytest.raises(BrokenProcessPool):
            pool.submit(_die_by, signal.SIGKILL).result(timeout=120)
        said = _worker_death(pool)
    finally:
        pool.shutdown(wait=True)
    assert said.startswith("a worker process was ended by signal SIGKILL (9) (out of memory")


def test_too_few_open_files_is_one_line(run: Path, tmp_path: Path) -> None:
    """Under `ulimit -n 7` polars' runtime panicked (exit 3, a Rust backtrace), under 5 the imports failed
    (a traceback, exit 1): a hard limit below the minimum is one line, exit 2; a low soft limit is raised."""
    output = str(tmp_path / "r.html")
    for limit in (5, 7, MIN_OPEN_FILES - 1):
        done = traceview_under(limit, "report", str(run), "-o", output, kind=resource.RLIMIT_NOFILE)
        assert done.returncode == 2, done.stderr
        said = f"the open-files limit (ulimit -n) is {limit}, below the {MIN_OPEN_FILES} traceview needs"
        assert said in one_line(done)
    done = traceview_under(MIN_OPEN_FILES, "report", str(run), "-o", output, kind=resource.RLIMIT_NOFILE)
    assert done.returncode == 0, done.stderr


def _soft_nofile(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def _python(code: str, timeout: int, before_exec: Callable[[], None]) -> subprocess.CompletedProcess[str]:
    """`python -c code`, output captured; `before_exec` runs in the child before its interpreter starts."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        preexec_fn=before_exec,
    )


def test_a_low_soft_open_files_limit_is_raised(run: Path) -> None:
    code = (
        "import resource; from traceview.core.address_space import fit_open_files; fit_open_files(); "
        "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])"
    )
    done = _python(code, 60, lambda: _soft_nofile(8))
    assert int(done.stdout) > 8


def _sigint_as_from_a_terminal() -> None:
    """In the child: SIGINT at its default, as a program started from a terminal has it, whatever this test
    process was left with (a background pytest, or an earlier test, leaves it ignored: the child would then
    ignore the signal, and traceview leaves an ignored SIGINT ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_that_a_library_swallows_still_ends_the_command_as_interrupted(run: Path) -> None:
    """A library that catches the `KeyboardInterrupt` and goes on (as compiled extensions' callbacks may) left
    the command to finish with exit 0, as if no Ctrl-C had come: it is still one line and exit 130."""
    code = (
        "import os, signal, sys, time; sys.argv = ['traceview', 'summary', "
        f"{str(run)!r}, '--json', '--quiet']\n"
        "import traceview.cli.entry as entry\n"
        "import traceview.reports.json.summary as summary\n"
        "rendered = summary.render_json\n"
        "def swallowing(*args, **kwargs):\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        time.sleep(0.2)\n"
        "    except KeyboardInterrupt:\n"
        "        pass\n"
        "    return rendered(*args, **kwargs)\n"
        "summary.render_json = swallowing\n"
        "entry.main()"
    )
    done = _python(code, 120, _sigint_as_from_a_terminal)
    assert (done.returncode, done.stderr) == (130, "traceview: interrupted\n")


def test_ctrl_c_in_the_first_tenth_of_a_second_is_one_line(run: Path) -> None:
    """It printed a traceback when the signal came before the handler (installed first thing in the entry
    point now). Signals sent once the entry point is imported: the interpreter's own start is not ours."""
    code = (
        f"import sys, time; sys.argv = ['traceview', 'summary', {str(run)!r}]\n"
        "import traceview.cli.entry as entry; print('ready', flush=True); entry.main()"
    )
    for delay in (0.0, 0.02, 0.05, 0.1):
        process = subprocess.Popen(
            [sys.executable, "-c", code],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_sigint_as_from_a_terminal,  # noqa: PLW1509 - one signal reset before exec
        )
        assert process.stdout is not None
        assert process.stdout.readline() == "ready\n"
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
        assert process.returncode == 130, err
        assert err == "traceview: interrupted\n"
