"""The raw rows of the NCCL_DEBUG log reader, typed into polars frames batch by batch (`RawRows`).

Raw rows are text tuples (identity + a pattern's groups); `RawRows.add` types a batch as soon as it is full,
so what is held is compact columns, not strings. A family with a limit keeps its first rows only; the rest are
counted by its `parsers.nccl_log_totals.Reducer` (bounded memory on huge logs).
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence

import polars as pl
from traceview.parsers.nccl_log._patterns import Pattern
from traceview.parsers.nccl_log._totals import MERGE_FRAMES, Reducer

IDENTITY_COLUMNS = ("line", "host", "pid", "tid", "cuda_dev")
WARN_COLUMNS = (*IDENTITY_COLUMNS, "source", "text")
BATCH_ROWS = 8_192
"""Raw rows of one family typed into a polars frame at a time."""

_INT_COLUMNS = frozenset(
    (
        *("pid", "tid", "cuda_dev", "count", "datatype", "red_op", "root", "nranks", "task", "global_rank"),
        *(
            "channel",
            "conn",
            "from_rank",
            "to_rank",
            "n_channels",
            "bytes",
            "channel_lo",
            "channel_hi",
            "rank",
        ),
        *(
            "nvml_dev",
            "init_dev",
            "pg_dev",
            "n_nodes",
            "local_ranks",
            "local_rank",
            "coll",
            "collnet",
            "nvls",
        ),
        *("p2p", "p2p_per_peer", "code"),
    )
)
_HEX_COLUMNS = frozenset({"opcount"})
_FLOAT_COLUMNS = frozenset({"time_us", "total_s"})


def typed(column: str) -> pl.Expr:
    """The expression giving raw text column `column` its type (hex, integer, float, else text)."""
    if column in _HEX_COLUMNS:
        return pl.col(column).str.to_integer(base=16, strict=False).cast(pl.Int64())
    if column in _INT_COLUMNS:
        return pl.col(column).cast(pl.Int64(), strict=False)
    if column in _FLOAT_COLUMNS:
        return pl.col(column).cast(pl.Float64(), strict=False)
    return pl.col(column)


class RawRows:
    """Typed batches per pattern name (the NCCL WARN records as "warn"), each family kept up to its limit.

    `limits`: rows kept per family (absent: all); the rows past a family's limit are counted by its
    `parsers.nccl_log_totals.Reducer` in `reducers` and dropped. `seen` counts every row of every family.
    """

    def __init__(
        self, limits: Mapping[str, int] | None = None, reducers: Mapping[str, Reducer] | None = None
    ) -> None:
        self.batches: dict[str, list[pl.DataFrame]] = collections.defaultdict(list)
        self.limits = dict(limits or {})
        self.reducers = dict(reducers or {})
        self.seen: collections.Counter[str] = collections.Counter()
        self.kept: collections.Counter[str] = collections.Counter()
        self.spilled: dict[str, list[pl.DataFrame]] = collections.defaultdict(list)
        self.warn_rows: list[tuple[object, ...]] = []

    def add(self, pattern: Pattern, rows: Sequence[tuple[object, ...]]) -> None:
        """Type one batch of `pattern`'s rows (identity columns, then the regex groups in order)."""
        groups = sorted(pattern.regex.groupindex, key=pattern.regex.groupindex.__getitem__)
        self.add_rows(pattern.name, [*IDENTITY_COLUMNS, *groups], rows)

    def add_rows(self, name: str, columns: Sequence[str], rows: Sequence[tuple[object, ...]]) -> None:
        """Type one batch of family `name` (text columns as printed, `line` an int) and keep or count it."""
        schema = {column: (pl.Int64() if column == "line" else pl.String()) for column in columns}
        frame = pl.DataFrame(rows, schema=schema, orient="row").select(typed(column) for column in columns)
        self.seen[name] += frame.height
        room = max(self.limits.get(name, self.kept[name] + frame.height) - self.kept[name], 0)
        if room < frame.height:
            reducer = self.reducers[name]
            spilled = self.spilled[name]
            spilled.append(reducer.reduce(name, frame.slice(room)))
            if len(spilled) >= MERGE_FRAMES:
                self.spilled[name] = [reducer.merge(pl.concat(spilled, how="diagonal_relaxed"))]
            frame = frame.head(room)
        if not frame.is_empty():
            self.batches[name].append(frame)
            self.kept[name] += frame.height

    def add_warning(self, ident: tuple[object, ...], source: str | None, text: str) -> None:
        """Take one `NCCL WARN` record (typed in batches of `BATCH_ROWS` as family "warn")."""
        self.warn_rows.append((*ident, source, text))
        if len(self.warn_rows) >= BATCH_ROWS:
            self.flush_warnings()

    def flush_warnings(self) -> None:
        """Type the NCCL WARN records still held as text."""
        if self.warn_rows:
            self.add_rows("warn", WARN_COLUMNS, self.warn_rows)
            self.warn_rows = []

    def frame(self, name: str) -> pl.DataFrame:
        """Take the kept batches of family `name` as one frame, or an empty one.

        Taken, not copied: the batches are released, so each name is read once.
        """
        batches = self.batches.pop(name, None)
        if not batches:
            return pl.DataFrame(schema={"line": pl.Int64()})
        frame = batches[0] if len(batches) == 1 else pl.concat(batches, how="diagonal_relaxed", rechunk=False)
        return frame if frame["line"].is_sorted() else frame.sort("line")

    def take_spilled(self, name: str) -> list[pl.DataFrame]:
        """The partial totals of family `name`'s rows past its limit (taken, not copied)."""
        return self.spilled.pop(name, [])
