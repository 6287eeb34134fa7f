"""The categories of the critical path (docs/metrics.md, "Critical path") as data: the device's classes, the
host's rules, and the order in which they claim a moment that several cover.

A moment of the step window W is held by the device when some device event runs then (the first class in
`PATH_ORDER` among those that run); while the device idles, by the innermost thing the launching thread
does, matched by `HOST_RULES` (runtime calls by name before operators, operators before annotations); by
nothing recorded (`other`) when the launching threads record no event at all.
"""

from __future__ import annotations

from functools import cache

import polars as pl

from traceview.core.records import record
from traceview.events.kernel_classes import COMPUTE_CLASSES, MEMORY_CLASSES

DEVICE_CATEGORIES: tuple[str, ...] = tuple(f"compute_{c}" for c in (*COMPUTE_CLASSES, *MEMORY_CLASSES))
"""A category per kernel class of docs/metrics.md ("Kernels and operators"): compute and memory classes."""
COMM_TRANSFER, PEER_WAIT, OTHER = "comm_transfer", "peer_wait", "other"


@record
class HostPathRule:
    """One row: a host row of one of `kinds` (op | annotation | runtime) whose name matches `regex` (polars
    syntax, searched) holds an idle device's time as `category`; `meaning` says why."""

    category: str
    kinds: tuple[str, ...]
    regex: str
    meaning: str
    min_us: float = 0.0  # the row lasts at least this long (0, or LONG_LAUNCH_US)


_RUNTIME = ("runtime",)
LONG_LAUNCH_US = 1000.0
"""A kernel launch call this long loads the kernel's module (lazy loading on its first call): a launch takes
microseconds; the trace records the driver's module call only with driver tracing on (an inferred edge)."""
HOST_RULES: tuple[HostPathRule, ...] = (
    HostPathRule(
        "blocking_module_load",
        _RUNTIME,
        r"^(?:cu|hip)(?:Module(?:Load\w*|GetFunction)|LibraryLoad\w*|LibraryGetKernel)(?:_v\d+)?$",
        "a kernel's module loaded on its first call (inside a launch)",
    ),
    HostPathRule(
        "blocking_module_load",
        _RUNTIME,
        r"^(?:cuda|hip|cu)(?:LaunchKernel|LaunchCooperativeKernel|ModuleLaunchKernel|ExtLaunchKernel)\w*$",
        "a launch call of a millisecond or more: its kernel's module loaded on the first call (inferred)",
        LONG_LAUNCH_US,
    ),
    HostPathRule(
        "blocking_alloc",
        _RUNTIME,
        r"^(?:cuda|hip)(?:Free|Malloc|FreeHost|MallocHost|HostAlloc|HostFree|MallocManaged)(?:_v\d+)?$"
        r"|^cuMem(?:Alloc|Free)\w*$",
        "an allocator call that synchronises the device (the caching allocator off or thrashing)",
    ),
    HostPathRule(
        "blocking_copy",
        _RUNTIME,
        r"^(?:cuda|hip|cu)Memcpy\w*$",
        "a copy call the host waits in (pageable memory, a read of device values)",
    ),
    HostPathRule(
        "blocking_sync",
        _RUNTIME,
        r"^(?:cuda|hip|cu)(?:Device|Stream|Event|Ctx)(?:Synchronize|Query)(?:_v\d+)?$",
        "the host waits for the device (stream, device or event synchronize)",
    ),
    HostPathRule(
        "graph_replay", _RUNTIME, r"^(?:cuda|hip|cu)GraphLaunch\w*$", "a CUDA/HIP graph launched whole"
    ),
    HostPathRule("launch", _RUNTIME, r".", "any other runtime call: launches and their bookkeeping"),
    HostPathRule(
        "host_data",
        ("op", "annotation"),
        r"^enumerate\(DataLoader\)#|DataLoader|^## ?(?:load_batch|data_load\w*|wait_for_batch) ?##$",
        "the data loader",
    ),
    HostPathRule(
        "host_optimizer",
        ("op", "annotation"),
        r"^Optimizer\.(?:step|zero_grad)#|^## (?:optimizer|zero_grad) ##$",
        "the optimizer's host code",
    ),
    HostPathRule("host_other", ("op",), r".", "any other operator"),
    HostPathRule(
        "host_python", ("annotation",), r".", "inside the step's annotations but in no operator: Python"
    ),
)
"""The host rules, first match wins for a row; while the device idles, the first category in `PATH_ORDER`
among the rows that run then holds the moment."""

