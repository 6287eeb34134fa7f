"""The build backend compiles the source tree for an editable install (tools/build_backend): every process
and pool worker then reads bytecode, even under `PYTHONDONTWRITEBYTECODE`, instead of compiling each
module."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
BACKEND_DIR = ROOT / "tools" / "build_backend"


def _backend() -> ModuleType:
    spec = importlib.util.spec_from_file_location("traceview_build", BACKEND_DIR / "traceview_build.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pyproject_builds_with_the_in_tree_backend() -> None:
    system = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["build-system"]
    assert system["build-backend"] == "traceview_build"
    assert [ROOT / p for p in system["backend-path"]] == [BACKEND_DIR]
    assert "include tools/build_backend/traceview_build.py" in (ROOT / "MANIFEST.in").read_text("utf-8")


def test_the_package_folders_are_compiled_and_read_without_writing(tmp_path: Path) -> None:
    modules = [tmp_path / "traceview" / "a.py", tmp_path / "parsers" / "b.py", tmp_path / "reports" / "c.py"]
    for module in modules:
        module.parent.mkdir()
        module.write_text("VALUE = 6 * 7\n", encoding="utf-8")
    other = tmp_path / "tests" / "d.py"  # not a package folder: left alone
    other.parent.mkdir()
    other.write_text("VALUE = 1\n", encoding="utf-8")
    assert _backend().compile_package_folders(tmp_path)
    compiled = [Path(importlib.util.cache_from_source(str(m))) for m in modules]
    assert all(path.is_file() for path in compiled)
    assert not Path(importlib.util.cache_from_source(str(other))).exists()
    probe = "import a, sys; print(a.__cached__, a.VALUE)"
    environment = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(modules[0].parent)}
    printed = subprocess.run(
        [sys.executable, "-P", "-c", probe], env=environment, check=True, capture_output=True, text=True
    ).stdout.split()
    assert printed == [str(compiled[0]), str(6 * 7)]


def test_a_tree_that_does_not_compile_is_named_as_such(tmp_path: Path) -> None:
    broken = tmp_path / "traceview" / "broken.py"
    broken.parent.mkdir()
    broken.write_text("def (:\n", encoding="utf-8")
    assert not _backend().compile_package_folders(tmp_path)
