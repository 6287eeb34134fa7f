"""The one way input-derived text reaches a rich console: made printable (`traceview.core.sanitize.printable`:
controls, bidi overrides and bytes of names that are not UTF-8 as escapes), then rich's markup escaped, so
a `[red]` or a `[/]` in a file name is text. Emoji codes (`:x:`) are left as they are: the command line's
consoles never read them (`traceview.cli.streams.console`)."""

from __future__ import annotations

from rich.markup import escape

from traceview.core.sanitize import MAX_PRINTED_CHARS, printable


def safe(value: object, max_chars: int = MAX_PRINTED_CHARS) -> str:
    """`value` as text a rich console prints as it is."""
    return escape(printable(value, max_chars))
