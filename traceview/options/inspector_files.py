"""The NCCL Inspector output files a run is analysed with (`--inspector`, run.json's `nccl_inspector`;
docs/metrics.md, "NCCL Inspector").

`--inspector PATH` names a file, a folder (its files whose first 64 KB name
`inspector_output_format_version`) or a glob, like `--nccl-log`; run.json's `nccl_inspector` lists files
beside it. Nothing is read that the user or the manifest did not name.
"""

from __future__ import annotations

import glob
from collections.abc import Sequence
from pathlib import Path

from traceview.core.boundary import folder_files
from traceview.core.errors import UsageError
from traceview.core.sanitize import printable
from traceview.options.manifest import RunManifest, manifest_inspector_files

INSPECTOR_PROBE_BYTES = 64 << 10
INSPECTOR_MARK = b'"inspector_output_format_version"'
"""What the first `INSPECTOR_PROBE_BYTES` of an Inspector JSON output file say (every record carries it)."""


def _is_inspector(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return INSPECTOR_MARK in handle.read(INSPECTOR_PROBE_BYTES)
    except OSError:
        return False


def _named(spec: str) -> list[Path]:
    """The files one `--inspector` spec names; `UsageError` when it names none."""
    path = Path(spec)
    flag = f"--inspector {printable(spec)}"
    if path.is_dir():
        inside = [p for p in folder_files(path, lambda _name: True) if _is_inspector(p)]
        if not inside:
            raise UsageError(f"{flag}: a folder without NCCL Inspector output in it")
        return inside
    if path.exists():
        return [path]
    matches = sorted(Path(p) for p in glob.glob(spec) if Path(p).is_file())
    if not matches:
        raise UsageError(f"{flag}: no such file, folder or glob match")
    return matches


def inspector_paths(
    given: Sequence[str], manifest: tuple[Path, RunManifest] | None, run_root: str | None = None
) -> tuple[Path, ...]:
    """The Inspector files `given` names, then those the manifest lists (inside the run), each once, in
    order."""
    found = [path for spec in given for path in _named(spec)]
    if manifest is not None:
        found += manifest_inspector_files(*manifest, run_root)
    return tuple(dict.fromkeys(found))
