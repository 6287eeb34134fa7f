"""Saved JSON summaries read back by `traceview compare` and `traceview trend`: a summary is an input like a
trace, so a document whose values have the wrong type is refused in one line naming its file, never an
internal error.

`read_summary` checks what every reader needs before anything is compared: a JSON object (plain, or compressed
as `traceview.core.reading` reads), `schema_version` `1.x` (every minor version written so far stays readable:
a newer minor only adds keys), its sections objects or null, and the fields the command needs
(`COMPARE_NEEDS`, `TREND_NEEDS`) present and of their type; anything else is an `InputError` naming the file
and the field. `summary_files` lists the summaries a location names: a file, a folder's `.json` files, a
glob's matches, a URL.

The comparison reads many parts of a document; rather than a second schema of every key, a failure of the
computation on the documents given is traced back to the document that causes it: each one is read alone (the
same computation on copies of it), and the first that fails is named. A failure no single document causes is a
bug, and stays one.
"""

from __future__ import annotations

import glob
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from traceview.core.errors import InputError, RunError
from traceview.core.location import Location, is_url, location, url_files
from traceview.core.reading import ReadLimits, open_bytes, with_compressed
from traceview.core.sanitize import printable

Result = TypeVar("Result")


def _document_errors() -> tuple[type[Exception], ...]:
    """What reading a summary of the wrong shape raises (polars imported only when a summary is read)."""
    import polars as pl

    return (TypeError, ValueError, KeyError, AttributeError, IndexError, pl.exceptions.PolarsError)


"""What reading a value of the wrong type raises: a string where a number belongs, a list where an object
does."""
TEXT_KEYS = frozenset({"schema_version", "traceview_version"})
SUPPORTED_MAJOR = 1
VERSION = re.compile(r"^(\d+)\.(\d+)$")
SUMMARY_SUFFIXES = with_compressed((".json",))
SUMMARY_LIMITS = ReadLimits(max_bytes=4 << 30, size_hint="a summary's text passes 4 GiB")
PROBE_BYTES = 64 * 1024
COMPARE_NEEDS: tuple[tuple[str, type], ...] = (
    ("run", dict),
    ("time_budget", dict),
    ("time_budget.run_median", dict),
    ("time_budget.per_step", list),
)
"""What `compare` reads of every summary: (dotted field, its type)."""
TREND_NEEDS: tuple[tuple[str, type], ...] = (("time_budget", dict), ("time_budget.per_step", list))
"""What `trend` reads of every summary."""


NUMERIC_ROWS = ("time_budget.per_step", "time_budget.per_rank")
"""Lists of rows whose figures compare and trend test: every value is a number, a boolean or null."""


def check_rows(path: object, document: Mapping[str, Any]) -> None:
    """Refuse a summary with a figure of `NUMERIC_ROWS` that is not a number (a string, a list): one line
    naming the file and the first such field."""
    for dotted in NUMERIC_ROWS:
        rows = _field(document, dotted)
        for index, row in enumerate(rows if isinstance(rows, list) else ()):
            if not isinstance(row, dict):
                raise InputError(
                    str(path), f"field '{dotted}[{index}]' is a {type(row).__name__}, not an object"
                )
            for key, value in row.items():
                if value is not None and not isinstance(value, (int, float)):  # a bool is an int
                    raise InputError(
                        str(path),
                        f"field '{dotted}[{index}].{key}' is {printable(repr(value))[:40]}, not a number",
                    )


def check_sections(path: object, document: Mapping[str, Any]) -> None:
    """Refuse a summary whose top-level sections are not objects (or null)."""
    for key, value in document.items():
        if key not in TEXT_KEYS and value is not None and not isinstance(value, dict):
            raise InputError(
                str(path), f"not a traceview summary: {key!r} is a {type(value).__name__}, not an object"
            )


