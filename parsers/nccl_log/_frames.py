"""From the raw rows of the NCCL log reader (`parsers.nccl_log_raw.RawRows`) to the typed frames of
`traceview.model.nccl_log.NcclLog` (polars only). `build_log` shapes each model frame: dtype
names and bytes of collectives, transport kinds and degraded flags, trees exploded per channel, NIC lists
exploded, and the communicator each init-time record belongs to (see `attach_comm`).
"""

from __future__ import annotations

from typing import TypedDict

import polars as pl
from traceview.parsers.nccl_log._raw import RawRows, typed
from traceview.parsers.nccl_log._rules import NETWORK_NAME_KINDS, NETWORK_RULES, with_call_size
from traceview.parsers.nccl_log._totals import (
    REDUCERS,
    WARNING_SOURCES,
    classify_warnings,
    count_warnings,
    warning_rows,
)

from traceview.model.nccl_log import (
    SCHEMAS,
    NcclLog,
    dtype_table,
    first_match,
    flag_degraded,
    transport_kind,
)


class LineCounts(TypedDict):
    """What the reader counted (fields of `NcclLog` of the same names)."""

    lines_total: int
    lines_skipped: int
    lines_too_long: int
    chars_replaced: int
    records: int
    records_unrecognised: int
    lines_joined: int
    collective_calls_seen: int


# Numeric algorithm / protocol codes of the old TUNING lines -> the names newer NCCL prints.
ALGO_CODES = {"0": "TREE", "1": "RING"}
PROTO_CODES = {"0": "LL", "1": "LL128", "2": "SIMPLE"}

# Which init-line generation a communicator's init line is, first true condition wins.
INIT_FORMATS: tuple[tuple[str, pl.Expr], ...] = (
    ("2.21+", pl.col("init_func").is_not_null()),
    ("2.16+", pl.col("comm_id").is_not_null()),
    ("2.5-2.15", pl.col("bus_id").is_not_null()),
    ("2.4", pl.lit(value=True)),
)

_IFACE = r"(?:\[\d+\])?[\w.\-]+:[^\s<]+<\d+>"
_IB_DEVICE = r"\[\d+\][\w.\-]+:\d+/\w+"


def conform_exprs(columns: list[str], name: str) -> list[pl.Expr]:
    """Expressions selecting the model schema `name` from `columns`: in order, cast (a number too large for
    its type becomes null), absent ones null."""
    return [
        (pl.col(col) if col in columns else pl.lit(None)).cast(dtype, strict=False).alias(col)
        for col, dtype in SCHEMAS[name].items()
    ]


def conform(frame: pl.DataFrame, name: str) -> pl.DataFrame:
    """`frame` reduced to the model schema `name`: its columns in order, cast, absent ones null."""
    return frame.select(conform_exprs(frame.columns, name))


def _when_chain(rows: tuple[tuple[str, pl.Expr], ...]) -> pl.Expr:
    chain: pl.Expr = pl.lit(None, dtype=pl.String())
    for label, condition in reversed(rows):
        chain = pl.when(condition).then(pl.lit(label)).otherwise(chain)
    return chain


def _key() -> pl.Expr:
    parts = [pl.col(c).cast(pl.String()).fill_null("") for c in ("host", "pid", "tid", "cuda_dev")]
    return pl.concat_str(parts, separator=":").alias("_key")


def attach_comm(frame: pl.DataFrame, inits: pl.DataFrame) -> pl.DataFrame:
    """`frame` with `comm`: the communicator whose init the same host:pid:tid [dev] was running.

    That is the next Init line (START or COMPLETE) of that thread, else the last Init START before the record.
    """
    if frame.is_empty() or inits.is_empty():
        return frame.with_columns(comm=pl.lit(None, dtype=pl.String()))
    owners = inits.select("line", _key(), "comm", "init_state").sort("line")
    started = owners.filter(pl.col("init_state") == "START").drop("init_state")
    joined = frame.drop("comm", strict=False).with_columns(_key()).sort("line")
    ahead = joined.join_asof(
        owners.drop("init_state"), on="line", by="_key", strategy="forward", check_sortedness=False
    )
    behind = ahead.join_asof(
        started.rename({"comm": "_started"}),
        on="line",
        by="_key",
        strategy="backward",
        check_sortedness=False,
    )
    return behind.with_columns(comm=pl.coalesce("comm", "_started")).drop("_key", "_started")


