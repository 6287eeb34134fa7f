"""The host side of collectives: the calls (docs/metrics.md section 2), the bytes their `Input Dims` name and
the launches (docs/metrics.md, "Collectives"); the process groups of `distributedInfo.pg_config` are
`traceview.collectives.groups`. Used by `traceview.collectives.kernels`.

A collective call is a host op of one of the `CALL_FAMILIES`: the `c10d::*` operator (`c10d::allreduce_`),
`record_param_comms` (which carries the comm args in traces that record them) and the backend annotation
(`nccl:all_reduce`, `gloo:all_reduce`, whose `Input Dims`/`Input type` name the input tensors). They nest in
that order on the thread that launches the kernel. Every function is vectorised over all calls of all ranks.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from itertools import accumulate

import polars as pl

from traceview.collectives.groups import canonical_ranks
from traceview.core.vocab import (
    CALL_FAMILIES,
    canonical_collective_expr,
    canonical_dtype_expr,
    dtype_size_expr,
)
from traceview.model.time_base import aligned_ranks
from traceview.model.trace import RankTrace, Run

C10D_TENSOR_ARGS: Mapping[str, tuple[int, int]] = {
    "c10d::_allgather_base_": (0, 1),
    "c10d::_reduce_scatter_base_": (0, 1),
    "c10d::alltoall_base_": (0, 1),
    "record_param_comms": (-1, 0),
}
"""Calls whose `Input Dims` name single tensors: op -> (output arg index, input arg index; -1: none). The
`c10d::*` base operators name their output then input; `record_param_comms` records the collective's input
tensor first (then its scalar parameters): a rank whose `record_param_comms` lost its `In msg nelems` still
has its input's shape there (a `TensorList` first argument has no shape and gives none)."""

_FIELDS = (
    "collective",
    "in_nelems",
    "out_nelems",
    "dtype",
    "group_size",
    "pg_name",
    "pg_desc",
    "pg_ranks",
    "seq",
    "in_split",
    "out_split",
)
CALL_COLUMNS = (
    "call_row",
    "name",
    "start_us",
    "end_us",
    *_FIELDS,
    "in_bytes",
    "out_bytes",
    "dims_in",
    "dims_out",
    "dims_dtype",
)
_DIMS_LIST = r"^\[\s*(?:\[[-0-9,\s]*\]\s*,?\s*)*\]$"
_TYPES_LIST = r'^\[\s*(?:"[^"\\]*"\s*,?\s*)*\]$'


@functools.cache
def arg_fields() -> tuple[pl.Expr, ...]:
    """The comm args of a row (kernel or call), normalised: canonical collective and dtype, bytes."""
    size = dtype_size_expr(pl.col("dtype"))
    return (
        canonical_collective_expr(pl.col("collective_name")).alias("collective"),
        canonical_dtype_expr(pl.col("dtype")).alias("dtype"),
        (pl.col("in_nelems") * size).alias("in_bytes"),
        (pl.col("out_nelems") * size).alias("out_bytes"),
        canonical_ranks(pl.col("pg_ranks")).alias("pg_ranks"),
    )


@functools.cache
def _family_expr() -> pl.Expr:
    """The `CALL_FAMILIES` family of a host op's name (the first that matches); null for every other op."""
    return pl.coalesce(
        [pl.when(pl.col("name").str.contains(regex)).then(pl.lit(f)) for f, regex in CALL_FAMILIES]
    )


_ANY_CALL = "|".join(f"(?:{regex})" for _, regex in CALL_FAMILIES)


def _maybe_calls(run: Run) -> list[tuple[RankTrace, pl.Series]]:
    """Each rank (run time base) and which of its host rows may be a collective call (a name of a
    `CALL_FAMILIES` family): one scan of the names of all ranks, so the queries read those rows only."""
    ranks = aligned_ranks(run)
    if not ranks:
        return []
    names = [trace.cpu.get_column("name") for trace in ranks]
    found = pl.concat(names).str.contains(_ANY_CALL)
    starts = accumulate((trace.cpu.height for trace in ranks), initial=0)
    return [(t, found.slice(start, t.cpu.height)) for t, start in zip(ranks, starts, strict=False)]


