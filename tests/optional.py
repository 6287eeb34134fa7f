"""Optional parts of the test run (Ray, torch, HolisticTraceAnalysis, S3 through moto, a browser, notebooks).

The README's test command runs on a fresh machine with Python and pip only: there a test of a part that is
missing skips, naming the part and how to install it. Under CI (`CI=true`) `.ci/run` installs every part, so
a missing one is a failure, never a skip.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

INSTALL = {
    "ray": "pip install 'traceview[ray]'",
    "torch": "pip install 'traceview[record]'",
    "hta": "pip install HolisticTraceAnalysis",
    "moto": "pip install 'moto[server]'",
    "s3fs": "pip install 'traceview[remote]'",
    "nbclient": "pip install -e '.[test]'",
    "nbformat": "pip install -e '.[test]'",
    "ipykernel": "pip install -e '.[test]'",
}
"""How each optional module is installed, as the skip reason says it."""


def under_ci() -> bool:
    """CI runs every optional test: a missing part is a failure there."""
    return os.environ.get("CI") == "true"


def missing(*modules: str) -> list[str]:
    """The importable names among `modules` that this environment lacks."""
    return [name for name in modules if importlib.util.find_spec(name) is None]


def _reason(absent: list[str]) -> str:
    hints = sorted({INSTALL.get(name, f"pip install {name}") for name in absent})
    return f"{', '.join(absent)} not installed ({'; '.join(hints)})"


def require(*modules: str) -> None:
    """Skip the calling test when a module of `modules` is missing (a failure under CI), saying how to
    install it."""
    absent = missing(*modules)
    if not absent:
        return
    if under_ci():
        pytest.fail(f"{_reason(absent)}: CI must install it (.ci/run)", pytrace=False)
    pytest.skip(_reason(absent))


def requires(*modules: str) -> pytest.MarkDecorator:
    """A mark: skip when a module of `modules` is missing outside CI; under CI the test runs (and fails)."""
    absent = missing(*modules)
    return pytest.mark.skipif(bool(absent) and not under_ci(), reason=_reason(absent))
