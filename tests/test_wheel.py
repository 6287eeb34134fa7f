"""The package as users get it: the wheel built from this tree, installed in a fresh virtual environment, runs
the README's main job and a process pool from its installed modules. An editable install hides a module or a
package-data file that pyproject's explicit `packages` list misses; this test does not."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "dp8_straggler"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    command = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        str(out),
    ]
    subprocess.run([*command, str(ROOT)], check=True, timeout=600, capture_output=True)
    [built] = out.glob("traceview-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh environment holding the wheel; its dependencies are this environment's (a path entry, so
    none of this environment's own `.pth` files, the editable install's among them, are read)."""
    home = tmp_path_factory.mktemp("env") / "venv"
    venv.create(home, with_pip=False)
    python = home / "bin" / "python"
    query = [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
    site = subprocess.run(query, check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    return python


def test_the_wheel_holds_the_package_and_its_data_and_not_the_test_helpers(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    for expected in (
        "traceview/parsers/kineto/__init__.py",
        "traceview/reports/html/templates/report.html.j2",
        "traceview/core/hardware.toml",
        "traceview/compare/thresholds.toml",
        "traceview/py.typed",
    ):
        assert expected in names
    assert not [name for name in names if "simulate" in name or name.startswith("tests/")]


def test_the_installed_wheel_runs_the_main_job(installed: Path, tmp_path: Path) -> None:
    report = tmp_path / "report.html"
    command = [str(installed), "-m", "traceview", "report", str(SAMPLE), "-o", str(report), "-q"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert report.stat().st_size > 100_000
    assert "Rank 5" in done.stderr  # the sample's straggler, in the verdict line


def test_workers_run_from_the_installed_modules(installed: Path, tmp_path: Path) -> None:
    code = (
        "import traceview, sys\n"
        "from traceview.options.run import build_options\n"
        "from traceview.options.user import UserOptions\n"
        "from traceview.reduce.pipeline import analyze_files\n"
        f"run = {str(SAMPLE)!r}\n"
        "result = analyze_files(run, build_options(run, UserOptions(workers=2)), parallel_min_bytes=0)\n"
        "print(traceview.__file__, len(result.header.ranks))\n"
    )
    done = subprocess.run(
        [str(installed), "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    location, ranks = done.stdout.split()
    assert Path(location).is_relative_to(installed.parents[1])
    assert ranks == "8"
