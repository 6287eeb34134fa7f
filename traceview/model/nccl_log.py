"""The model of one NCCL_DEBUG log (frozen dataclass of polars frames), its vocabularies and the
degraded-transport rule its parser applies (the views over a log are `traceview.nccl.log_views`).

A log is many processes' records interleaved; every frame keeps the identity of the record's writer
(`host`, `pid`, `tid`, `cuda_dev`; null where the poster stripped it) and the physical `line` it came
from (1-based). Pointers (`comm`, `stream`) stay as the hex text NCCL printed; `comm` identifies a
communicator only together with `host` and `pid` (address spaces differ); `comm_id` identifies it across
ranks (NCCL 2.16+).
"""

from __future__ import annotations

from dataclasses import field
from functools import reduce

import polars as pl

from traceview.core.errors import InputError
from traceview.core.records import record

# ncclDataType_t code -> (name, bytes per element). 0-8 since NCCL 2.0, bfloat16 since 2.10, fp8 since 2.19.
DTYPES: tuple[tuple[int, str, int], ...] = (
    (0, "int8", 1),
    (1, "uint8", 1),
    (2, "int32", 4),
    (3, "uint32", 4),
    (4, "int64", 8),
    (5, "uint64", 8),
    (6, "float16", 2),
    (7, "float32", 4),
    (8, "float64", 8),
    (9, "bfloat16", 2),
    (10, "float8e4m3", 1),
    (11, "float8e5m2", 1),
)

# ncclResult_t code -> name, for the "file.cc:123 -> 4" error-propagation lines.
RESULTS: dict[int, str] = {
    1: "unhandled cuda error",
    2: "system error",
    3: "internal error",
    4: "invalid argument",
    5: "invalid usage",
    6: "remote error",
    7: "in progress",
}

# Transport kind from the text after "via": first matching regex wins; anything else is "other".
TRANSPORT_KINDS: tuple[tuple[str, str], ...] = (
    ("P2P", r"^P2P"),
    ("SHM", r"^(?:SHM|direct shared memory)"),
    ("NET/IB", r"^NET/IB"),
    ("NET/Socket", r"^NET/Socket"),
    ("NVLS", r"^NVLS"),
    ("CollNet", r"(?i)^COLLNET"),
    ("NET/Plugin", r"^NET/"),
)

# Warning kind from its text: first matching regex wins; else the kind its origin gave it (warn or error).
WARNING_KINDS: tuple[tuple[str, str], ...] = (
    ("watchdog", r"Watchdog"),
    ("timeout", r"(?i)\btime(?:d)?[ -]?out"),
    ("abort", r"(?i)\babort"),
    ("error", r"(?i)unhandled|internal error|invalid|remote process|NCCL error|duplicate GPU|-> \d+$"),
)

IDENTITY_SCHEMA: dict[str, pl.DataType] = {
    "line": pl.Int64(),
    "host": pl.String(),
    "pid": pl.Int64(),
    "tid": pl.Int64(),
    "cuda_dev": pl.Int64(),
}

