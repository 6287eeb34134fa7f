"""A trend's history kept as a Parquet file (`traceview trend --history FILE`, docs/compare.md, "History"):
one row per (run, rank, step) with the run's identity and the time budget's per-step figures, so that a
nightly job adds tonight's summary to the series and other dashboards read the same file (polars, pandas,
DuckDB, Spark read Parquet).

Rewritten atomically night by night (`traceview.core.output.atomic_output`: a temporary file beside it, then a
rename) under an exclusive lock on `FILE.lock` (`fcntl.flock`), so that two writers at once take turns and the
second adds its runs to the first's; a run already in the history (same source and start) is replaced. The
lock's holder writes who it is in the lock file (pid, host, time), cleared on release; a writer waits for it
up to `--lock-timeout` (60 s) and then exits 2 naming the holder.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import io
import os
import socket
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import polars as pl

from traceview.compare.crossrank_findings import Straggler
from traceview.compare.findings import TREND_METRICS
from traceview.compare.series import RunSeries
from traceview.core.errors import InputError, RunError
from traceview.core.output import atomic_output
from traceview.core.reading import check_kind
from traceview.core.sanitize import printable

RUN_COLUMNS: dict[str, pl.DataType] = {
    "run_key": pl.Utf8(),
    "name": pl.Utf8(),
    "label": pl.Utf8(),
    "started_us": pl.Float64(),
    "time_source": pl.Utf8(),
    "source": pl.Utf8(),
    "job": pl.Utf8(),
    "commit": pl.Utf8(),
}
"""Who each run is (repeated on each of its rows)."""
STEP_COLUMNS: dict[str, pl.DataType] = {
    "rank": pl.Int64(),
    "step": pl.Int64(),
    **{metric: pl.Float64() for metric in TREND_METRICS},
}
CROSSRANK_COLUMNS: dict[str, pl.DataType] = {
    "straggler": pl.Boolean(),
    "lateness_cost_us": pl.Float64(),
    "lateness_cost_share": pl.Float64(),
    "straggler_cause": pl.Utf8(),
    "skew_us": pl.List(pl.Float64()),
}
"""The cross-rank findings trend and compare share (`traceview.compare.crossrank_findings`): on each row of
a rank, whether the run named it a straggler (null: the run has no across-ranks analysis), with its cost and
cause; on the run's first row only, the arrival skew of every matched collective instance."""
HISTORY_SCHEMA: dict[str, pl.DataType] = {**RUN_COLUMNS, **STEP_COLUMNS, **CROSSRANK_COLUMNS}
"""The history's columns (a run's figure a summary lacks is null)."""


def run_key(run: RunSeries) -> str:
    """What makes a run the same run twice: its source and its recorded start (else its file name)."""
    return f"{run.source}@{run.started_us}" if run.started_us is not None else f"{run.source}@{run.name}"


def _rows(run: RunSeries) -> pl.DataFrame:
    frame = run.per_step
    present = [pl.col(c).cast(t, strict=False) for c, t in STEP_COLUMNS.items() if c in frame.columns]
    missing = [pl.lit(None, t).alias(c) for c, t in STEP_COLUMNS.items() if c not in frame.columns]
    steps = frame.select(*present, *missing) if frame.height else pl.DataFrame(schema=STEP_COLUMNS)
    identity = {
        "run_key": run_key(run),
        "name": run.name,
        "label": run.label,
        "started_us": run.started_us,
        "time_source": run.time_source,
        "source": run.source,
        "job": run.job,
        "commit": run.commit,
    }
    return (
        steps.with_columns(pl.lit(v, RUN_COLUMNS[k]).alias(k) for k, v in identity.items())
        .with_columns(_straggler_columns(run))
        .with_columns(
            pl.when(pl.int_range(pl.len()) == 0)
            .then(pl.lit(pl.Series([list(run.skew_us)], dtype=CROSSRANK_COLUMNS["skew_us"])))
            .otherwise(None)
            .alias("skew_us")
        )
        .select(list(HISTORY_SCHEMA))
    )


def _straggler_columns(run: RunSeries) -> list[pl.Expr]:
    """`straggler` (true where the run names the row's rank; null on every row when the run cannot say) and
    the named ranks' cost, share and cause (null elsewhere)."""
    named = {s.rank: s for s in run.stragglers or ()}
    found = [
        (
            pl.lit(None, pl.Boolean())
            if run.stragglers is None
            else pl.col("rank").is_in(list(named)).fill_null(False)
        ).alias("straggler")
    ]
    for column, attribute in (
        ("lateness_cost_us", "cost_us"),
        ("lateness_cost_share", "cost_share"),
        ("straggler_cause", "cause"),
    ):
        values = {rank: getattr(s, attribute) for rank, s in named.items()}
        found.append(
            pl.col("rank")
            .replace_strict(values, default=None, return_dtype=CROSSRANK_COLUMNS[column])
            .alias(column)
        )
    return found


def _crossrank(rows: pl.DataFrame) -> tuple[tuple[float, ...], tuple[Straggler, ...] | None]:
    """A run's skews and named stragglers, as its rows keep them (none known: an older history)."""
    skews = rows.get_column("skew_us").drop_nulls()
    skew = tuple(skews[0]) if len(skews) else ()
    if rows.get_column("straggler").null_count() == rows.height:
        return skew, None
    named = rows.filter(pl.col("straggler")).unique("rank", maintain_order=True).sort("rank")
    return skew, tuple(
        Straggler(r["rank"], r["lateness_cost_us"], r["lateness_cost_share"], r["straggler_cause"])
        for r in named.iter_rows(named=True)
    )


