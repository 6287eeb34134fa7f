"""The build backend: setuptools', plus bytecode for an editable install.

`pip install` compiles a wheel's modules as it installs them, so every process of a regular install reads
bytecode. An editable install (`pip install -e .`) installs no module: the interpreter reads the source tree,
and compiles each module on each import when `PYTHONDONTWRITEBYTECODE` is set (some images and CI set it) or
the tree was never run, so every command and every pool worker compiled the ~180 modules it imports again
(0.15-0.2 CPU-s each). `build_editable` therefore compiles the source tree's package folders once, at
install, with the installing interpreter; a module edited later is compiled again when it is next imported
(the bytecode records the source's time and size), and a tree that cannot be written is installed as before.
"""

from __future__ import annotations

import compileall
from pathlib import Path

from setuptools import build_meta
from setuptools.build_meta import *  # noqa: F403 - every hook of setuptools' backend, unchanged

PACKAGE_FOLDERS = ("traceview", "parsers", "reports")
"""The source folders installed as traceview, traceview.parsers and traceview.reports (pyproject.toml)."""


def compile_package_folders(root: Path) -> bool:
    """Compile every module under `root`'s `PACKAGE_FOLDERS` to bytecode beside it (`__pycache__`); whether
    all compiled (a folder that cannot be written, or a module that does not compile, is left as it was)."""
    compiled = [
        compileall.compile_dir(root / folder, quiet=2, workers=1)
        for folder in PACKAGE_FOLDERS
        if (root / folder).is_dir()
    ]
    return all(compiled)


def build_editable(
    wheel_directory: str,
    config_settings: dict[str, str | list[str]] | None = None,
    metadata_directory: str | None = None,
) -> str:
    """setuptools' editable wheel, after compiling the source tree it points at (the current folder)."""
    name: str = build_meta.build_editable(wheel_directory, config_settings, metadata_directory)
    compile_package_folders(Path.cwd())
    return name
