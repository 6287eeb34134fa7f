"""What a recommendation has at stake on the critical path (docs/metrics.md section 5): the time the path's
categories that correspond to the rule hold in the median step (`saved_us`) and its share of that step
(`score`), so the advice ranks by one measure; the holder of the most of that time, cited in the sentence;
and whether the stake is too small to advise (under `SMALL_SHARE` of the step: the rule stays out)."""

from __future__ import annotations

from traceview.core.records import record
from traceview.critical_path.analysis import SMALL_SHARE
from traceview.verdict.facts import Facts, duration_text


@record
class Stake:
    """A rule's time on the path per median step, its share of the step, and the sentence's clause."""

    held_us: float
    share: float
    clause: str

    @property
    def small(self) -> bool:
        """Under `SMALL_SHARE` of the step: not worth advice."""
        return self.share < SMALL_SHARE


def _top_holder(categories: tuple[str, ...], f: Facts) -> str | None:
    """The category among `categories` whose top holder holds the most (None without one)."""
    held = [
        (f[f"path_top_{c}_us"], c)
        for c in categories
        if f"path_top_{c}_us" in f and f"path_top_{c}_name" in f
    ]
    return max(held)[1] if held else None


def _clause(categories: tuple[str, ...], f: Facts) -> str:
    """` On the critical path, <calls> `<name>` hold <time> per step (<category>).`, or "" without one."""
    category = _top_holder(categories, f)
    if category is None:
        return ""
    calls = max(f[f"path_top_{category}_calls"], 1.0)
    held = duration_text(f, f"path_top_{category}_us")
    return (
        f" On the critical path, {calls:,.0f} `{f.word(f'path_top_{category}_name')}` event(s) hold {held} "
        f"of the {duration_text(f, 'path_step_us')} step ({category})."
    )


def stake(categories: tuple[str, ...], f: Facts) -> Stake | None:
    """The stake of a rule whose cause the path's `categories` hold; None when the rule has none or the
    path was not computed."""
    step = f.numbers.get("path_step_us", 0.0)
    if not categories or step <= 0:
        return None
    held = sum(f.numbers.get(f"path_{c}_us", 0.0) for c in categories)
    return Stake(held, held / step, _clause(categories, f))