def history_frame(runs: Sequence[RunSeries]) -> pl.DataFrame:
    """The rows of `runs`, in the history's schema."""
    return pl.concat([pl.DataFrame(schema=HISTORY_SCHEMA), *map(_rows, runs)], how="vertical_relaxed")


def runs_of(frame: pl.DataFrame) -> list[RunSeries]:
    """The runs a history holds, in the order their rows first appear."""
    runs = []
    for _, rows in frame.group_by("run_key", maintain_order=True):
        first = rows.row(0, named=True)
        skew, stragglers = _crossrank(rows)
        runs.append(
            RunSeries(
                first["name"],
                first["started_us"],
                rows.select(list(STEP_COLUMNS)),
                first["time_source"],
                first["source"] or first["name"],
                first["commit"],
                first["job"],
                first["label"],
                skew_us=skew,
                stragglers=stragglers,
            )
        )
    return runs


def read_history(path: Path) -> pl.DataFrame:
    """The history at `path` (an empty one when it does not exist). Raises `InputError` when it is not a
    traceview history (another file, a column missing)."""
    if not path.exists():
        return pl.DataFrame(schema=HISTORY_SCHEMA)
    check_kind(path)
    try:
        frame = pl.read_parquet(path)
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise InputError(path, f"not a Parquet file ({str(exc).splitlines()[0][:200]})") from None
    missing = [column for column in RUN_COLUMNS if column not in frame.columns]
    if missing:
        raise InputError(path, f"not a traceview trend history: no column {missing[0]!r}")
    extra = [pl.lit(None, t).alias(c) for c, t in HISTORY_SCHEMA.items() if c not in frame.columns]
    return frame.with_columns(extra).select(
        pl.col(c).cast(t, strict=False) for c, t in HISTORY_SCHEMA.items()
    )


LOCK_TIMEOUT_S = 60.0
"""Seconds a writer waits for the history's lock held by another (`--lock-timeout`)."""
LOCK_POLL_S = 0.1


def _holder(handle: int) -> str:
    """Who holds the lock, as its holder wrote it in the lock file (`pid P on HOST since TIME`)."""
    try:
        said = os.pread(handle, 200, 0).decode("utf-8", "replace").strip()
    except OSError:
        said = ""
    return printable(said, 200) if said.startswith("pid ") else "a writer that did not say who it is"


def _take(handle: int, lock: Path, timeout_s: float) -> None:
    """Take the exclusive lock on `handle`, waiting up to `timeout_s`; then say who holds it (pid, host, time)
    in the lock file. Raises `RunError` naming the holder when it is not released in time."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                holder = _holder(handle)
                raise RunError(
                    f"--history {printable(lock.with_suffix(''))}: locked by another writer ({holder}, in "
                    f"{printable(lock)}); waited {timeout_s:g} s (--lock-timeout)"
                ) from None
            time.sleep(LOCK_POLL_S)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    with contextlib.suppress(OSError):
        os.ftruncate(handle, 0)
        os.pwrite(handle, f"pid {os.getpid()} on {socket.gethostname()} since {stamp}\n".encode(), 0)


@contextlib.contextmanager
def locked(path: Path, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """An exclusive lock on `path` + `.lock` (created when missing), held for the block: writers take turns,
    each waiting up to `timeout_s` (then `RunError` naming the holder's pid, host and time)."""
    lock = path.with_name(path.name + ".lock")
    try:
        handle = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise InputError(lock, f"cannot open the history's lock: {exc.strerror or exc}") from None
    try:
        _take(handle, lock, timeout_s)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(handle, 0)  # the holder's line goes with its hold
                fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        os.close(handle)


def update_history(
    path: Path, runs: Sequence[RunSeries], lock_timeout_s: float = LOCK_TIMEOUT_S
) -> tuple[list[RunSeries], list[str]]:
    """Add `runs` to the history at `path` (a run already there is replaced), rewrite it atomically under
    the lock; every run it now holds, and one line for each run replaced (`replaced the history's row of
    ...`: a summary re-analysed, perhaps under a new label, is never replaced silently). The file is made in
    memory and written whole: a full disk is one `UsageError` naming `--history`, and the old history stays
    as it was."""
    new = history_frame(runs)
    with locked(path, lock_timeout_s):
        old = read_history(path)
        again = old.filter(pl.col("run_key").is_in(new.get_column("run_key").unique().to_list()))
        replaced = [
            f"replaced the history's row of {row['name']} ({row['source']}, label {row['label'] or '-'})"
            for row in again.unique("run_key", maintain_order=True).iter_rows(named=True)
        ]
        kept = old.filter(~pl.col("run_key").is_in(new.get_column("run_key").unique().to_list()))
        merged = pl.concat([kept, new], how="vertical_relaxed").sort(
            "started_us", nulls_last=True, maintain_order=True
        )
        content = io.BytesIO()
        merged.write_parquet(content)
        with atomic_output(path, "--history") as temporary:
            temporary.write_bytes(content.getvalue())
    return runs_of(merged), replaced
