"""Input-derived text printed on a terminal carries no control character."""

from __future__ import annotations

import pytest

from traceview.core.sanitize import printable


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("ncclKernel_AllReduce", "ncclKernel_AllReduce"),
        ("a\x1b[31mred", "a\\x1b[31mred"),
        ("nul\x00bell\x07bs\x08cr\r", "nul\\x00bell\\x07bs\\x08cr\\x0d"),
        ("tab\tnl\n", "tab\\x09nl\\x0a"),
        ("c1\x9b31m", "c1\\x9b31m"),
        ("del\x7f", "del\\x7f"),
        ("bidi\u202eevil", "bidi\\u202eevil"),
        ("A100 · ü ✓", "A100 · ü ✓"),
    ],
)
def test_controls_become_visible_escapes(raw: str, shown: str) -> None:
    assert printable(raw) == shown


def test_long_text_is_cut_with_a_marker() -> None:
    assert printable("x" * 10, max_chars=4) == "xxxx...[6 more characters]"


def test_no_control_character_survives_any_code_point() -> None:
    every = "".join(chr(code) for code in range(0x3000) if not 0xD800 <= code < 0xE000)
    out = printable(every, max_chars=len(every))
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or c in "\u202e\u2066" for c in out)
