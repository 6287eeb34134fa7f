"""The evidence for each line's dimension, as rows of a table of rules (docs/metrics.md, "Parallelism
dimensions", evidence and confidence).

A line is a group's calls of one kind (`traceview.dimensions.features.LINE_KEY`). A rule reads a line's
features (`traceview.dimensions.features`) and, when its condition holds, adds weight to one or more
dimensions, with one sentence saying what it saw. Kinds: `stated` (the layout the user gave: the group's ranks
are one of a dimension's groups and the line's kind is one that dimension runs, 1.0; only its size matches one
dimension's, 0.3), `name` (the group's description, 0.6: `traceview.dimensions.names`), `library` (a
communication library only one dimension uses, 0.6: `LIBRARY_DIMENSIONS`), `mix` (its collectives and
sizes), `phase` (where in the step its calls run), `signature` (DDP's gradient buckets: all-reduces of spread
sizes, none in the forward pass) and `structure` (how its ranks lie). The weights are set so that a group
named by its framework scores at least 0.6, and an unnamed line whose mix, phase and ranks agree scores 0.3 to
0.5 above the next dimension.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import polars as pl

from traceview.core.records import record

NAME_WEIGHT, STATED_WEIGHT, STATED_SIZE_WEIGHT, LIBRARY_WEIGHT = 0.6, 1.0, 0.3, 0.6
LIBRARY_DIMENSIONS: Mapping[str, tuple[str, str]] = {
    "deepep": ("ep", "DeepEP dispatch/combine kernels: expert parallelism"),
    "nccl_ep": ("ep", "NCCL EP dispatch/combine kernels: expert parallelism"),
}
"""Communication libraries (`comm_library` ids of the kernel-name table) that only one dimension uses."""
DIMENSION_KINDS: Mapping[str, tuple[str, ...]] = {
    "dp": ("ar", "other"),
    "fsdp": ("agrs", "ar", "other"),
    "tp": ("ar", "agrs", "other"),
    "pp": ("p2p", "other"),
    "ep": ("a2a", "p2p", "other"),
    "cp": ("a2a", "p2p", "agrs", "other"),
}
"""The line kinds each dimension runs: a stated layout names a group's lines of these kinds only (a DP group's
all-to-alls are not DP's)."""
EARLY_MIN, LATE_MAX, SPREAD_ONE_SIZE = 0.2, 0.05, 1.5
"""Early: at least 20% of the calls start in the forward pass; late: under 5%; one size: S within 1.5x."""


@record
class EvidenceRule:
    """When `holds` on a group's features, add `weights` to its dimensions, saying `says`."""

    id: str
    kind: str  # mix | phase | signature | structure
    holds: Callable[[], pl.Expr]
    weights: tuple[tuple[str, float], ...]
    says: Callable[[], pl.Expr]


def _share(family: str) -> pl.Expr:
    return pl.col(f"{family}_share").fill_null(0.0) >= 0.5


def _pct(column: str) -> pl.Expr:
    return (pl.col(column).fill_null(0.0) * 100).round(0).cast(pl.Int64).cast(pl.Utf8) + pl.lit("%")


def _ar_early() -> pl.Expr:
    """The all-reduces' early share: of their bytes where sizes are known (DDP's one late 1.8 GB bucket
    outweighs its small early ones), else of their calls."""
    return pl.coalesce(pl.col("early_bytes_share"), pl.col("early_share"))


def _spread() -> pl.Expr:
    return pl.col("size_spread").fill_null(1.0)


def _text(text: str) -> Callable[[], pl.Expr]:
    return lambda: pl.lit(text)


