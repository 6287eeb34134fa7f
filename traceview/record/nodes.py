"""A job recorded on several nodes (docs/run-manifest.md, "Several nodes"): each node's `traceview record -o
DIR` wrote its ranks' traces and parts into a folder of its own; `traceview record-merge` merges the parts of
every such folder into one `run.json` whose paths lead into the node folders. (Nodes that share one folder
need no merge: every recorder merges the parts present when its command ends.)"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import msgspec

from traceview.core.errors import RunError
from traceview.core.sanitize import printable
from traceview.options.manifest import MANIFEST_NAME, ManifestLog, ManifestTrace, RunManifest, load_manifest
from traceview.record.parts import PART_PATTERN, merge, part_paths, write_atomic


def node_folders(folders: Sequence[Path]) -> list[Path]:
    """The folders that hold parts: each folder given that holds some, else its sub-folders that do."""
    found: list[Path] = []
    for folder in folders:
        if not folder.is_dir():
            raise RunError(f"{printable(folder)}: not a folder")
        inside = [folder] if part_paths(folder) else sorted(p for p in folder.iterdir() if p.is_dir())
        found += [path for path in inside if part_paths(path)]
    if not found:
        raise RunError(
            f"{printable(', '.join(map(str, folders)))}: no run.rank<N>.json part in the folder(s)"
        )
    return sorted(set(found))


def default_output(folders: Sequence[Path]) -> Path:
    """Where the merged run.json goes by default: the one folder given, else the folders' common parent."""
    if len(folders) == 1:
        return folders[0]
    return Path(os.path.commonpath([str(folder.resolve()) for folder in folders]))


def _relative(path: str, folder: Path, output: Path) -> str:
    return Path(os.path.relpath(folder.resolve() / path, output.resolve())).as_posix()


def _rebased(part: RunManifest, folder: Path, output: Path) -> RunManifest:
    """`part` with its trace paths relative to `output` instead of `folder`."""
    traces = [
        ManifestTrace(
            rank=t.rank, path=_relative(t.path, folder, output), host=t.host, local_rank=t.local_rank
        )
        for t in part.traces
    ]
    logs = [
        ManifestLog(path=_relative(log.path, folder, output), rank=log.rank, host=log.host)
        for log in part.nccl_logs
        if (folder / log.path).is_file()
    ]
    return msgspec.structs.replace(part, traces=traces, nccl_logs=logs)


def _parts(folders: Sequence[Path]) -> list[tuple[int, Path, Path]]:
    """(rank, folder, part) of every part, in rank order; a rank in two folders is refused."""
    found: dict[int, tuple[int, Path, Path]] = {}
    for folder in folders:
        for path in part_paths(folder):
            rank = int(PART_PATTERN.match(path.name)[1])  # type: ignore[index]
            if rank in found:
                other = found[rank][2]
                raise RunError(f"rank {rank} is recorded twice: {printable(other)} and {printable(path)}")
            found[rank] = (rank, folder, path)
    return [found[rank] for rank in sorted(found)]


def merge_folders(folders: Sequence[Path], output: Path) -> Path:
    """Merge the parts of every node folder into `output/run.json` (written atomically); returns its path."""
    output.mkdir(parents=True, exist_ok=True)
    parts = [_rebased(load_manifest(path), folder, output) for _, folder, path in _parts(folders)]
    logs = [log for part in parts for log in part.nccl_logs]
    return write_atomic(output / MANIFEST_NAME, merge(parts, output, logs=logs))