def read_documents(
    named: Sequence[tuple[str, Mapping[str, Any]]], read: Callable[[list[Mapping[str, Any]]], Result]
) -> Result:
    """`read` of the documents (each named by its source); when it fails on a value of the wrong type, an
    `InputError` naming the first document that fails alone (`read` of copies of it)."""
    errors = _document_errors()
    try:
        return read([document for _, document in named])
    except errors:
        for source, document in named:
            try:
                read([document] * len(named))
            except errors as error:
                problem = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
                raise InputError(source, f"not a well-formed traceview summary ({problem[:200]})") from None
        raise


def _field(document: Mapping[str, Any], dotted: str) -> Any:
    value: Any = document
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def check_summary(path: object, document: Any, needs: Sequence[tuple[str, type]]) -> dict[str, Any]:
    """`document` when it is a readable traceview summary with the fields `needs` (module docstring); else an
    `InputError` naming the file and the field."""
    if not isinstance(document, dict):
        raise InputError(
            str(path), f"not a traceview summary: a JSON {type(document).__name__}, not an object"
        )
    version = document.get("schema_version")
    if version is None:
        raise InputError(
            str(path),
            "not a traceview summary: no field 'schema_version' (write one with `traceview summary RUN "
            "--json`)",
        )
    found = VERSION.match(version) if isinstance(version, str) else None
    if found is None:
        raise InputError(
            str(path), f"not a traceview summary: field 'schema_version' is {version!r}, not MAJOR.MINOR"
        )
    if int(found[1]) != SUPPORTED_MAJOR:
        raise InputError(str(path), f"summary schema {version} is not 1.x: written by another traceview")
    check_sections(path, document)
    check_rows(path, document)
    for dotted, kind in needs:
        value = _field(document, dotted)
        if value is None:
            raise InputError(
                str(path),
                f"a traceview summary without field '{dotted}' (null or missing): cannot compare it",
            )
        if not isinstance(value, kind):
            raise InputError(
                str(path),
                f"field '{dotted}' is a {type(value).__name__}, not a JSON "
                f"{'object' if kind is dict else 'array'}",
            )
    return document


def is_summary(path: Location) -> bool:
    """Whether `path` is a saved summary rather than a trace or a run.json: a JSON file whose first 64 KiB
    name a `schema_version` (a summary begins with it; a trace never has it) and not the manifest's kind."""
    if not str(path).endswith(SUMMARY_SUFFIXES) or (isinstance(path, Path) and not path.is_file()):
        return False
    try:
        stream, _ = open_bytes(path, SUMMARY_LIMITS)
        with stream:
            head = stream.read(PROBE_BYTES)
    except (InputError, OSError):
        return False
    return b'"schema_version"' in head and b'"traceview-run"' not in head  # run.json has a version too


def read_summary(path: Location, needs: Sequence[tuple[str, type]] = COMPARE_NEEDS) -> dict[str, Any]:
    """The summary in `path` (plain or compressed JSON), checked (`check_summary`). Raises `InputError`."""
    stream, _ = open_bytes(path, SUMMARY_LIMITS)
    try:
        with stream:
            data = stream.read()
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    import msgspec

    try:
        document = msgspec.json.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # invalid UTF-8: one or the other by release
        raise InputError(path, f"not a traceview summary: not JSON ({exc})") from None
    return check_summary(path, document, needs)


def summary_files(spec: str) -> list[Location]:
    """The summaries `spec` names: a file, the `.json` files of a folder (run.json and its parts left out,
    sorted), a glob's matches, a URL (object, prefix or glob). Raises `RunError` when it names none."""
    if is_url(spec):
        return list(url_files(spec, SUMMARY_SUFFIXES))
    path = location(spec)
    assert isinstance(path, Path)
    if path.is_dir():
        found = sorted(p for p in path.iterdir() if p.name.endswith(SUMMARY_SUFFIXES) and not _manifest(p))
    elif path.exists():
        found = [path]
    else:
        found = sorted(Path(p) for p in glob.glob(spec) if not Path(p).is_dir())
    if not found:
        raise RunError(f"{spec}: no JSON summaries here (write them with `traceview summary RUN --json`)")
    return list[Location](found)


def _manifest(path: Path) -> bool:
    return path.name == "run.json" or (path.name.startswith("run.rank") and path.suffix == ".json")