_DENSE = _share("ar") | _share("agrs")
MIX_RULES: tuple[EvidenceRule, ...] = (
    EvidenceRule(
        "all-to-all",
        "mix",
        lambda: _share("a2a"),
        (("ep", 0.3), ("cp", 0.1)),
        lambda: pl.format(
            "all-to-all in {} of its calls (expert parallelism; Ulysses context parallelism also uses it)",
            _pct("a2a_share"),
        ),
    ),
    EvidenceRule(
        "send-recv",
        "mix",
        lambda: _share("p2p"),
        (("pp", 0.3), ("cp", 0.1)),
        lambda: pl.format(
            "send/receive in {} of its calls (pipeline stages; ring attention also uses them)",
            _pct("p2p_share"),
        ),
    ),
    EvidenceRule(
        "gather-scatter-varied",
        "mix",
        lambda: _share("agrs") & (_spread() > SPREAD_ONE_SIZE),
        (("fsdp", 0.3), ("tp", 0.05)),
        lambda: pl.format(
            "all-gather and reduce-scatter of sizes spread {}x (parameter buckets: FSDP/ZeRO)",
            _spread().round(1),
        ),
    ),
    EvidenceRule(
        "gather-scatter-one-size",
        "mix",
        lambda: _share("agrs") & (_spread() <= SPREAD_ONE_SIZE),
        (("tp", 0.15), ("fsdp", 0.15)),
        _text(
            "all-gather and reduce-scatter of one size (sequence-parallel activations, or equal FSDP units)"
        ),
    ),
    EvidenceRule(
        "all-reduce",
        "mix",
        lambda: _share("ar"),
        (("dp", 0.1), ("tp", 0.1)),
        lambda: pl.format("all-reduce in {} of its calls", _pct("ar_share")),
    ),
)
PHASE_RULES: tuple[EvidenceRule, ...] = (
    EvidenceRule(
        "all-reduce-early",
        "phase",
        lambda: _share("ar") & (_ar_early() >= EARLY_MIN),
        (("tp", 0.25),),
        lambda: pl.format(
            "{} of its all-reduced bytes move in the forward pass (activations, not gradients)",
            (_ar_early() * 100).round(0).cast(pl.Int64).cast(pl.Utf8) + pl.lit("%"),
        ),
    ),
    EvidenceRule(
        "all-reduce-late",
        "phase",
        lambda: _share("ar") & (_ar_early() < LATE_MAX),
        (("dp", 0.25),),
        _text("its all-reduces all run after the forward pass (gradient buckets)"),
    ),
    EvidenceRule(
        "scatter-late",
        "phase",
        lambda: (
            _share("agrs")
            & (pl.col("rs_early").fill_null(1.0) < LATE_MAX)
            & (pl.col("ag_early").fill_null(0.0) >= EARLY_MIN)
        ),
        (("fsdp", 0.2),),
        _text(
            "it gathers in the forward pass and reduce-scatters only after it (parameters in, gradients out)"
        ),
    ),
    EvidenceRule(
        "scatter-early",
        "phase",
        lambda: _share("agrs") & (pl.col("rs_early").fill_null(0.0) >= EARLY_MIN),
        (("tp", 0.2),),
        _text("it reduce-scatters in the forward pass too (sequence-parallel activations)"),
    ),
)
SIGNATURE_RULES: tuple[EvidenceRule, ...] = (
    EvidenceRule(
        "gradient-buckets",
        "signature",
        lambda: _share("ar") & (_spread() > SPREAD_ONE_SIZE) & (_ar_early().fill_null(1.0) < EARLY_MIN),
        (("dp", 0.2),),
        lambda: pl.format(
            "all-reduces of sizes spread {}x, {} of their bytes in the forward pass (DDP's gradient buckets)",
            _spread().round(1),
            (_ar_early() * 100).round(0).cast(pl.Int64).cast(pl.Utf8) + pl.lit("%"),
        ),
    ),
)
_NOT_WORLD = ~pl.col("world")
STRUCTURE_RULES: tuple[EvidenceRule, ...] = (
    EvidenceRule(
        "contiguous-in-node",
        "structure",
        lambda: pl.col("contiguous") & (pl.col("nodes") == 1) & _NOT_WORLD & _DENSE,
        (("tp", 0.15),),
        _text("contiguous ranks inside one node (tensor parallelism sits on NVLink)"),
    ),
    EvidenceRule(
        "contiguous-a2a",
        "structure",
        lambda: pl.col("contiguous") & (pl.col("nodes") == 1) & _NOT_WORLD & _share("a2a"),
        (("ep", 0.15),),
        _text("contiguous ranks inside one node"),
    ),
    EvidenceRule(
        "strided",
        "structure",
        lambda: (pl.col("stride").fill_null(1) > 1) & _DENSE,
        (("dp", 0.1), ("fsdp", 0.1)),
        lambda: pl.format("ranks strided by {} (an outer mesh dimension)", pl.col("stride")),
    ),
    EvidenceRule(
        "strided-p2p",
        "structure",
        lambda: (pl.col("stride").fill_null(1) > 1) & _share("p2p"),
        (("pp", 0.15),),
        lambda: pl.format("ranks strided by {} (one rank per stage)", pl.col("stride")),
    ),
    EvidenceRule(
        "world",
        "structure",
        lambda: pl.col("world") & _DENSE,
        (("dp", 0.1), ("fsdp", 0.1)),
        _text("every rank of the job"),
    ),
    EvidenceRule(
        "spans-nodes",
        "structure",
        lambda: (pl.col("nodes") > 1) & (_DENSE | _share("p2p")),
        (("dp", 0.05), ("fsdp", 0.05), ("pp", 0.05)),
        lambda: pl.format("its ranks span {} nodes", pl.col("nodes")),
    ),
)
RULES: tuple[EvidenceRule, ...] = (*MIX_RULES, *PHASE_RULES, *SIGNATURE_RULES, *STRUCTURE_RULES)
"""Every rule over a line's features; structure rules read only groups whose ranks are listed."""

EVIDENCE_SCHEMA: Mapping[str, pl.DataType] = {
    "group": pl.Utf8(),
    "line_kind": pl.Utf8(),
    "kind": pl.Utf8(),
    "rule": pl.Utf8(),
    "dimension": pl.Utf8(),
    "weight": pl.Float64(),
    "says": pl.Utf8(),
}


_LINE = [pl.col("group"), pl.col("kind").alias("line_kind")]


