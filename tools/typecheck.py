"""Run `mypy --strict` on the package as it installs: traceview/, with parsers/ as traceview.parsers and
reports/ as traceview.reports (the setuptools `package-dir` mapping, which mypy cannot follow on its own).

Builds a tree of symlinks under build/typecheck/ and checks it. Usage: `python tools/typecheck.py [mypy
args]`.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAPPING = {
    "traceview": ROOT / "traceview",
    "traceview/parsers": ROOT / "parsers",
    "traceview/reports": ROOT / "reports",
}


def build_tree(target: Path) -> Path:
    """Mirror the installed package layout under `target` with symlinks to the source files."""
    shutil.rmtree(target, ignore_errors=True)
    for package, source in MAPPING.items():
        destination = target / package
        destination.mkdir(parents=True, exist_ok=True)
        for file in source.rglob("*.py"):
            link = destination / file.relative_to(source)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(file)
    (target / "traceview" / "py.typed").touch()
    return target


def main() -> int:
    """Build the tree and run mypy on it; returns mypy's exit code."""
    tree = build_tree(ROOT / "build" / "typecheck")
    command = [
        sys.executable,
        "-m",
        "mypy",
        "--strict",
        "--config-file",
        str(ROOT / "pyproject.toml"),
        "-p",
        "traceview",
        *sys.argv[1:],
    ]
    return subprocess.call(command, cwd=tree)


if __name__ == "__main__":
    sys.exit(main())