SCHEMAS: dict[str, dict[str, pl.DataType]] = {
    "versions": {
        **IDENTITY_SCHEMA,
        "version": pl.String(),
        "major": pl.Int64(),
        "minor": pl.Int64(),
        "patch": pl.Int64(),
        "cuda": pl.String(),
    },
    "processes": {
        "host": pl.String(),
        "pid": pl.Int64(),
        "tid": pl.Int64(),
        "cuda_dev": pl.Int64(),
        "records": pl.Int64(),
    },
    "communicators": {
        "host": pl.String(),
        "pid": pl.Int64(),
        "comm": pl.String(),
        "comm_id": pl.String(),
        "rank": pl.Int64(),
        "nranks": pl.Int64(),
        "cuda_dev": pl.Int64(),
        "nvml_dev": pl.Int64(),
        "bus_id": pl.String(),
        "init_state": pl.String(),
        "init_format": pl.String(),
        "init_func": pl.String(),
        "n_nodes": pl.Int64(),
        "local_ranks": pl.Int64(),
        "local_rank": pl.Int64(),
        "line": pl.Int64(),
    },
    "transports": {
        **IDENTITY_SCHEMA,
        "comm": pl.String(),
        "channel": pl.Int64(),
        "conn": pl.Int64(),
        "from_rank": pl.Int64(),
        "to_rank": pl.Int64(),
        "direction": pl.String(),
        "via": pl.String(),
        "kind": pl.String(),
        "gdr": pl.Boolean(),
        "degraded": pl.Boolean(),
        "degraded_reason": pl.String(),
    },
    "rings": {
        **IDENTITY_SCHEMA,
        "comm": pl.String(),
        "channel": pl.Int64(),
        "n_channels": pl.Int64(),
        "ranks": pl.List(pl.Int64()),
    },
    "trees": {
        **IDENTITY_SCHEMA,
        "comm": pl.String(),
        "channel": pl.Int64(),
        "tree": pl.Int64(),
        "rank": pl.Int64(),
        "up": pl.Int64(),
        "down0": pl.Int64(),
        "down1": pl.Int64(),
        "down2": pl.Int64(),
    },
    "collectives": {
        **IDENTITY_SCHEMA,
        "op": pl.String(),
        "opcount": pl.Int64(),
        "count": pl.Int64(),
        "datatype": pl.Int64(),
        "dtype": pl.String(),
        "bytes": pl.Int64(),
        "size_bytes": pl.Int64(),
        "red_op": pl.Int64(),
        "root": pl.Int64(),
        "comm": pl.String(),
        "nranks": pl.Int64(),
        "stream": pl.String(),
        "rank": pl.Int64(),
    },
    "call_totals": {"host": pl.String(), "pid": pl.Int64(), "comm": pl.String(), "op": pl.String()}
    | {"datatype": pl.Int64(), "dtype": pl.String()}
    | dict.fromkeys(("count", "root", "nranks", "calls", "call_bytes", "size_bytes", "bytes"), pl.Int64()),
    "tuning_totals": {"host": pl.String(), "pid": pl.Int64(), "comm": pl.String(), "op": pl.String()}
    | {"bytes": pl.Int64(), "algo": pl.String(), "proto": pl.String(), "choices": pl.Int64()},
    "warning_totals": {"kind": pl.String(), "count": pl.Int64(), "line": pl.Int64(), "example": pl.String()},
    "tuning": {
        **IDENTITY_SCHEMA,
        "op": pl.String(),
        "bytes": pl.Int64(),
        "algo": pl.String(),
        "proto": pl.String(),
        "time_us": pl.Float64(),
        "channel_lo": pl.Int64(),
        "channel_hi": pl.Int64(),
        "comm": pl.String(),
    },
    "init_timings": {
        **IDENTITY_SCHEMA,
        "func": pl.String(),
        "rank": pl.Int64(),
        "nranks": pl.Int64(),
        "total_s": pl.Float64(),
        "components": pl.String(),
    },
    "channel_counts": {
        **IDENTITY_SCHEMA,
        "comm": pl.String(),
        "coll": pl.Int64(),
        "collnet": pl.Int64(),
        "nvls": pl.Int64(),
        "p2p": pl.Int64(),
        "p2p_per_peer": pl.Int64(),
    },
    "warnings": {
        **IDENTITY_SCHEMA,
        "rank": pl.Int64(),
        "kind": pl.String(),
        "source": pl.String(),
        "text": pl.String(),
    },
    "network": {
        **IDENTITY_SCHEMA,
        "source": pl.String(),
        "index": pl.Int64(),
        "device": pl.String(),
        "port": pl.Int64(),
        "link": pl.String(),
        "address": pl.String(),
    },
    "events": {**IDENTITY_SCHEMA, "event": pl.String()},
    "networks": {
        "host": pl.String(),
        "pid": pl.Int64(),
        "line": pl.Int64(),
        "network": pl.String(),
        "name": pl.String(),
        "evidence": pl.String(),
    },
    "pg_comms": {**IDENTITY_SCHEMA, "pg": pl.String(), "rank": pl.Int64(), "comm": pl.String()},
}


def empty_frame(name: str) -> pl.DataFrame:
    """An empty frame with the schema of the model frame `name`."""
    return pl.DataFrame(schema=SCHEMAS[name])