def _typed(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.select([pl.col(c).cast(t) for c, t in EVIDENCE_SCHEMA.items()])


def rule_evidence(features: pl.DataFrame) -> pl.DataFrame:
    """One row per (line, rule that holds, dimension it weighs): `EVIDENCE_SCHEMA` (every rule one branch of a
    single query)."""
    lines = features.lazy()
    frames = []
    for rule in RULES:
        holds = rule.holds() & (pl.col("listed") if rule.kind == "structure" else pl.lit(True))
        found = lines.filter(holds.fill_null(False)).select(*_LINE, rule.says().alias("says"))
        frames += [
            found.select(
                "group",
                "line_kind",
                pl.lit(rule.kind).alias("kind"),
                pl.lit(rule.id).alias("rule"),
                pl.lit(dimension).alias("dimension"),
                pl.lit(weight).alias("weight"),
                "says",
            )
            for dimension, weight in rule.weights
        ]
    if not frames:
        return pl.DataFrame(schema=EVIDENCE_SCHEMA)
    return _typed(pl.concat(frames).collect())


def library_rows(features: pl.DataFrame) -> pl.DataFrame:
    """The library evidence of every line whose kernels come from a library only one dimension uses
    (`LIBRARY_DIMENSIONS`)."""
    table = pl.DataFrame(
        [(library, dimension, says) for library, (dimension, says) in LIBRARY_DIMENSIONS.items()],
        schema={"_library": pl.Utf8, "dimension": pl.Utf8, "says": pl.Utf8},
        orient="row",
    )
    found = features.select(*_LINE, pl.col("libraries").alias("_library")).explode("_library")
    joined = found.join(table, on="_library", how="inner").unique(["group", "line_kind", "dimension"])
    return _typed(
        joined.select(
            "group",
            "line_kind",
            pl.lit("library").alias("kind"),
            pl.lit("library").alias("rule"),
            "dimension",
            pl.lit(LIBRARY_WEIGHT).alias("weight"),
            "says",
        )
    )


def name_rows(features: pl.DataFrame, names: pl.DataFrame) -> pl.DataFrame:
    """The name evidence of every line whose group's description names a dimension (and a row, weight 0,
    saying what a name that names none says)."""
    joined = features.select(*_LINE, "desc").join(names, on="desc", how="inner")
    return joined.select(
        "group",
        "line_kind",
        pl.lit("name").alias("kind"),
        pl.lit("name").alias("rule"),
        pl.col("name_dimension").alias("dimension"),
        pl.when(pl.col("name_dimension").is_not_null()).then(NAME_WEIGHT).otherwise(0.0).alias("weight"),
        pl.col("name_says").alias("says"),
    ).select([pl.col(c).cast(t) for c, t in EVIDENCE_SCHEMA.items()])


def _runs_kind() -> pl.Expr:
    """Whether the row's dimension runs its line's kind (`DIMENSION_KINDS`)."""
    pairs = [f"{dimension}/{kind}" for dimension, kinds in DIMENSION_KINDS.items() for kind in kinds]
    return pl.format("{}/{}", pl.col("dimension"), pl.col("line_kind")).is_in(pairs)


def stated_rows(features: pl.DataFrame, groups: dict[str, list[tuple[int, ...]]]) -> pl.DataFrame:
    """The stated layout's evidence: a line whose group's listed ranks are one of a dimension's groups (1.0);
    else a line whose group's size only one stated dimension has (0.3); either only where that dimension
    runs the line's kind (`DIMENSION_KINDS`)."""
    exact = pl.DataFrame(
        [(dimension, ",".join(map(str, ranks))) for dimension, found in groups.items() for ranks in found],
        schema={"dimension": pl.Utf8, "_key": pl.Utf8},
        orient="row",
    )
    sizes = pl.DataFrame(
        [(dimension, len(found[0])) for dimension, found in groups.items() if found],
        schema={"dimension": pl.Utf8, "_n": pl.Int64},
        orient="row",
    ).filter(pl.len().over("_n") == 1)
    keyed = features.select(
        *_LINE, "n", pl.col("ranks").list.eval(pl.element().cast(pl.Utf8)).list.join(",").alias("_key")
    )
    by_ranks = keyed.join(exact, on="_key", how="inner").select(
        "group",
        "line_kind",
        "dimension",
        pl.lit(STATED_WEIGHT).alias("weight"),
        pl.lit("its ranks are one of the stated layout's groups").alias("says"),
    )
    by_size = (
        keyed.join(by_ranks.select("group"), on="group", how="anti")
        .with_columns(pl.col("n").cast(pl.Int64).alias("_n"))
        .join(sizes, on="_n", how="inner")
        .select(
            "group",
            "line_kind",
            "dimension",
            pl.lit(STATED_SIZE_WEIGHT).alias("weight"),
            pl.lit("its size is the stated size of one dimension only").alias("says"),
        )
    )
    return (
        pl.concat([by_ranks, by_size])
        .filter(_runs_kind())
        .select(
            "group",
            "line_kind",
            pl.lit("stated").alias("kind"),
            pl.lit("stated").alias("rule"),
            "dimension",
            "weight",
            "says",
        )
        .select([pl.col(c).cast(t) for c, t in EVIDENCE_SCHEMA.items()])
    )