def makes_calls(run: Run) -> bool:
    """Whether a rank of `run` has a host op named like a collective call (no query: `collective_calls` and
    `call_counts` are empty without one)."""
    return _any_candidate(_maybe_calls(run))


def _any_candidate(maybe_calls: list[tuple[RankTrace, pl.Series]]) -> bool:
    masks = [maybe for _, maybe in maybe_calls]
    return bool(masks) and bool(pl.concat(masks).any())


def call_rows(run: Run) -> pl.LazyFrame | None:
    """The query of `collective_calls` without the bytes of `Input Dims` (None for a run without ranks)."""
    return _call_rows(_maybe_calls(run))


def _call_rows(maybe_calls: list[tuple[RankTrace, pl.Series]]) -> pl.LazyFrame | None:
    frames = [
        trace.cpu.lazy()
        .filter(maybe, pl.col("kind") != "runtime")
        .with_columns(pl.lit(trace.rank, pl.Int64).alias("rank"))
        for trace, maybe in maybe_calls
    ]
    if not frames:
        return None
    return (
        pl.concat(frames, how="vertical_relaxed")
        .with_columns(_family_expr().alias("family"))
        .filter(pl.col("family").is_not_null())
        .with_columns(*_call_fields())
        .filter((pl.col("family") != "c10d") | pl.col("collective").is_not_null())
        .with_row_index("call_row")
        .with_columns(pl.col("call_row").cast(pl.Int64))
    )


@functools.cache
def _call_fields() -> tuple[pl.Expr, ...]:
    """A call's normalised args; its collective from `Collective name`, else from its own name."""
    return (
        *[expr for expr in arg_fields() if expr.meta.output_name() != "collective"],
        pl.coalesce(
            canonical_collective_expr(pl.col("collective_name")),
            canonical_collective_expr(pl.col("name")),
        ).alias("collective"),
    )


def collective_calls_query(run: Run) -> pl.LazyFrame | None:
    """The query of `collective_calls` (None for a run without ranks), to fuse into a larger one."""
    calls = call_rows(run)
    return (
        None
        if calls is None
        else calls.join(_dims_bytes(calls), on="call_row", how="left", maintain_order="left")
    )


def collective_calls(run: Run) -> pl.DataFrame:
    """Every host collective call of every rank (run time base): `rank`, `pid`, `tid`, `family`, `call_row`,
    the normalised args (`collective`, `dtype`, `in_bytes`, ...) and the bytes of `Input Dims` (`dims_in`,
    `dims_out`, `dims_dtype`). `c10d::*` ops that name no known collective (`c10d::wait`) are left out."""
    calls = collective_calls_query(run)
    return pl.DataFrame() if calls is None else calls.collect()


def _tensors(calls: pl.LazyFrame) -> pl.LazyFrame:
    """One row per tensor argument of a call with a known dtype: `call_row`, `family`, `roles` (the
    `C10D_TENSOR_ARGS` entry), `arg` (argument index), `bytes`, `tensor_dtype`. Calls whose `Input Dims` or
    `Input type` is not a plain list of shapes / of names, or whose lengths differ, give none."""
    exprs = _tensor_exprs()
    return (
        calls.filter(exprs["readable"])
        .select("call_row", "family", exprs["roles"], exprs["dims"], exprs["types"])
        .filter(pl.col("dims").list.len() == pl.col("types").list.len())
        .with_columns(pl.int_ranges(pl.col("dims").list.len()).alias("arg"))
        .explode("dims", "types", "arg")
        .with_columns(exprs["bytes"], exprs["tensor_dtype"])
        .filter(pl.col("bytes").is_not_null())
    )


