"""Every output file traceview writes (a report, an export, a JSON summary, a trend history), through one
writer that never loses an input and never leaves half a file (docs/metrics.md, "Errors and exit codes").

- `refuse_inputs(output, inputs)`: an output path that resolves to one of the run's inputs (a trace, a log,
  `run.json`, a saved summary; through symbolic or hard links) is a usage error, said before anything is read.
- `atomic_output(output)`: the content is written to a temporary file beside the target, then renamed onto it;
  an error or an interrupt removes the temporary file, so the target is either the old file or the whole new
  one. An existing target that is not a regular file (a folder, a FIFO, a device) is refused.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from traceview.core.boundary import kind_of
from traceview.core.errors import UsageError
from traceview.core.sanitize import printable

TEMPORARY_PREFIX = ".traceview-"
"""The temporary file beside the target starts so (and ends with the target's name, suffixes included)."""

_UNFINISHED: set[Path] = set()
"""The temporary files being written now (removed by `remove_unfinished_outputs` on a hard interrupt)."""


def remove_unfinished_outputs() -> None:
    """Remove every temporary output still being written (an interrupt that ends the process at once)."""
    for temporary in list(_UNFINISHED):
        with contextlib.suppress(OSError):
            temporary.unlink()


def _identity(path: Path) -> tuple[str, tuple[int, int] | None]:
    """The path resolved (symbolic links followed) and its (device, inode) when it exists."""
    resolved = os.path.realpath(path)
    try:
        found = os.stat(resolved)
    except OSError:
        return resolved, None
    return resolved, (found.st_dev, found.st_ino)


def refuse_inputs(output: Path, inputs: Iterable[str | Path], flag: str = "-o") -> None:
    """Raise `UsageError` when `output` is one of `inputs` (the same path once links are resolved, or the same
    file by device and inode); inputs that are URLs are not local files and cannot be written over. A target
    that cannot be written (a device such as /dev/full, a FIFO, a missing folder) is refused here too, as
    `atomic_output` would, so that nothing is analysed nor printed before the refusal."""
    _target(output, flag)
    target, target_id = _identity(output)
    for given in inputs:
        if "://" in str(given):
            continue
        path, path_id = _identity(Path(given))
        if path == target or (target_id is not None and path_id == target_id):
            raise UsageError(
                f"{flag} {printable(output)}: is an input of this command ({printable(given)}); "
                "refusing to write over it"
            )


def _target(output: Path, flag: str) -> Path:
    """Where the output goes (symbolic links followed, so the link keeps pointing at the new file); an
    existing target that is not a regular file, or a missing folder, is a usage error."""
    target = Path(os.path.realpath(output))
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise UsageError(f"{flag} {printable(output)}: cannot write: {exc.strerror or exc}") from None
    kind = None if mode is None else kind_of(mode)
    if kind is not None:
        raise UsageError(f"{flag} {printable(output)}: is {kind}, not a file: refusing to write to it")
    if not target.parent.is_dir():
        raise UsageError(f"{flag} {printable(output)}: cannot write: no folder {printable(target.parent)}")
    return target


def _file_mode() -> int:
    """The mode a new file gets (0o666 less the umask), for the temporary file that becomes the target."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_output(output: Path, flag: str = "-o") -> Iterator[Path]:
    """A temporary path beside `output` (same folder, same suffixes) to write; renamed onto `output` when the
    block ends without error, removed otherwise (an interrupt included). Raises `UsageError` naming `flag`
    when the target cannot be written."""
    target = _target(output, flag)
    try:
        handle, name = tempfile.mkstemp(prefix=TEMPORARY_PREFIX, suffix=f"-{target.name}", dir=target.parent)
    except OSError as exc:
        raise UsageError(f"{flag} {printable(output)}: cannot write: {exc.strerror or exc}") from None
    os.close(handle)
    temporary = Path(name)
    _UNFINISHED.add(temporary)
    try:
        yield temporary
        mode = os.stat(target).st_mode & 0o7777 if target.exists() else _file_mode()
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except OSError as exc:
        raise UsageError(f"{flag} {printable(output)}: cannot write: {exc.strerror or exc}") from None
    finally:
        _UNFINISHED.discard(temporary)
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()


def write_output(output: Path, content: str | bytes, flag: str = "-o") -> int:
    """Write `content` (text as UTF-8, names that are not UTF-8 shown as `\\xNN`) to `output` atomically
    (`atomic_output`); returns the bytes written."""
    data = content if isinstance(content, bytes) else content.encode("utf-8", "traceview.bytes")
    with atomic_output(output, flag) as temporary:
        temporary.write_bytes(data)
    return len(data)
