"""One run, one job: traces that cannot come from the same job are set apart, never mixed into one analysis.

Each rule reads one thing every trace says about its job and sorts the traces into groups (`JobRule.groups`);
the largest group is kept (on a tie, the one holding the lowest rank), and the traces of every other group are
set apart with the rule's reason, naming what they say against what the kept traces say. Rules run in table
order on what the earlier ones kept. A trace that says nothing for a rule (no world size, no base time, no
process-group configuration) is kept by that rule. docs/metrics.md, "Inputs", defines the rules.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from traceview.core.errors import ParseWarning, RunError
from traceview.core.records import record
from traceview.model.time_base import placement_warnings, trace_time_base
from traceview.model.trace import RankTrace, Run, SkippedInput

DAY_NS = 86_400 * 10**9
"""Two traces whose `baseTimeNanoseconds` lie further apart than this (with no trace between) are two jobs."""

Groups = Callable[[Sequence[RankTrace]], list[Hashable | None]]


@record
class JobRule:
    """A property every trace of one job shares: `groups` labels each trace (None: says nothing)."""

    name: str
    groups: Groups
    describe: Callable[[Hashable], str]


def _world_size(traces: Sequence[RankTrace]) -> list[Hashable | None]:
    return [trace.meta.world_size for trace in traces]


def _recorded_day(traces: Sequence[RankTrace]) -> list[Hashable | None]:
    """Traces clustered by base time: sorted, a new cluster wherever the gap to the previous passes a day."""
    known = sorted({trace.meta.base_time_ns for trace in traces if trace.meta.base_time_ns > 0})
    cluster: dict[int, int] = {}
    for previous, current in zip(known[:1] + known, known, strict=False):
        cluster[current] = current if current - previous > DAY_NS else cluster.get(previous, current)
    return [cluster.get(trace.meta.base_time_ns) for trace in traces]


def _within_world(traces: Sequence[RankTrace]) -> list[Hashable | None]:
    return [
        None if trace.meta.world_size is None or trace.rank < trace.meta.world_size else "beyond"
        for trace in traces
    ]


def _process_groups(traces: Sequence[RankTrace]) -> list[Hashable | None]:
    """Traces linked when their process-group configurations share a group (name and size): a trace takes the
    label of the first earlier trace it shares a group with, else its own index, so disjoint configurations
    get different labels (one pass, a dict of the groups seen)."""
    seen: dict[tuple[str, int], int] = {}
    labels: list[Hashable | None] = []
    for index, trace in enumerate(traces):
        groups = [(pg.name, pg.size) for pg in trace.meta.process_groups]
        label = next((seen[group] for group in groups if group in seen), index)
        seen.update({group: label for group in groups if group not in seen})
        labels.append(label if groups else None)
    return labels


RULES: tuple[JobRule, ...] = (
    JobRule("world size", _world_size, lambda value: f"world size {value}"),
    JobRule("recording day", _recorded_day, lambda value: f"recorded from base time {value} ns"),
    JobRule("rank within the world", _within_world, lambda value: "a rank beyond its world size"),
    JobRule("process groups", _process_groups, lambda value: "process groups no other file shares"),
)


def _kept_label(traces: Sequence[RankTrace], labels: Sequence[Hashable | None]) -> Hashable | None:
    counts: dict[Hashable, int] = {}
    for label in labels:
        if label is not None and label != "beyond":
            counts[label] = counts.get(label, 0) + 1
    if not counts:
        return None
    lowest = {
        label: min(t.rank for t, lab in zip(traces, labels, strict=True) if lab == label) for label in counts
    }
    return max(counts, key=lambda label: (counts[label], -lowest[label]))


def _apply(rule: JobRule, traces: Sequence[RankTrace]) -> tuple[list[RankTrace], list[SkippedInput]]:
    labels = rule.groups(traces)
    keep = _kept_label(traces, labels)
    kept, apart = [], []
    for trace, label in zip(traces, labels, strict=True):
        if label is None or label == keep:
            kept.append(trace)
            continue
        said = rule.describe(label)
        kept_says = "" if keep is None else f", the {labels.count(keep)} kept file(s) {rule.describe(keep)}"
        apart.append(SkippedInput(trace.path, f"another job ({rule.name}): this file says {said}{kept_says}"))
    return kept, apart


def one_job(
    traces: Sequence[RankTrace], source: str = ""
) -> tuple[list[RankTrace], list[SkippedInput], list[ParseWarning]]:
    """The traces of the largest consistent job, the others set apart (each with its reason), and a warning
    (on `source`) naming them when any was."""
    kept, apart = list(traces), []
    if len(kept) < 2:
        return kept, [], []
    for rule in RULES:
        kept, set_apart = _apply(rule, kept)
        apart += set_apart
    if not apart:
        return kept, [], []
    names = ", ".join(s.path for s in apart[:5]) + (f" and {len(apart) - 5} more" if len(apart) > 5 else "")
    message = (
        f"the input holds more than one job: analysed {len(kept)} file(s) of one job, set apart "
        f"{len(apart)} ({names}); each is listed as skipped with its reason"
    )
    return kept, apart, [ParseWarning(source, message)]


def make_run(
    traces: Sequence[RankTrace],
    skipped: Sequence[SkippedInput] = (),
    source: str = "",
    checked_where_made: bool = False,
) -> Run:
    """Assemble and validate a run: ranks sorted; of several files, one without a rank is skipped, of two
    files claiming one rank the first (by path) kept and the other skipped with both named, and traces of
    another job set apart (`traceview.load.one_job`), each skipped with its reason. Traces
    `checked_where_made` (the map's compact traces, made by a worker from a trace it checked) are not
    checked again (`Run.validate`: 0.2 s at 1,024 ranks, in the parent)."""
    ordered = sorted(traces, key=lambda trace: (trace.rank, trace.path))
    assumed = [trace for trace in ordered if trace.meta.rank_source == "assumed"]
    if len(ordered) > 1 and len(assumed) == len(ordered):
        raise RunError(
            f"{assumed[0].path}: no rank in distributedInfo or in the file name, and the run has "
            f"{len(ordered)} files (name files rank<N>.json or pass one file)"
        )
    unranked = [
        SkippedInput(trace.path, "no rank in distributedInfo or in the file name (name it rank<N>.json)")
        for trace in assumed
        if len(ordered) > 1
    ]
    ranked = [trace for trace in ordered if len(ordered) == 1 or trace.meta.rank_source != "assumed"]
    job, apart, warnings = one_job(ranked, source)
    kept: dict[int, RankTrace] = {}
    claimed: list[SkippedInput] = []
    for trace in job:
        first = kept.setdefault(trace.rank, trace)
        if first is not trace:
            reason = f"rank {trace.rank} is also claimed by {first.path}; that file was kept"
            claimed.append(SkippedInput(trace.path, reason))
    every_skipped = (*skipped, *unranked, *apart, *claimed)
    ranks = tuple(kept.values())
    warnings += placement_warnings(ranks, trace_time_base(ranks))
    run = Run(ranks=ranks, skipped=every_skipped, source=source, extra_warnings=tuple(warnings))
    return run if checked_where_made else run.validate()
