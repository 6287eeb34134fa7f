"""Saved JSON summaries read back by `traceview compare` and `traceview trend`: a summary is an input like a trace,
so a document whose values have the wrong type is refused in one line naming its file, never an internal error.

The comparison reads many parts of a document; rather than a second schema of every key, a failure of the
computation on the documents given is traced back to the document that causes it: each one is read alone (the
same computation on copies of it), and the first that fails is named. A failure no single document causes is a
bug, and stays one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import polars as pl

from traceview.core.errors import InputError

Result = TypeVar("Result")
DOCUMENT_ERRORS = (TypeError, ValueError, KeyError, AttributeError, IndexError, pl.exceptions.PolarsError)
"""What reading a value of the wrong type raises: a string where a number belongs, a list where an object does."""
TEXT_KEYS = frozenset({"schema_version", "traceview_version"})


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
    try:
        return read([document for _, document in named])
    except DOCUMENT_ERRORS:
        for source, document in named:
            try:
                read([document] * len(named))
            except DOCUMENT_ERRORS as error:
                problem = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
                raise InputError(source, f"not a well-formed traceview summary ({problem[:200]})") from None
        raise
