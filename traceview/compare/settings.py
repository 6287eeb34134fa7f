"""The thresholds of `traceview compare` and `traceview trend` (docs/compare.md, "Thresholds"): the defaults
(`thresholds.toml`), a user's `--thresholds FILE.toml` checked key by key (an unknown table or key, a value
of the wrong kind, a per-metric value that is not a number, a trend metric no summary has: a usage error
naming the file and the key), then `--threshold PCT`; every value within its bounds."""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from traceview.compare.findings import TREND_FOLLOWED, CompareSettings, TrendSettings
from traceview.core.errors import InputError, UsageError
from traceview.core.reading import check_kind
from traceview.core.sanitize import printable


def _table(text: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{source}: not valid TOML: {exc}") from None


SETTING_KINDS: dict[str, dict[str, str]] = {
    "compare": {
        "threshold_pct": "number",
        "alpha": "number",
        "min_step_share": "number",
        "min_samples": "count",
        "metric_threshold_pct": "table",
    },
    "trend": {
        "threshold_pct": "number",
        "alpha": "number",
        "metrics": "metrics",
        "min_segment": "count",
        "min_step_share": "number",
    },
}
"""Every key a thresholds file may hold, by table, with the kind of its value: anything else is refused."""


def _kind_problem(kind: str, value: Any) -> str | None:
    """Why `value` is not of `kind` (None: it is)."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "number" and not number:
        return f"takes a number, got {value!r}"
    if kind == "count" and (not isinstance(value, int) or isinstance(value, bool)):
        return f"takes a whole number, got {value!r}"
    if kind == "table" and not isinstance(value, dict):
        return f"takes a table of metric = percent, got {value!r}"
    if kind == "metrics" and not (
        isinstance(value, list) and value and all(isinstance(v, str) for v in value)
    ):
        return f"takes a list of metric names, got {value!r}"
    return None


def check_thresholds_file(table: Mapping[str, Any], source: str) -> None:
    """Refuse (`UsageError` naming the file and the key) a thresholds table with an unknown table or key, a
    value of the wrong kind, a per-metric threshold that is not a number, or a trend metric no summary has."""
    for section, values in table.items():
        kinds = SETTING_KINDS.get(section)
        if kinds is None or not isinstance(values, dict):
            raise UsageError(
                f"{printable(source)}: unknown table [{printable(section)}] (known: compare, trend)"
            )
        for key, value in values.items():
            if key not in kinds:
                known = ", ".join(kinds)
                raise UsageError(
                    f"{printable(source)}: unknown key {section}.{printable(key)} (known: {known})"
                )
            problem = _kind_problem(kinds[key], value)
            if problem is None and kinds[key] == "table":
                bad = next((k for k, v in value.items() if _kind_problem("number", v)), None)
                problem = None if bad is None else f"{printable(bad)} {_kind_problem('number', value[bad])}"
            if problem is None and kinds[key] == "metrics":
                unknown = [m for m in value if m not in TREND_FOLLOWED]
                problem = (
                    f"names unknown metric(s) {printable(unknown)} (known: {', '.join(TREND_FOLLOWED)})"
                    if unknown
                    else None
                )
            if problem is not None:
                raise UsageError(f"{printable(source)}: {section}.{printable(key)} {problem}")


def load_settings(
    path: Path | None = None, threshold_pct: float | None = None
) -> tuple[CompareSettings, TrendSettings]:
    """The defaults, overridden by the file at `path` (if any, checked: `check_thresholds_file`), then by
    `threshold_pct` (if given)."""
    defaults = _table(
        resources.files("traceview.compare").joinpath("thresholds.toml").read_text(), "defaults"
    )
    if threshold_pct is not None and not (math.isfinite(threshold_pct) and threshold_pct >= 0):
        raise UsageError(f"--threshold must be a finite percentage >= 0, got {threshold_pct}")
    user = {} if path is None else _table(_read(path), str(path))
    check_thresholds_file(user, str(path))
    compare = {**defaults["compare"], **user.get("compare", {})}
    trend = {**defaults["trend"], **user.get("trend", {})}
    if threshold_pct is not None:
        compare["threshold_pct"] = trend["threshold_pct"] = threshold_pct
    per_metric = {**defaults["compare"]["metric_threshold_pct"], **compare.get("metric_threshold_pct", {})}
    compare_settings = CompareSettings(
        threshold_pct=float(compare["threshold_pct"]),
        alpha=float(compare["alpha"]),
        min_step_share=float(compare["min_step_share"]),
        min_samples=int(compare["min_samples"]),
        metric_threshold_pct=tuple(sorted((k, float(v)) for k, v in per_metric.items())),
    )
    trend_settings = TrendSettings(
        threshold_pct=float(trend["threshold_pct"]),
        alpha=float(trend["alpha"]),
        metrics=tuple(str(m) for m in trend["metrics"]),
        min_segment=int(trend["min_segment"]),
        min_step_share=float(trend["min_step_share"]),
        metric_threshold_pct=compare_settings.metric_threshold_pct,  # one table of per-metric thresholds
    )
    for settings in (compare_settings, trend_settings):
        _check_bounds(settings, str(path or "thresholds"))
    return compare_settings, trend_settings


SETTING_BOUNDS = {"threshold_pct": (0.0, 1e6), "alpha": (1e-9, 1.0), "min_step_share": (0.0, 1.0)}
SETTING_BOUNDS.update(min_samples=(1, 1e6), min_segment=(1, 1e6))
"""The range of each setting (both ends included); a per-metric threshold has `threshold_pct`'s."""


def _check_bounds(settings: CompareSettings | TrendSettings, source: str) -> None:
    values = {name: getattr(settings, name) for name in SETTING_BOUNDS if hasattr(settings, name)}
    values.update(getattr(settings, "metric_threshold_pct", ()))
    for name, value in values.items():
        low, high = SETTING_BOUNDS.get(name, SETTING_BOUNDS["threshold_pct"])
        if not (math.isfinite(value) and low <= value <= high):
            raise UsageError(
                f"{printable(source)}: {printable(name)} = {value} is not in [{low:g}, {high:g}]"
            )


def _read(path: Path) -> str:
    try:
        check_kind(path)
    except InputError as exc:
        raise UsageError(f"--thresholds {exc}") from None
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{printable(path)}: cannot read the thresholds file: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{printable(path)}: not a UTF-8 TOML file (byte {exc.start})") from None
