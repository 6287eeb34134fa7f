"""Benchmarks time traceview as it is installed: its modules imported from compiled bytecode.

`pip install` compiles a package's modules; an editable install compiles them on the first import, unless
`PYTHONDONTWRITEBYTECODE` is set (some sandboxes and CI images set it), in which case every run compiles about
500 modules again (~0.2 s of each command here). The packages imported on the other side of a comparison
(HolisticTraceAnalysis, polars) were compiled when they were installed, so the benchmarks compile traceview's
source folders once before timing anything. A child still reads bytecode under `PYTHONDONTWRITEBYTECODE`.
"""

from __future__ import annotations

import compileall
from pathlib import Path

PACKAGE_FOLDERS = ("traceview", "parsers", "reports")


def compile_sources(root: Path) -> None:
    """Compile the modules of the source tree at `root` (its `PACKAGE_FOLDERS`) to bytecode, quietly."""
    for folder in PACKAGE_FOLDERS:
        if (root / folder).is_dir():
            compileall.compile_dir(root / folder, quiet=1)
