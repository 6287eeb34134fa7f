"""Shared pytest options, and the rule that CI never skips a test for want of `../shared`."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from tests.shared_data import SHARED_MISSING_REASON

# pytest imports readline at start-up (its capture plugin's workaround), and GNU readline exports the
# terminal's COLUMNS and LINES into the C environment, which os.environ does not show but every program a test
# starts inherits: a piped traceview would then take 80 columns for a terminal's width (docs/metrics.md, "The
# terminal at any width"). The tests of the width state theirs.
for _name in ("COLUMNS", "LINES"):
    os.unsetenv(_name)
    os.environ.pop(_name, None)


def pytest_addoption(parser: pytest.Parser) -> None:
    """`--regen-golden`: rewrite the golden files under tests/golden/ instead of comparing against them."""
    parser.addoption(
        "--regen-golden",
        action="store_true",
        default=False,
        help="rewrite tests/golden/* from the current output instead of comparing (review the diff!)",
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Under CI (`CI=true`) a skip for want of `../shared` is a failure: CI has it and must run every test."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") != "true" or not report.skipped:
        return
    reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if SHARED_MISSING_REASON in reason:
        report.outcome = "failed"
        report.longrepr = f"skipped under CI: {reason}"


@pytest.fixture(scope="module")
def interruptible() -> Iterator[None]:
    """Programs started by the tests get Ctrl-C as from a terminal, even when the tests run as a background
    job (`pytest &` in a script inherits SIGINT ignored, its children too, and traceview leaves an ignored
    SIGINT ignored): SIGINT is handled in this process for the module's duration (a handled signal is reset
    to its default in a program started from here)."""
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
