"""Text from an input file or a file system made safe to show: the one place such text is escaped.

A trace, a log or a file name can hold ESC sequences, NUL, backspace, carriage returns or
bidirectional-override characters; printed raw they would move the cursor, recolour or rewrite what the user
reads. `printable` shows each such character as a visible escape (`\\x1b`, `\\u202e`) instead, and cuts very
long text with a marker. A file name that is not UTF-8 reaches Python with its bytes as lone surrogates
(U+DC80..U+DCFF): each is shown as the byte it stands for (`\\xff`), and the codec error handler
`traceview.bytes` does the same wherever such text is encoded (an output file, JSON). Every renderer that
writes input-derived text to a terminal passes it through here (the terminal renderers then escape rich's
markup, `traceview.reports.text.safe`; emoji codes are never read, the consoles are made without them); the
HTML report escapes on its own; Markdown (`traceview compare --markdown`, a CI comment) goes through
`markdown_text`.
"""

from __future__ import annotations

import codecs
import re
import unicodedata
from collections.abc import Sequence

MAX_PRINTED_CHARS = 4096
"""Longest input-derived text printed as it is; longer text is cut with a marker saying how much was left out.
"""

_BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _visible(char: str) -> str:
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte of a name that is not UTF-8 (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _shown_as_escapes(error: UnicodeError) -> tuple[str, int]:
    """Codec error handler `traceview.bytes`: characters that cannot be encoded (lone surrogates)
    as escapes."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    return "".join(map(_visible, error.object[error.start : error.end])), error.end


codecs.register_error("traceview.bytes", _shown_as_escapes)


def shown(text: str) -> str:
    """`text` with its lone surrogates (bytes of a name that is not UTF-8) shown as escapes, nothing else
    changed: for text that must stay whole (JSON values, page text) but be valid UTF-8."""
    return text.encode("utf-8", "traceview.bytes").decode("utf-8")


def _unsafe(char: str) -> bool:
    return char in _BIDI_CONTROLS or unicodedata.category(char) in ("Cc", "Cs")


_TABLE = {code: _visible(chr(code)) for code in (*range(0x20), *range(0x7F, 0xA0))}
_TABLE.update({ord(char): _visible(char) for char in _BIDI_CONTROLS})


def printable(text: object, max_chars: int = MAX_PRINTED_CHARS) -> str:
    """`str(text)` with every control, surrogate and bidi-override character shown as an escape, cut to
    `max_chars` characters with a marker. Tabs and newlines are escaped too: one value stays on one line."""
    value = str(text)
    if len(value) > max_chars:
        value = f"{value[:max_chars]}...[{len(value) - max_chars} more characters]"
    cleaned = value.translate(_TABLE)
    if cleaned.isascii():
        return cleaned
    return "".join(_visible(char) if _unsafe(char) else char for char in cleaned)


def listed(values: Sequence[object], most: int = 16) -> str:
    """The first `most` values joined by commas, with how many there are in all when some are left out (the
    caller makes the result printable)."""
    shown = ", ".join(str(value) for value in values[:most])
    return shown if len(values) <= most else f"{shown}, ... ({len(values)} in all)"


_MARKDOWN_INLINE = re.compile(r"[`*\[\]|~$&<]|\\(?=[!-/:-@\[-`{-~]| ?\Z)|_+")
"""What Markdown reads as markup wherever it stands: a code span, emphasis, a link or image, a table cell,
strikethrough, GitHub's math, an entity or a tag; a backslash that would escape what follows (or the entity
of a last space); a run of underscores (escaped unless it stands between two letters or digits, where it
cannot emphasise)."""
_MARKDOWN_ENTITIES = {"&": "&amp;", "<": "&lt;"}
_MARKDOWN_EDGES = (
    (re.compile(r"^([#>+=-])"), r"\\\1"),
    (re.compile(r"^(\d{1,9})([.)])"), r"\1\\\2"),
    (re.compile(r"^ "), "&#32;"),
    (re.compile(r" $"), "&#32;"),
)
"""What Markdown reads at the text's edges: when it opens a line (a list item's content), a heading, a
quote, a list, a setext underline or a thematic break, an ordered list's number, an indented code block; a
space at either end, which would keep the emphasis around the text from opening or closing (an entity)."""
_GITHUB_AUTOLINKS = (
    (re.compile("://"), ":/\u200b/"),
    (re.compile(r"www\."), "www\u200b."),
    (re.compile("@"), "@\u200b"),
    (re.compile(r"#(?=\d)"), "#\u200b"),
)
"""What GitHub turns into a link by itself (a URL, `www.`, an e-mail address or a mention, an issue's
number), each broken by a zero-width space (shown the same, never a link)."""


def _markdown_escape(match: re.Match[str]) -> str:
    found = match.group()
    text, start, end = match.string, match.start(), match.end()
    intraword = start > 0 and end < len(text) and text[start - 1].isalnum() and text[end].isalnum()
    if found[0] == "_" and intraword:
        return found  # between two letters or digits: no emphasis can open or close there
    return _MARKDOWN_ENTITIES.get(found) or "".join(f"\\{char}" for char in found)


def markdown_text(text: object, max_chars: int = MAX_PRINTED_CHARS) -> str:
    """`text` (from an input) as Markdown that renders as exactly that text, wherever it lands on a line (a
    paragraph, bold, a table cell, a list item): made `printable`, what Markdown would read as markup escaped
    (no emphasis, link, image, code, table cell, heading, list, quote nor tag) and what GitHub would link by
    itself broken (no link but those traceview writes). Punctuation that is no markup where it stands stays
    as it is (`pg=0 4 MiB - 64 MiB`, `a -> b`, `kernel_us`), so the raw comment reads as plain text too."""
    value = printable(text, max_chars)
    for found, broken in _GITHUB_AUTOLINKS:
        value = found.sub(broken, value)
    value = _MARKDOWN_INLINE.sub(_markdown_escape, value)
    for edge, escaped in _MARKDOWN_EDGES:
        value = edge.sub(escaped, value, count=1)
    return value