def _communicators(raw: RawRows) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(communicators, init rows): one row per (host, pid, comm), and every Init line with its thread."""
    inits = raw.frame("comm_init")
    if inits.is_empty():
        return conform(inits, "communicators"), inits
    renamed = {"init_dev": "cuda_dev", "func": "init_func", "state": "init_state"}
    inits = inits.drop("cuda_dev").rename(renamed).with_columns(init_format=_when_chain(INIT_FORMATS))
    rows = pl.concat(
        [inits, raw.frame("comm_shape").drop("cuda_dev", strict=False)],
        how="diagonal_relaxed",
    )
    value_columns = [c for c in rows.columns if c not in ("host", "pid", "comm", "line", "tid", "init_state")]
    comms = rows.group_by("host", "pid", "comm", maintain_order=True).agg(
        pl.col("line").min(),
        pl.when((pl.col("init_state") == "COMPLETE").any())
        .then(pl.lit("COMPLETE"))
        .otherwise(pl.col("init_state").drop_nulls().first())
        .alias("init_state"),
        *(pl.col(c).drop_nulls().last() for c in value_columns),
    )
    return conform(comms.sort("line"), "communicators"), inits


def _collectives(raw: RawRows, comms: pl.DataFrame) -> pl.DataFrame:
    colls = raw.frame("coll")
    if colls.is_empty():
        return conform(colls, "collectives")
    ranks = comms.select("host", "pid", "comm", "rank").unique(["host", "pid", "comm"], keep="last")
    table = dtype_table()
    names = dict(zip(table["datatype"], table["dtype"], strict=True))
    sizes = dict(zip(table["datatype"], table["dtype_size"], strict=True))
    typed_colls = colls.with_columns(
        dtype=pl.col("datatype").replace_strict(names, default=None, return_dtype=pl.String()),
        bytes=pl.col("count")
        * pl.col("datatype").replace_strict(sizes, default=None, return_dtype=pl.Int64()),
    )
    shaped = (
        with_call_size(typed_colls, "bytes")
        .lazy()
        .join(ranks.lazy(), on=["host", "pid", "comm"], how="left", nulls_equal=True, maintain_order="left")
        .with_columns(rank=pl.coalesce("global_rank", "rank"))
    )
    columns = [*colls.columns, "dtype", "bytes", "size_bytes", "rank"]
    return shaped.select(conform_exprs(columns, "collectives")).collect()


def _transports(raw: RawRows, inits: pl.DataFrame, settings: dict[str, str]) -> pl.DataFrame:
    links = raw.frame("transport")
    if links.is_empty():
        return conform(links, "transports")
    links = links.with_columns(kind=transport_kind(), gdr=pl.col("via").str.contains("GDRDMA"))
    links = flag_degraded(attach_comm(links, inits), settings)
    return conform(links.sort("line"), "transports")


def _rings(raw: RawRows, inits: pl.DataFrame) -> pl.DataFrame:
    rings = raw.frame("ring")
    if rings.is_empty():
        return conform(rings, "rings")
    rings = rings.with_columns(
        ranks=pl.col("ranks").str.extract_all(r"\d+").cast(pl.List(pl.Int64()), strict=False)
    )
    return conform(attach_comm(rings, inits), "rings")


def _tree_half(trees: pl.DataFrame, pattern: str, tree: int) -> pl.DataFrame:
    down_first = r"^(?<d0>-?\d+)/(?<d1>-?\d+)/(?<d2>-?\d+)->(?<me>-?\d+)->(?<up>-?\d+)$"
    up_first = r"^(?<up>-?\d+)->(?<me>-?\d+)->(?<d0>-?\d+)/(?<d1>-?\d+)/(?<d2>-?\d+)$"
    half = trees.with_columns(half=pl.col("item").str.extract(pattern)).filter(pl.col("half").is_not_null())
    parsed = half.with_columns(
        a=pl.col("half").str.extract_groups(down_first), b=pl.col("half").str.extract_groups(up_first)
    )
    fields = {"rank": "me", "up": "up", "down0": "d0", "down1": "d1", "down2": "d2"}
    complete = pl.col("a").struct.field("me").is_not_null() | pl.col("b").struct.field("me").is_not_null()
    return parsed.filter(complete).with_columns(
        tree=pl.lit(tree, dtype=pl.Int64()),
        **{
            out: pl.coalesce(pl.col("a").struct.field(f), pl.col("b").struct.field(f))
            for out, f in fields.items()
        },
    )


def _trees(raw: RawRows, inits: pl.DataFrame) -> pl.DataFrame:
    trees = raw.frame("tree")
    if trees.is_empty():
        return conform(trees, "trees")
    items = (
        trees.with_columns(item=pl.col("spec").str.extract_all(r"\[\d+\] \S+"))
        .explode("item")
        .with_columns(channel=pl.col("item").str.extract(r"^\[(\d+)\]").cast(pl.Int64(), strict=False))
    )
    halves = pl.concat(
        [_tree_half(items, r"\] ([^|\s]+)", 0), _tree_half(items, r"\|(\S+)$", 1)], how="vertical_relaxed"
    )
    return conform(attach_comm(halves.sort("line", "channel", "tree"), inits), "trees")


def _tuning(raw: RawRows) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(tuning rows kept, tuning totals: choices per `TUNING_KEY` over every TUNING line)."""
    tuning = raw.frame("tuning")
    parts = raw.take_spilled("tuning")
    if tuning.is_empty() and not parts:
        return conform(tuning, "tuning"), conform(tuning, "tuning_totals")
    reducer = REDUCERS["tuning"]
    totals = reducer.merge(pl.concat([reducer.reduce("tuning", tuning), *parts], how="diagonal_relaxed"))
    codes = {"algo": pl.col("algo").replace(ALGO_CODES), "proto": pl.col("proto").replace(PROTO_CODES)}
    return conform(tuning.with_columns(**codes), "tuning"), conform(
        totals.with_columns(**codes), "tuning_totals"
    )