@functools.cache
def _tensor_exprs() -> dict[str, pl.Expr]:
    """The expressions of `_tensors`, by the column they make (`readable`: the calls it reads)."""
    roles = pl.col("name").replace_strict(
        {name: list(indices) for name, indices in C10D_TENSOR_ARGS.items()},
        default=None,
        return_dtype=pl.List(pl.Int64),
    )
    numel = pl.col("dims").list.eval(pl.element().product()).list.first()
    return {
        "readable": pl.col("input_dims").str.contains(_DIMS_LIST)
        & pl.col("input_types").str.contains(_TYPES_LIST),
        "roles": roles.alias("roles"),
        "dims": pl.col("input_dims").str.json_decode(pl.List(pl.List(pl.Int64))).alias("dims"),
        "types": pl.col("input_types").str.json_decode(pl.List(pl.Utf8)).alias("types"),
        "bytes": (numel * dtype_size_expr(pl.col("types"))).alias("bytes"),
        "tensor_dtype": canonical_dtype_expr(pl.col("types")).alias("tensor_dtype"),
    }


def _dims_bytes(calls: pl.LazyFrame) -> pl.LazyFrame:
    """Bytes of each call's tensors from `Input Dims` x `Input type`: `call_row`, `dims_in`, `dims_out`,
    `dims_dtype`. Backend annotations: every tensor is an input; `C10D_TENSOR_ARGS` ops: the named ones."""
    return _tensors(calls).group_by("call_row").agg(*_dims_totals())


@functools.cache
def _dims_totals() -> tuple[pl.Expr, ...]:
    backend = pl.col("family") == "backend"
    role = pl.col("roles").list
    is_in = (backend | (pl.col("arg") == role.get(1, null_on_oob=True))).fill_null(False)
    is_out = (~backend & (pl.col("arg") == role.get(0, null_on_oob=True))).fill_null(False)

    def total(selected: pl.Expr, name: str) -> pl.Expr:
        return pl.when(selected.any()).then(pl.col("bytes").filter(selected).sum()).alias(name)

    return (
        total(is_in, "dims_in"),
        total(is_out, "dims_out"),
        pl.col("tensor_dtype").filter(is_in | is_out).first().alias("dims_dtype"),
    )


_LAUNCH_SCHEMA = {
    "rank": pl.Int64,
    "correlation": pl.Int64,
    "pid": pl.Utf8,
    "tid": pl.Utf8,
    "launch_us": pl.Float64,
}


def launches(run: Run) -> pl.DataFrame:
    """Runtime calls that carry a correlation id: `rank`, `correlation`, `pid`, `tid`, `launch_us`; the first
    of a rank's calls of one correlation id, in the order of the rank's host rows."""
    frames = [
        trace.cpu.lazy()
        .filter(_LAUNCH_ROW)
        .filter(pl.col("correlation").is_first_distinct())
        .select(pl.lit(trace.rank, pl.Int64).alias("rank"), *_LAUNCH_COLUMNS)
        for trace in aligned_ranks(run)
    ]
    return pl.concat(frames).collect() if frames else pl.DataFrame(schema=_LAUNCH_SCHEMA)


_LAUNCH_ROW = (pl.col("kind") == "runtime") & pl.col("correlation").is_not_null()
_LAUNCH_COLUMNS = ("correlation", "pid", "tid", pl.col("start_us").alias("launch_us"))


_COUNTS_SCHEMA = {"rank": pl.Int64, "name": pl.Utf8, "family": pl.Utf8, "calls": pl.Int64}


def call_counts(run: Run) -> pl.DataFrame:
    """How many host collective calls each rank makes, per call name and family (`rank`, `name`, `family`,
    `calls`): at world size 1 they are all a run has to say about its communication."""
    maybe_calls = _maybe_calls(run)
    calls = _call_rows(maybe_calls) if _any_candidate(maybe_calls) else None
    counts = (
        None
        if calls is None
        else calls.group_by("rank", "name", "family")
        .agg(pl.len().cast(pl.Int64).alias("calls"))
        .sort("rank", "calls", "name", descending=[False, True, False])
        .collect()
    )
    if counts is None or counts.height == 0:
        return pl.DataFrame(schema=_COUNTS_SCHEMA)
    return counts


__all__ = [
    "C10D_TENSOR_ARGS",
    "CALL_COLUMNS",
    "arg_fields",
    "call_counts",
    "call_rows",
    "collective_calls",
    "collective_calls_query",
    "launches",
    "makes_calls",
]
