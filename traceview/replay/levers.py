"""The levers of the replay (docs/metrics.md, "Replay", Levers): each is the replay with one change.

`LEVERS` is the table: a lever's name, the grammar of its argument, what it changes and the notes (edges and
assumptions) it rests on. A change is a `Variant` of the skeleton: new segments (compute and host parts
scaled), new transfers, ranks whose arrival moves, the overlap mode, the factor on T_comp; or the reason the
lever cannot be replayed.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import polars as pl

from traceview.core.costmodel import bus_factor_expr
from traceview.core.errors import UsageError
from traceview.core.records import record
from traceview.prediction.gamma import Prediction
from traceview.prediction.pricing import price


@record
class Recorded:
    """What the levers read: the skeleton (`body`, `tails`), the named stragglers, the prediction and the
    world size."""

    body: pl.DataFrame
    tails: pl.DataFrame
    stragglers: tuple[int, ...]
    prediction: Prediction | None
    world: int


@record
class Variant:
    """A skeleton with one change: `transfer_us` per member row, the compute and host factors on every
    segment, `late` ranks, `overlap` mode; `comp_factor` divides T_comp in gamma; `notes` what it rests on."""

    transfer: pl.Expr
    notes: str
    compute_factor: float = 1.0
    host_factor: float = 1.0
    late: frozenset[int] = frozenset()
    overlap: bool = False
    frame: pl.DataFrame | None = None  # the body with a `transfer_us` of its own (comm_model, ranks:K)


Change = Callable[[Recorded, float], Variant | str]
RECORDED = "the recorded order of collectives on each rank, their recorded launch offsets"
SPLIT = (
    "each segment's compute and host time on the rank's critical path (the map's open nodes; the step's "
    "budget share of compute outside communication only where the map recorded no node)"
)
LANE = (
    "each rank's compute kept whole: its last collective entered no earlier than its compute before it (the "
    "compute that ran under its collectives included), its step ended no earlier than all of it"
)


def _as_recorded(found: Recorded, _: float) -> Variant:
    return Variant(pl.col("transfer_us"), f"the skeletons unchanged: {RECORDED}; waits from the last arrival")


def _no_straggler(found: Recorded, rank: float) -> Variant | str:
    late = (int(rank),) if rank >= 0 else found.stragglers
    if not late:
        return "no straggler is named (docs/metrics.md, 'Across ranks'): nothing to remove"
    names = ", ".join(map(str, late))
    return Variant(
        pl.col("transfer_us"),
        f"rank(s) {names}: each arrival moves to the latest arrival of the other members; the rest replayed "
        f"(their compute and host time kept: {LANE})",
        late=frozenset(late),
    )


def _comm(found: Recorded, factor: float) -> Variant:
    return Variant(
        pl.col("transfer_us") / factor, f"every transfer {factor:g}x faster; waits re-derived from arrivals"
    )


def _compute(found: Recorded, factor: float) -> Variant:
    return Variant(
        pl.col("transfer_us"),
        f"compute {factor:g}x faster: the compute part of every segment and tail, the compute under the "
        f"collectives and T_comp divided by {factor:g} ({SPLIT})",
        compute_factor=factor,
    )


def _host_free(found: Recorded, _: float) -> Variant:
    return Variant(
        pl.col("transfer_us"),
        "the host part of every segment removed (launch overhead, blocking host calls and other host work "
        f"between collectives: {SPLIT}); compute and transfers kept ({LANE})",
        host_factor=0.0,
    )


def _perfect_overlap(found: Recorded, _: float) -> Variant:
    return Variant(
        pl.col("transfer_us"),
        "each rank goes on with its next segment as soon as it has entered a collective; a transfer starts "
        "once its members have entered it and ends before the step does; transfers may run concurrently: an "
        "optimistic bound (links shared by concurrent transfers are not modelled); only stream and launch "
        f"order are relaxed ({LANE})",
        overlap=True,
    )


def _predicted(found: Recorded, calls: pl.DataFrame) -> pl.DataFrame | str:
    """The body with each instance's transfer at the model's time (the longest of its members' T_pred)."""
    keyed = found.body.join(
        calls.select("rank", "start_us", "t_pred_us"), on=["rank", "start_us"], how="left"
    )
    per_instance = keyed.group_by("instance").agg(
        pl.col("t_pred_us").max().alias("_pred"), pl.col("t_pred_us").null_count().alias("_unpriced")
    )
    if per_instance.get_column("_unpriced").sum() > 0:
        return "a matched collective was not priced (its size, group or link is unknown)"
    return found.body.join(per_instance.select("instance", "_pred"), on="instance").with_columns(
        pl.col("_pred").alias("transfer_us")
    )


def _comm_model(found: Recorded, _: float) -> Variant | str:
    prediction = found.prediction
    if prediction is None or prediction.calls.height == 0:
        return "the prediction priced no call"
    unknown = prediction.calls.filter(pl.col("bandwidth_Bps").is_null())
    if unknown.height:
        why = prediction.missing_input or "a link is unknown"
        return f"a link is unknown: {why}"
    frame = _predicted(found, prediction.calls)
    if isinstance(frame, str):
        return frame
    return Variant(
        pl.col("transfer_us"),
        "every transfer at the alpha-beta model's time on its link (docs/metrics.md, 'Predicted gamma'); "
        f"compute, launch offsets and waits from the run ({RECORDED})",
        frame=frame,
    )


def _ranks(found: Recorded, workers: float) -> Variant | str:
    prediction = found.prediction
    if prediction is None or prediction.calls.height == 0:
        return "the prediction priced no call"
    k = int(workers)
    world = found.world
    calls = prediction.calls.filter(pl.col("group_size") == world)
    if calls.height == 0 or calls.get_column("t_pred_us").null_count() > 0:
        return _ranks_by_bytes(found, k, prediction.missing_input or "a link is unknown")
    scaled = price(
        calls.drop("spans_nodes").with_columns(pl.lit(None, pl.Utf8).alias("pg_ranks")),
        prediction.inputs,
        n=pl.lit(k),
    )
    ratio = calls.select("rank", "start_us", "t_pred_us").join(
        scaled.select("rank", "start_us", pl.col("t_pred_us").alias("_k")), on=["rank", "start_us"]
    )
    keyed = found.body.join(ratio, on=["rank", "start_us"], how="left")
    per_instance = keyed.group_by("instance").agg(
        pl.when(pl.col("t_pred_us").max() > 0)
        .then(pl.col("_k").max() / pl.col("t_pred_us").max())
        .alias("_r")
    )
    frame = found.body.join(per_instance, on="instance", how="left").with_columns(
        (pl.col("transfer_us") * pl.col("_r").fill_null(1.0)).alias("transfer_us")
    )
    return Variant(
        pl.col("transfer_us"),
        f"the world's collectives re-priced for {k} ranks (links by the topology rule: across nodes past "
        f"{prediction.inputs.ranks_per_node} ranks), each measured transfer scaled by the model's T({k}) / "
        f"T({world}); the same local work per rank; the recorded ranks' arrivals and waiting kept (no new "
        "straggler drawn); other groups unchanged",
        frame=frame,
    )


def _ranks_by_bytes(found: Recorded, k: int, why: str) -> Variant:
    """`ranks:K` where the world's link is unknown: each world-sized collective's measured transfer scaled by
    its bus factor f(K) / f(n) alone (the bytes each rank moves), its latency share unknown."""
    members = pl.len().over("instance")
    ratio = bus_factor_expr(pl.col("collective"), pl.lit(k)) / bus_factor_expr(pl.col("collective"), members)
    scaled = pl.when(members == found.world).then(pl.col("transfer_us") * ratio.fill_null(1.0))
    frame = found.body.with_columns(scaled.otherwise(pl.col("transfer_us")).alias("transfer_us"))
    return Variant(
        pl.col("transfer_us"),
        f"the world's link is unknown ({why}): each world-sized collective's measured transfer scaled by "
        f"its bus factor f({k}) / f({found.world}) alone (the bytes each rank moves; the latency's share, "
        "which grows faster, taken as none, the links not re-priced: a lower bound); the same local work "
        "per rank; the recorded ranks' arrivals and waiting kept (no new straggler drawn); other groups "
        "unchanged",
        frame=frame,
    )


LEVERS: dict[str, tuple[str, Change]] = {
    "as_recorded": ("", _as_recorded),
    "no_straggler": ("", _no_straggler),
    "comm": ("x", _comm),
    "compute": ("x", _compute),
    "comm_model": ("", _comm_model),
    "perfect_overlap": ("", _perfect_overlap),
    "host_free": ("", _host_free),
    "ranks": ("", _ranks),
}
"""name -> (prefix of its argument: 'x' a speed-up factor, '' a count or none, Change)."""
_GRAMMAR = re.compile(r"^(?P<name>[a-z_]+)(?::(?P<x>x)?(?P<value>\d+(?:\.\d+)?))?$")
NEEDS_ARGUMENT = ("comm", "compute", "ranks")
OPTIONAL_ARGUMENT = ("no_straggler",)  # no_straggler:R moves rank R, named or not


def parse_lever(text: str) -> tuple[str, float]:
    """(name, argument) of a lever as the user writes it: `no_straggler` (argument -1: the named
    stragglers), `no_straggler:3` (rank 3), `comm:x2`, `ranks:16`."""
    found = _GRAMMAR.match(text.strip())
    name = found.group("name") if found else ""
    if not found or name not in LEVERS:
        raise UsageError(f"unknown lever {text!r}: known levers are {', '.join(lever_names())}")
    prefix, _ = LEVERS[name]
    value = found.group("value")
    wrong = value is None if name in NEEDS_ARGUMENT else value is not None and name not in OPTIONAL_ARGUMENT
    if wrong or (found.group("x") or "") != prefix:
        raise UsageError(f"lever {text!r}: write {_usage(name)}")
    argument = float(value) if value is not None else (-1.0 if name in OPTIONAL_ARGUMENT else 1.0)
    whole = name in ("ranks", *OPTIONAL_ARGUMENT) and value is not None
    if (
        (name != "no_straggler" and argument <= 0)
        or (whole and argument != int(argument))
        or (name == "ranks" and argument < 2)
    ):
        raise UsageError(f"lever {text!r}: the argument must be above 0 (ranks: a whole number of 2 or more)")
    return name, argument


def _usage(name: str) -> str:
    return {
        "comm": "comm:xN",
        "compute": "compute:xN",
        "ranks": "ranks:K",
        "no_straggler": "no_straggler[:R]",
    }.get(name, name)


def lever_names() -> list[str]:
    """Every lever as the user writes it."""
    return [_usage(name) for name in LEVERS]


def default_levers(world: int) -> tuple[str, ...]:
    """The levers every report replays."""
    return (
        "as_recorded",
        "no_straggler",
        "comm:x2",
        "compute:x2",
        "comm_model",
        "perfect_overlap",
        "host_free",
        f"ranks:{2 * world}",
    )


def variant(found: Recorded, text: str) -> Variant | str:
    """The skeleton changed by the lever `text`, or why it cannot be replayed."""
    name, argument = parse_lever(text)
    return LEVERS[name][1](found, argument)