@record
class NcclLog:
    """Everything one NCCL_DEBUG log says, one polars frame per record family (schemas in `SCHEMAS`).

    Memory stays bounded on huge logs: the per-record families that grow with the log are kept as rows only up
    to a cap (`traceview.parsers.nccl_log.MAX_CALL_ROWS`, `MAX_TUNING_ROWS`, `MAX_WARNING_ROWS`), and counted
    in full by the `*_totals` frames. `collectives` holds the first `collective_rows_kept` of the
    `collective_calls_seen` COLL lines; `call_totals` counts every one of them per (host, pid, comm, op,
    datatype, count, root, nranks), with `calls` and `bytes`. Likewise `tuning` / `tuning_totals` (choices per
    host, pid, comm, op, bytes, algo, proto) and `warnings` / `warning_totals` (per kind: count, first line
    and its text). Summaries use the totals; only call-sequence matching uses the kept rows.
    """

    path: str
    versions: pl.DataFrame
    processes: pl.DataFrame
    communicators: pl.DataFrame
    transports: pl.DataFrame
    rings: pl.DataFrame
    trees: pl.DataFrame
    collectives: pl.DataFrame
    call_totals: pl.DataFrame
    tuning: pl.DataFrame
    tuning_totals: pl.DataFrame
    init_timings: pl.DataFrame
    channel_counts: pl.DataFrame
    warnings: pl.DataFrame
    warning_totals: pl.DataFrame
    network: pl.DataFrame
    events: pl.DataFrame
    pg_comms: pl.DataFrame
    networks: pl.DataFrame
    settings: dict[str, str] = field(default_factory=dict)
    lines_total: int = 0
    lines_skipped: int = 0
    lines_too_long: int = 0
    chars_replaced: int = 0
    records: int = 0
    records_unrecognised: int = 0
    lines_joined: int = 0
    collective_calls_seen: int = 0
    collective_rows_kept: int = 0
    tuning_lines_seen: int = 0
    tuning_rows_kept: int = 0
    warnings_seen: int = 0
    warning_rows_kept: int = 0
    notes: tuple[str, ...] = ()

    def frame(self, name: str) -> pl.DataFrame:
        """The model frame called `name` (a key of `SCHEMAS`)."""
        value = getattr(self, name)
        assert isinstance(value, pl.DataFrame)
        return value

    def validate(self) -> NcclLog:
        """Check every frame against its schema and the line counts; raise InputError naming the file."""
        for name, schema in SCHEMAS.items():
            got = dict(self.frame(name).schema)
            if got != schema:
                raise InputError(
                    self.path, f"NCCL log model frame {name!r} has schema {got}, expected {schema}"
                )
        if not 0 <= self.lines_too_long <= self.lines_skipped <= self.lines_total:
            raise InputError(self.path, f"{self.lines_skipped} skipped lines of {self.lines_total}")
        for family, kept, seen, total in (
            ("COLL", self.collectives.height, self.collective_calls_seen, self.call_totals["calls"].sum()),
            ("TUNING", self.tuning.height, self.tuning_lines_seen, self.tuning_totals["choices"].sum()),
            ("warning", self.warnings.height, self.warnings_seen, self.warning_totals["count"].sum()),
        ):
            if not kept <= seen == total:
                raise InputError(self.path, f"{kept} {family} rows kept, {seen} seen, {total} counted")
        return self

    @property
    def version(self) -> str | None:
        """The NCCL version the log states (the most frequent one), or None."""
        if self.versions.is_empty():
            return None
        counts = self.versions["version"].value_counts(sort=True)
        return str(counts["version"][0])

    @property
    def network_in_use(self) -> str | None:
        """The network NCCL says it uses (`networks`): IB, Socket or Plugin, several comma-separated when
        processes differ, None when the log does not say."""
        names = sorted(self.networks.get_column("network").drop_nulls().unique().to_list())
        return ", ".join(names) or None


def dtype_table() -> pl.DataFrame:
    """`DTYPES` as a frame: datatype (code), dtype (name), dtype_size (bytes per element)."""
    return pl.DataFrame(
        [list(row) for row in DTYPES],
        schema={"datatype": pl.Int64(), "dtype": pl.String(), "dtype_size": pl.Int64()},
        orient="row",
    )


def first_match(column: str, table: tuple[tuple[str, str], ...], default: pl.Expr) -> pl.Expr:
    """An expression giving the label of the first (label, regex) row of `table` that matches `column`."""
    return reduce(
        lambda chain, row: pl.when(pl.col(column).str.contains(row[1])).then(pl.lit(row[0])).otherwise(chain),
        reversed(table),
        default,
    )


def transport_kind(via: str = "via") -> pl.Expr:
    """The normalised transport kind (`TRANSPORT_KINDS`) of the text after "via"."""
    return first_match(via, TRANSPORT_KINDS, pl.lit("other"))


# Degraded transports: (reason, condition) rows, the first true condition names the reason. Columns available:
# kind, p2p_on_host (some pair on this host uses P2P), p2p_disabled (NCCL_P2P_DISABLE=1 in the settings).
DEGRADED_RULES: tuple[tuple[str, pl.Expr], ...] = (
    ("TCP sockets instead of IB/RoCE", pl.col("kind") == "NET/Socket"),
    ("SHM with P2P disabled by NCCL_P2P_DISABLE", (pl.col("kind") == "SHM") & pl.col("p2p_disabled")),
    ("SHM where other GPU pairs on this host use P2P", (pl.col("kind") == "SHM") & pl.col("p2p_on_host")),
)


def flag_degraded(transports: pl.DataFrame, settings: dict[str, str]) -> pl.DataFrame:
    """`transports` with `degraded` and `degraded_reason` set by `DEGRADED_RULES`."""
    reason = reduce(
        lambda chain, row: pl.when(row[1]).then(pl.lit(row[0])).otherwise(chain),
        reversed(DEGRADED_RULES),
        pl.lit(None, dtype=pl.String()),
    )
    return (
        transports.with_columns(
            p2p_on_host=(pl.col("kind") == "P2P").any().over(pl.col("host").fill_null("")),
            p2p_disabled=pl.lit(settings.get("NCCL_P2P_DISABLE", "0").strip() == "1"),
        )
        .with_columns(degraded_reason=reason)
        .with_columns(degraded=pl.col("degraded_reason").is_not_null())
        .drop("p2p_on_host", "p2p_disabled")
    )