HOST_CATEGORIES: tuple[str, ...] = tuple(dict.fromkeys(rule.category for rule in HOST_RULES))
PATH_ORDER: tuple[str, ...] = (*DEVICE_CATEGORIES, COMM_TRANSFER, *HOST_CATEGORIES)
"""Every category a recorded event can hold, by precedence (index = priority); `other` holds the rest."""
CATEGORIES: tuple[str, ...] = (*DEVICE_CATEGORIES, COMM_TRANSFER, PEER_WAIT, *HOST_CATEGORIES, OTHER)
"""The `per_step` categories, in display order; their columns (`<category>_us`) sum to `step_us`."""
CATEGORY_COLUMNS: tuple[str, ...] = tuple(f"{category}_us" for category in CATEGORIES)
IDLE_CATEGORIES: tuple[str, ...] = (*HOST_CATEGORIES, OTHER)
"""The categories that hold the device's idle (no device event and no host collective runs)."""
PRIORITY = {category: index for index, category in enumerate(PATH_ORDER)}


@cache
def device_priority() -> pl.Expr:
    """The priority of a classified device event (`kernel_class`, `event_class`, `kind`): communication and
    host collectives are `comm_transfer`; every other event its class's category (built once, at first
    use: building it costs more than running it on a small rank)."""
    comm = PRIORITY[COMM_TRANSFER]
    found: pl.Expr = pl.lit(PRIORITY["compute_other"], pl.Int32)
    for category in reversed(DEVICE_CATEGORIES):
        kernel_class = category.removeprefix("compute_")
        found = (
            pl.when(pl.col("kernel_class") == kernel_class).then(pl.lit(PRIORITY[category])).otherwise(found)
        )
    is_comm = (pl.col("event_class") == "comm") | (pl.col("kind") == "host")
    return pl.when(is_comm).then(pl.lit(comm, pl.Int32)).otherwise(found).cast(pl.Int32)


def _first_rule(rules: list[tuple[int, HostPathRule]]) -> pl.Expr:
    """The position in `HOST_RULES` of the first of `rules` (position, rule) a row matches (null: none)."""
    found: pl.Expr = pl.lit(None, pl.Int32)
    for position, rule in reversed(rules):
        matches = pl.col("kind").is_in(list(rule.kinds)) & pl.col("name").str.contains(rule.regex)
        found = pl.when(matches).then(pl.lit(position, pl.Int32)).otherwise(found)
    return found.cast(pl.Int32)


@cache
def host_priorities() -> tuple[tuple[pl.Expr, ...], tuple[pl.Expr, ...]]:
    """Of a distinct host row (`kind`, `name`), in two steps: the first rule it matches of those that hold
    any row (`_short_rule`) and of those that hold only a row of `LONG_LAUNCH_US` or more (`_long_rule`);
    then its priority by `HOST_RULES` when it lasts under `LONG_LAUNCH_US` (`_short`: the first rule's) and
    when it lasts longer (`_long`: the earlier rule's); null for a row no rule reads. Each rule's pattern is
    searched once (built once, at first use)."""
    short = [(position, rule) for position, rule in enumerate(HOST_RULES) if rule.min_us == 0]
    long_only = [(position, rule) for position, rule in enumerate(HOST_RULES) if rule.min_us > 0]
    first = (_first_rule(short).alias("_short_rule"), _first_rule(long_only).alias("_long_rule"))
    of_rule = {position: PRIORITY[rule.category] for position, rule in enumerate(HOST_RULES)}
    short_priority = pl.col("_short_rule").replace_strict(of_rule, return_dtype=pl.Int32)
    long_priority = pl.min_horizontal("_short_rule", "_long_rule").replace_strict(
        of_rule, return_dtype=pl.Int32
    )
    return first, (short_priority.alias("_short"), long_priority.alias("_long"))
