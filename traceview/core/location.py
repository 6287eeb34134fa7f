"""Where a trace lives: a local path, or a URL that fsspec reads (`s3://bucket/run/`, `gs://...`,
`https://...`), so that each map task, on any node of a Ray cluster, reads its own rank from object
storage.

URLs need the optional extra `pip install 'traceview[remote]'` (fsspec, and s3fs for `s3://`; other schemes
need their fsspec package, as `gcsfs` for `gs://`). An endpoint of one's own (MinIO, a test server) is given
the way fsspec and botocore read it: `FSSPEC_S3_ENDPOINT_URL` or `AWS_ENDPOINT_URL`, credentials as usual.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path, PurePosixPath
from typing import IO, Any
from urllib.parse import urlsplit

from traceview.core.errors import InputError, RunError, UsageError
from traceview.core.records import record

URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
REMOTE_EXTRA = "pip install 'traceview[remote]'"


@record
class Url:
    """A trace file at a URL fsspec can read; `size_bytes` when its listing said (else asked when needed)."""

    url: str
    size_bytes: int | None = None

    def __str__(self) -> str:
        return self.url

    @property
    def name(self) -> str:
        """The file's name, the last part of the URL's path."""
        return PurePosixPath(urlsplit(self.url).path).name

    def size(self) -> int:
        """The file's size in bytes. Raises `InputError` when it cannot be read."""
        if self.size_bytes is not None:
            return self.size_bytes
        system, path = filesystem(self.url)
        try:
            return int(system.size(path))
        except (OSError, ValueError) as exc:
            raise InputError(self.url, f"cannot read: {exc}") from exc

    def open(self) -> IO[bytes]:
        """The file opened for reading in binary. Raises `InputError` when it cannot be read."""
        system, path = filesystem(self.url)
        try:
            return system.open(path, "rb")  # type: ignore[no-any-return]
        except (OSError, ValueError) as exc:
            raise InputError(self.url, f"cannot read: {exc}") from exc


Location = Path | Url
"""A trace file: local, or at a URL."""


def size_of(file: Location) -> int:
    """The file's size in bytes, 0 when it cannot be known (for progress and scheduling, never for
    a result)."""
    try:
        return file.size() if isinstance(file, Url) else file.stat().st_size
    except (OSError, InputError, UsageError):
        return 0


def is_url(spec: str | Path) -> bool:
    """Whether `spec` is a URL (`scheme://...`) other than a local `file://` one."""
    text = str(spec)
    return isinstance(spec, str) and bool(URL_SCHEME.match(text)) and not text.startswith("file://")


def location(spec: str | Path | Url) -> Location:
    """The trace `spec` names: a `Url` for a URL, else a local `Path` (`file://` prefix dropped)."""
    if isinstance(spec, Url | Path):
        return spec
    if is_url(spec):
        return Url(spec)
    return Path(spec.removeprefix("file://"))


def filesystem(url: str) -> tuple[Any, str]:
    """fsspec's file system for `url` and the path on it. Raises `UsageError` when fsspec, or the package of
    the URL's scheme, is not installed."""
    try:
        fsspec: Any = importlib.import_module("fsspec")
    except ImportError:
        raise UsageError(f"{url}: reading URLs needs fsspec: {REMOTE_EXTRA}") from None
    try:
        return fsspec.core.url_to_fs(url)  # type: ignore[no-any-return]
    except ImportError as exc:
        raise UsageError(f"{url}: {exc} ({REMOTE_EXTRA})") from None
    except ValueError as exc:
        raise UsageError(f"{url}: {exc}") from None


def url_files(spec: str, suffixes: tuple[str, ...], kind: str = ".json or .json.gz traces") -> list[Url]:
    """The trace files a URL names: the object itself, the files ending in `suffixes` under a prefix (a
    "folder"), or a glob's matches; sorted, with their sizes. Raises `RunError` when it names none (`kind`:
    what the message says was looked for)."""
    system, path = filesystem(spec)
    scheme = spec[: URL_SCHEME.match(spec).end()]  # type: ignore[union-attr]  # `spec` is a URL
    try:
        if any(c in path for c in "*?["):
            found = system.glob(path, detail=True)
        elif system.isfile(path):
            found = {path: system.info(path)}
        else:
            found = {
                name: info
                for name, info in system.find(path, maxdepth=1, detail=True).items()
                if name.endswith(suffixes) and not name.endswith("/run.json")
            }
    except (OSError, ValueError) as exc:
        raise RunError(f"{spec}: cannot list: {exc}") from exc
    files = [
        Url(_with_scheme(scheme, name), info.get("size"))
        for name, info in sorted(found.items())
        if info.get("type") == "file"
    ]
    if not files:
        raise RunError(f"{spec}: no {kind} at this URL")
    return files


def _with_scheme(scheme: str, name: str) -> str:
    return name if URL_SCHEME.match(name) else scheme + name
