"""Where the real inputs of `../shared/data/real/` live, and how a test that needs them says so.

A user's fresh clone has no `../shared`: tests that read it skip with a reason (`requires_shared`). Under CI
(`CI=true`) such a skip is turned into a failure by `tests/conftest.py`, so CI, which has `../shared`, runs
them all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"
REAL = SHARED / "data" / "real"
REAL_KINETO = REAL / "kineto"
REAL_NCCL_LOGS = REAL / "nccl_logs"
NOT_KINETO = REAL / "not_kineto"
SHARED_MISSING_REASON = "needs ../shared/data/real (the real traces), absent in this checkout"

requires_shared = pytest.mark.skipif(not REAL.is_dir(), reason=SHARED_MISSING_REASON)
"""Mark a test (or a module, as `pytestmark = requires_shared`) that reads `../shared/data/real`."""


def real_dirs(root: Path) -> list[Path]:
    """The sub-folders of `root`, sorted; none when `root` is absent (parametrisation must not fail)."""
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def real_files(root: Path, pattern: str = "*") -> list[Path]:
    """The files of `root` matching `pattern`, sorted; none when `root` is absent."""
    return sorted(p for p in root.glob(pattern) if p.is_file()) if root.is_dir() else []
