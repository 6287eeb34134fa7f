"""The run's boundary: which paths belong to a run, decided in one place (docs/run-manifest.md, "The run's
boundary").

The files of a run are those the user named on the command line, the files of a folder the user named (its
symbolic links followed), and, for a `run.json`, the entries that lie inside its folder or below `--run-root`
(the API's `run_root=`). A `run.json` at a URL may name only URLs under its own scheme, bucket and prefix. A
manifest entry outside (`../creds`, an absolute path elsewhere, a symbolic link that resolves elsewhere, a URL
elsewhere) is refused before anything is opened, with one line naming the entry; so is, wherever it comes
from, a path under `/proc`, `/sys` or `/dev` and anything that is not a regular file (a FIFO, a socket, a
device).

The API, for every reader of a run's files (traces, NCCL logs, Flight Recorder dumps, NCCL Inspector files):

- `special_kind(path)`: what a path is when no run's file can be it ("a FIFO (named pipe)", "under /proc"),
  else None; `check_kind` in `traceview.core.reading` refuses on it before any open.
- `RunBoundary.of_manifest(manifest, run_root)`, then `boundary.entry(text, field)`: the file a manifest
  entry names, or `InputError` naming the manifest and the entry.
- `folder_files(folder, wanted)`: the files of a folder the user named whose names `wanted` accepts, sorted,
  symbolic links followed, special files and folders left out (they are never opened).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from traceview.core.errors import InputError
from traceview.core.records import record
from traceview.core.sanitize import printable

SYSTEM_TREES: tuple[str, ...] = ("/proc", "/sys", "/dev")
"""Folders whose files are the system's, never a run's: refused wherever they are named, links followed."""

_KINDS: tuple[tuple[Callable[[int], bool], str], ...] = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def kind_of(mode: int) -> str | None:
    """What a file of mode `mode` is when it is not a regular file ("a FIFO (named pipe)"), else None."""
    return next((name for test, name in _KINDS if test(mode)), None)


def system_tree(path: str | Path) -> str | None:
    """The system folder (`/proc`, `/sys`, `/dev`) `path` lies in once its links are resolved, else None."""
    resolved = os.path.realpath(path)
    return next((tree for tree in SYSTEM_TREES if _below(resolved, tree)), None)


def _below(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def special_kind(path: str | Path) -> str | None:
    """What `path` is when it cannot be a run's file (under a system folder, or not a regular file), else
    None; a path that does not exist is None (its reader says so)."""
    tree = system_tree(path)
    if tree is not None:
        return f"a system file (under {tree})"
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return kind_of(mode)


def folder_files(folder: Path, wanted: Callable[[str], bool]) -> list[Path]:
    """The files of `folder` (one the user named) whose names `wanted` accepts, sorted: symbolic links
    followed, and folders, special files and system files left out, never opened."""
    try:
        entries = sorted(folder.iterdir())
    except OSError as exc:
        raise InputError(folder, f"cannot list: {exc.strerror or exc}") from None
    return [path for path in entries if wanted(path.name) and _regular(path)]


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode) and system_tree(path) is None
    except OSError:
        return False


def _url_prefix(url: str) -> str:
    """The scheme, bucket (host) and folder of a URL, ending with `/`: what entries must start with."""
    parts = urlsplit(url)
    folder = str(PurePosixPath(parts.path or "/").parent).rstrip("/")
    return f"{parts.scheme}://{parts.netloc}{folder}/"


@record
class RunBoundary:
    """The folders (links resolved) and URL prefix whose files belong to a run described by a manifest."""

    manifest: str
    folders: tuple[str, ...]
    url_prefix: str | None = None

    @classmethod
    def of_manifest(cls, manifest: str | Path, run_root: str | Path | None = None) -> RunBoundary:
        """The boundary of a `run.json` (a local path or a URL): its folder, and `run_root` when given."""
        text = str(manifest)
        if "://" in text and not text.startswith("file://"):
            return cls(text, (), _url_prefix(text))
        roots = [Path(text).parent, *([Path(run_root)] if run_root is not None else [])]
        return cls(text, tuple(os.path.realpath(root) for root in roots))

    def describe(self) -> str:
        """The boundary in words, for a refusal."""
        if self.url_prefix is not None:
            return f"under {self.url_prefix}"
        return " or ".join(printable(folder) for folder in self.folders)

    def entry(self, text: str, field: str, folder_ok: bool = False) -> str:
        """The path (or URL) the manifest entry `text` names, resolved against the manifest's folder or URL.
        Raises `InputError` naming the manifest, the entry and why, when it lies outside the run, is a system
        file or is not a regular file (a folder too, where `folder_ok`); nothing is opened."""
        if self.url_prefix is not None:
            return self._url_entry(text, field)
        if "://" in text and not text.startswith("file://"):
            self._refuse(text, field, "is a URL and this run.json a local file: outside the run")
        path = os.path.join(os.path.dirname(self.manifest) or ".", text.removeprefix("file://"))
        resolved = os.path.realpath(path)
        if not any(_below(resolved, folder) for folder in self.folders):
            how = "resolves" if os.path.islink(path) or resolved != os.path.abspath(path) else "lies"
            self._refuse(text, field, f"{how} outside the run ({self.describe()}; --run-root widens it)")
        kind = special_kind(path)
        if kind is not None and not (folder_ok and system_tree(path) is None and os.path.isdir(path)):
            self._refuse(text, field, f"is {kind}, not a regular file")
        return path

    def _url_entry(self, text: str, field: str) -> str:
        assert self.url_prefix is not None
        url = text if "://" in text else self.url_prefix + text
        if ".." in PurePosixPath(urlsplit(url).path).parts or not url.startswith(self.url_prefix):
            self._refuse(text, field, f"outside the run ({self.describe()})")
        return url

    def _refuse(self, text: str, field: str, why: str) -> None:
        raise InputError(self.manifest, f"{field} {printable(text, 200)!r} {why}: refused, not read")


def repeated(entries: Iterable[str]) -> tuple[int, int] | None:
    """The positions (first, again) of the first entry named twice, else None: found before any is read."""
    seen: dict[str, int] = {}
    for index, entry in enumerate(entries):
        first = seen.setdefault(entry, index)
        if first != index:
            return first, index
    return None
