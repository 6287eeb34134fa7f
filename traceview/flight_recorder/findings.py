"""Each kind of divergence found (the kinds and their sentences: `rules.RULES`): one finding per group and
kind, at the earliest collective where it shows, with the ranks on each side, the sequence number, the ops
and sizes, how long the waiting side had waited and its Python stack when the dump has one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import polars as pl

from traceview.core.records import record
from traceview.flight_recorder.rules import RULE_BY_KIND, SIZE_FREE_OPS


@record
class Side:
    """Ranks that did the same thing at a finding's collective: their op, input sizes and dtypes."""

    ranks: tuple[int, ...]
    op: str
    input_sizes: str
    input_dtypes: str


@record
class HangFinding:
    """One divergence (or an unsure one): its kind, "divergence" or "unsure", where, who on each side."""

    kind: str
    status: str
    group: str
    group_desc: str
    seq: int
    ranks_waiting: tuple[int, ...]
    ranks_apart: tuple[int, ...]
    sides: tuple[Side, ...]
    waited_s: float | None
    created_ns: int | None
    stack: str | None
    sentence: str


def ranks_text(ranks: tuple[int, ...]) -> str:
    """Ranks as text, the first 8 and how many more."""
    return ", ".join(map(str, ranks[:8])) + (f" (+{len(ranks) - 8} more)" if len(ranks) > 8 else "")


def _side_text(side: Side) -> str:
    return f"rank {ranks_text(side.ranks)}: {side.op} {side.input_sizes} {side.input_dtypes}".rstrip()


def _waited_text(waited_s: float | None) -> str:
    return "an unknown time" if waited_s is None else f"{waited_s:.1f} s"


def finding(
    kind: str, status: str, where: Mapping[str, Any], sides: tuple[Side, ...], **rest: Any
) -> HangFinding:
    """A finding with its sentence (`rules.RULES`) filled from `where` (group, desc, seq), the sides and
    `rest` (ranks_waiting, ranks_apart, waited_s, created_ns, stack, detail)."""
    detail = rest.pop("detail", None) or "; ".join(map(_side_text, sides))
    sentence = RULE_BY_KIND[kind].sentence.format(
        group=where["group"],
        seq=where["seq"],
        op=sides[0].op if sides else "",
        apart=ranks_text(rest["ranks_apart"]),
        waiting=ranks_text(rest["ranks_waiting"]),
        detail=detail,
        waited=_waited_text(rest.get("waited_s")),
    )
    prefix = "" if status == "divergence" else "unsure: "
    return HangFinding(
        kind=kind,
        status=status,
        group=where["group"],
        group_desc=where.get("group_desc") or "",
        seq=where["seq"],
        sides=sides,
        sentence=prefix + sentence,
        ranks_waiting=tuple(rest["ranks_waiting"]),
        ranks_apart=tuple(rest["ranks_apart"]),
        waited_s=rest.get("waited_s"),
        created_ns=rest.get("created_ns"),
        stack=rest.get("stack"),
    )


def membership_findings(
    members: Mapping[str, tuple[tuple[int, ...], dict[int, str]]],
) -> Iterator[HangFinding]:
    """A group whose dumps state different member lists."""
    for group, (common, by_rank) in members.items():
        stated = set(by_rank.values())
        if len(stated) < 2:
            continue
        apart = tuple(sorted(rank for rank, text in by_rank.items() if text != str(list(common))))
        agreeing = tuple(sorted(rank for rank in by_rank if rank not in apart))
        sides = tuple(
            Side(tuple(sorted(r for r, t in by_rank.items() if t == text)), "ranks", text, "")
            for text in sorted(stated)
        )
        where = {"group": group, "seq": 0}
        yield finding("membership", "divergence", where, sides, ranks_waiting=agreeing, ranks_apart=apart)


MISMATCHES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("op_mismatch", ("group", "collective_seq"), ("op",)),
    ("size_mismatch", ("group", "collective_seq", "op"), ("input_sizes", "input_dtypes")),
)
"""Each mismatch kind: the entries that must agree (the key) and what they must agree on (a side)."""


def _sides_frame(entries: pl.DataFrame, key: tuple[str, ...], side: tuple[str, ...]) -> pl.DataFrame:
    """The ranks of each side (`side` columns) of each `key` with more than one side."""
    collectives = entries.filter(pl.col("collective_seq").is_not_null()).with_columns(
        pl.col("input_sizes", "input_dtypes").fill_null("")
    )
    sides = collectives.group_by(*dict.fromkeys((*key, *side))).agg(
        pl.col("rank").sort().alias("ranks"),
        pl.col("created_ns").min(),
        pl.col("stack").drop_nulls().first(),
        pl.col("group_desc").first(),
        pl.col("op", "input_sizes", "input_dtypes").first().name.suffix("_seen"),
    )
    return sides.with_columns(
        sides_here=pl.len().over(key),
        side_size=pl.col("ranks").list.len(),
    ).filter(pl.col("sides_here") > 1)


def mismatch_findings(entries: pl.DataFrame) -> Iterator[HangFinding]:
    """Ranks that entered different ops, or one op with different sizes or dtypes, at the same sequence
    number: the earliest such collective of each group and kind (`MISMATCHES`)."""
    for kind, key, side in MISMATCHES:
        sides = _sides_frame(entries, key, side)
        if kind == "size_mismatch":
            sides = sides.filter(~pl.col("op").is_in(list(SIZE_FREE_OPS)))
        first = sides.group_by("group").agg(pl.col("collective_seq").min())
        chosen = sides.join(first, on=["group", "collective_seq"]).sort(
            "group", "side_size", "created_ns", descending=[False, True, False]
        )
        for (group,), rows in chosen.group_by("group", maintain_order=True):
            yield _mismatch(kind, str(group), rows.to_dicts())


def _mismatch(kind: str, group: str, found: list[dict[str, Any]]) -> HangFinding:
    """One mismatch finding from its sides' rows, the largest side first."""
    side_list = tuple(
        Side(tuple(row["ranks"]), row["op_seen"], row["input_sizes_seen"], row["input_dtypes_seen"])
        for row in found
    )
    apart = tuple(sorted(rank for side in side_list[1:] for rank in side.ranks))
    where = {"group": group, "seq": found[0]["collective_seq"], "group_desc": found[0]["group_desc"]}
    return finding(
        kind,
        "divergence",
        where,
        side_list,
        ranks_waiting=side_list[0].ranks,
        ranks_apart=apart,
        created_ns=min((row["created_ns"] for row in found if row["created_ns"] is not None), default=None),
        stack=next((row["stack"] for row in found[1:] if row["stack"]), found[0]["stack"]),
    )
