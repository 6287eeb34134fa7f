"""Shared pytest options."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    """`--regen-golden`: rewrite the golden files under tests/golden/ instead of comparing against them."""
    parser.addoption(
        "--regen-golden",
        action="store_true",
        default=False,
        help="rewrite tests/golden/* from the current output instead of comparing (review the diff!)",
    )