def _warnings(raw: RawRows) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(warning rows kept, warning totals: per kind count, first line and its text, over every warning)."""
    raw.flush_warnings()
    frames = [(name, raw.frame(name)) for name in WARNING_SOURCES]
    shaped = [warning_rows(name, frame) for name, frame in frames if not frame.is_empty()]
    parts = [part for name in WARNING_SOURCES for part in raw.take_spilled(name)]
    empty = pl.DataFrame(schema={"line": pl.Int64()})
    if not shaped and not parts:
        return conform(empty, "warnings"), conform(empty, "warning_totals")
    warns = empty
    if shaped:
        merged = pl.concat([f.select(typed(c) for c in f.columns) for f in shaped], how="diagonal_relaxed")
        warns = classify_warnings(merged).sort("line")
        parts.append(count_warnings(warns))
    totals = REDUCERS["warn"].merge(pl.concat(parts, how="diagonal_relaxed"))
    return conform(warns, "warnings"), conform(
        totals.sort("count", "line", descending=[True, False]), "warning_totals"
    )


def call_totals(totals: pl.DataFrame) -> pl.DataFrame:
    """`CallTally.totals` with dtype, call_bytes (count x element size), size_bytes (S of one call,
    `traceview.parsers.nccl_log._rules.with_call_size`) and bytes (calls x S)."""
    table = dtype_table()
    names = dict(zip(table["datatype"], table["dtype"], strict=True))
    sizes = dict(zip(table["datatype"], table["dtype_size"], strict=True))
    size = pl.col("datatype").replace_strict(sizes, default=None, return_dtype=pl.Int64())
    shaped = totals.with_columns(
        dtype=pl.col("datatype").replace_strict(names, default=None, return_dtype=pl.String()),
        call_bytes=pl.col("count") * size,
    )
    return conform(
        with_call_size(shaped, "call_bytes").with_columns(bytes=pl.col("calls") * pl.col("size_bytes")),
        "call_totals",
    )


def _with_text_columns(frame: pl.DataFrame, *names: str) -> pl.DataFrame:
    """`frame` with every column of `names`, null text where no row's pattern has that group."""
    return frame.with_columns(pl.lit(None, pl.String()).alias(n) for n in names if n not in frame.columns)


def _network(rows: pl.DataFrame) -> pl.DataFrame:
    if rows.is_empty():
        return conform(rows, "network")
    rows = _with_text_columns(rows, "source").with_columns(source=pl.col("source").fill_null("selected"))
    items = rows.with_columns(
        item=pl.when(pl.col("source") == "NET/IB")
        .then(pl.col("detail").str.extract_all(_IB_DEVICE))
        .when(pl.col("source") == "selected")
        .then(pl.concat_list(pl.col("detail")))
        .otherwise(pl.col("detail").str.extract_all(_IFACE))
    ).explode("item")
    fields = items.with_columns(
        index=pl.col("item").str.extract(r"^\[(\d+)\]").cast(pl.Int64(), strict=False),
        device=pl.coalesce(pl.col("item").str.extract(r"^(?:\[\d+\])?([^:\[\]]+)"), pl.col("item")),
        port=pl.col("item").str.extract(r":(\d+)/\w+$").cast(pl.Int64(), strict=False),
        link=pl.col("item").str.extract(r"/(IB|RoCE)$"),
        address=pl.col("item").str.extract(r":([^\s<]+)<\d+>$"),
    )
    return conform(fields, "network")


