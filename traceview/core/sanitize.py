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


_HTML_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}
_MARKDOWN_PUNCTUATION = frozenset("\\`*_{}[]()#+-.!|~=:$%^/,;?")
_MARKDOWN_TABLE = {ord(c): f"\\{c}" for c in _MARKDOWN_PUNCTUATION}
_MARKDOWN_TABLE.update({ord(c): entity for c, entity in _HTML_ENTITIES.items()})
_AUTOLINKS = (("://", ":/\u200b/"), ("www.", "www\u200b."), ("@", "@\u200b"))
"""What GitHub's Markdown turns into a link by itself (a URL, `www.`, an e-mail address), each broken by a
zero-width space (shown the same, never a link)."""


def markdown_text(text: object, max_chars: int = MAX_PRINTED_CHARS) -> str:
    """`text` (from an input) as Markdown that renders as exactly that text: made `printable`, every Markdown
    punctuation mark backslash-escaped (no emphasis, link, code, table cell or heading), every HTML character
    an entity (no tag), and what GitHub would link by itself broken (no link but those traceview writes)."""
    value = printable(text, max_chars)
    for found, broken in _AUTOLINKS:
        value = value.replace(found, broken)
    return value.translate(_MARKDOWN_TABLE)