def _versions(raw: RawRows) -> pl.DataFrame:
    versions = raw.frame("version")
    if versions.is_empty():
        return conform(versions, "versions")
    parts = pl.col("version").str.extract_groups(r"^(?<major>\d+)\.(?<minor>\d+)\.(?<patch>\d+)")
    return conform(
        versions.with_columns(
            parts.alias("parts"), cuda=pl.col("version").str.extract(r"cuda([\d.]+)")
        ).unnest("parts"),
        "versions",
    )


def _pg_comms(raw: RawRows) -> pl.DataFrame:
    rows = raw.frame("pg_comm")
    if rows.is_empty():
        return conform(rows, "pg_comms")
    return conform(rows.drop("cuda_dev").rename({"pg_dev": "cuda_dev"}), "pg_comms")


def _setting_rows(raw: RawRows) -> pl.DataFrame:
    """`NCCL_X set by environment to v` records: identity, name, value (a final "." dropped: "1." -> "1")."""
    rows = raw.frame("setting")
    if rows.is_empty():
        return pl.DataFrame(schema={"line": pl.Int64(), "host": pl.String(), "pid": pl.Int64()}).with_columns(
            name=pl.lit(None, pl.String()), value=pl.lit(None, pl.String())
        )
    return rows.with_columns(pl.col("value").str.replace(r"\.?\s*$", ""))


def _settings(rows: pl.DataFrame) -> dict[str, str]:
    return dict(zip(rows["name"].to_list(), rows["value"].to_list(), strict=True))


def _networks(network: pl.DataFrame, settings: pl.DataFrame) -> pl.DataFrame:
    """Per process (host, pid) the network NCCL uses, by `traceview.parsers.nccl_log._rules.NETWORK_RULES`
    (evidence, line)."""
    parts = [settings.select("line", "host", "pid", source="name", detail="value")]
    if not network.is_empty():
        parts.append(_with_text_columns(network, "source").select("line", "host", "pid", "source", "detail"))
    evidence = pl.concat(parts, how="diagonal_relaxed")
    if evidence.is_empty():
        return conform(evidence, "networks")
    rules = [
        evidence.filter(condition).with_columns(
            evidence=pl.lit(label),
            rank=pl.lit(rank),
            network=pl.lit(kind) if kind else first_match("detail", NETWORK_NAME_KINDS, pl.lit(None)),
            name=pl.col("source").str.strip_prefix("NET/") if kind else pl.col("detail"),
        )
        for label, rank, condition, kind in NETWORK_RULES
    ]
    decided = (
        pl.concat(rules)
        .filter(pl.col("network").is_not_null())
        .sort("rank", "line", descending=[False, True])
    )
    return conform(decided.unique(["host", "pid"], keep="first").sort("line"), "networks")


def build_log(
    path: str, raw: RawRows, processes: pl.DataFrame, counts: LineCounts, calls: pl.DataFrame
) -> NcclLog:
    """Shape the raw rows into the model (not yet validated); `calls`: `CallTally.totals` of every
    COLL line."""
    setting_rows, network_rows = _setting_rows(raw), raw.frame("network")
    settings = _settings(setting_rows)
    comms, inits = _communicators(raw)
    collectives = _collectives(raw, comms)
    tuning, tuning_totals = _tuning(raw)
    seen_tuning = raw.seen["tuning"]
    warnings, warning_totals = _warnings(raw)
    seen_warnings = sum(
        raw.seen[name] for name in WARNING_SOURCES
    )  # after _warnings: it types the last WARNs
    return NcclLog(
        path=path,
        versions=_versions(raw),
        processes=conform(processes, "processes"),
        communicators=comms,
        transports=_transports(raw, inits, settings),
        rings=_rings(raw, inits),
        trees=_trees(raw, inits),
        collectives=collectives,
        call_totals=call_totals(calls),
        tuning=tuning,
        tuning_totals=tuning_totals,
        init_timings=conform(raw.frame("init_timings"), "init_timings"),
        channel_counts=conform(attach_comm(raw.frame("channel_counts"), inits), "channel_counts"),
        warnings=warnings,
        warning_totals=warning_totals,
        network=_network(network_rows),
        networks=_networks(network_rows, setting_rows),
        events=conform(raw.frame("event"), "events"),
        pg_comms=_pg_comms(raw),
        settings=settings,
        collective_rows_kept=collectives.height,
        tuning_lines_seen=seen_tuning,
        tuning_rows_kept=tuning.height,
        warnings_seen=seen_warnings,
        warning_rows_kept=warnings.height,
        **counts,
    )
