"""Communication-kernel names decoded into (collective, algorithm, protocol, reduction op, dtype)
(docs/metrics.md section 2 and "Collectives").

One table, `DEFAULT_PATTERNS` (`traceview.events.kernel_table`), holds a regular expression per naming
generation of every library (NCCL, RCCL, MSCCL, PyTorch symmetric memory, DeepEP, NVSHMEM, vLLM/SGLang and
TensorRT-LLM custom all-reduce, Transformer Engine userbuffers); named groups `collective`, `algorithm`,
`protocol`, `reduce_op` and `dtype` capture the fields a name carries (any may be absent), and a row may imply
the collective (DeepEP's dispatch is an all-to-all). The first matching row wins, user rows (`user_patterns`:
`--compute-pattern` rows, then `--comm-pattern` rows) before the defaults. A name that only the catch-all rows
match (`nccl*Kernel*`, `rccl*`, `msccl*Kernel*`) is still communication, with null fields, and so is a name
that only looks like communication (library `suspected`: `allreduce`, `all_to_all`, `nvshmem`, `multimem`,
...): an unknown communication kernel is never dropped nor silently counted as compute. Field values are
normalised by `traceview.core.vocab` (`Ring` -> `RING`, `sum` -> `Sum`, `f32`/`float` -> `float32`); a value
outside its table is null.

Generations, as the kernels are named in Kineto traces:

- NCCL <= 2.7: `ncclAllReduceRingLLKernel_sum_f32(ncclColl)`, `ncclBroadcastRingLLKernel_copy_i8`,
  `ncclSendRecvKernel_copy_i8` (`copy` is no reduction: null).
- NCCL 2.8-2.18 (and RCCL of that era): `ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)`,
  `ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)`, the bare
  `ncclKernel_AllReduce`.
- NCCL >= 2.19: `ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)`, `ncclDevKernel_AllGather_RING_LL(...)`,
  `ncclDevKernel_SendRecv(...)`; `ncclDevKernel_Generic` (no fields); RCCL: `ncclDevKernel_Generic_4`. The
  trailing `RING_LL` is the kernel's specialisation (`kernel_specialization`), never its algorithm/protocol:
  NCCL's generator (`src/device/generate.py`, `best_kernel`) compiles every algorithm but TREE into the
  `RING_LL` kernel and every reduction into `Sum`, and one launch runs whatever the plan chose.
- RCCL specialized kernels: `ncclDevKernel_AllReduce_RING_LL128_Sum_bf16_..._Specialized` (algorithm and
  protocol before the reduction: they are what runs, `algorithm`/`protocol` filled).
- NCCL >= 2.27 symmetric-memory kernels: `ncclSymDevKernel_AllReduce_AGxLL_R_sum_bf16`,
  `ncclSymkDevKernel_*` (their algorithms, e.g. `AGxLL_R`, are outside the NCCL algorithm list: null).
- MSCCL (RCCL, msccl): `mscclKernel_Sum_float_LL128_false(...)` (op, dtype, protocol; collective unknown).

Algorithm and protocol come only from evidence: the names of NCCL 2.18 and
before, RCCL's specialized names, the NCCL_DEBUG log (TUNING) and NCCL Inspector; a modern NCCL name fills
`kernel_specialization` only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

import polars as pl

from traceview.core.errors import UsageError
from traceview.core.vocab import (
    canonical_algorithm_expr,
    canonical_collective_expr,
    canonical_dtype_expr,
    canonical_protocol_expr,
    canonical_reduce_op_expr,
)
from traceview.events._kernel_grammar import KernelPattern
from traceview.events.kernel_table import DEFAULT_PATTERNS

FIELDS: tuple[str, ...] = ("collective", "algorithm", "protocol", "reduce_op", "dtype", "specialization")
"""Named groups a pattern may capture."""

_OUTPUT_COLUMNS: Mapping[str, tuple[str, Callable[[pl.Expr], pl.Expr]]] = {
    "kernel_collective": ("collective", canonical_collective_expr),
    "algorithm": ("algorithm", canonical_algorithm_expr),
    "protocol": ("protocol", canonical_protocol_expr),
    "reduce_op": ("reduce_op", canonical_reduce_op_expr),
    "kernel_dtype": ("dtype", canonical_dtype_expr),
    "kernel_specialization": ("specialization", lambda col: col.str.to_uppercase()),
}
"""Output column -> (group it comes from, normalisation)."""

DECODED_SCHEMA: Mapping[str, pl.DataType] = {
    "name": pl.Utf8(),
    "is_comm": pl.Boolean(),
    "comm_library": pl.Utf8(),
    **{column: pl.Utf8() for column in _OUTPUT_COLUMNS},
}
"""Columns of `decode_kernel_names`, in order."""

_GROUP_NAME = re.compile(r"\(\?P?<([A-Za-z_][A-Za-z0-9_]*)>")
__all__ = [
    "DECODED_SCHEMA",
    "DEFAULT_PATTERNS",
    "FIELDS",
    "KernelPattern",
    "decode_kernel_names",
    "is_comm_kernel_expr",
    "user_patterns",
    "with_kernel_fields",
]
_USER_SPEC = re.compile(r"^([A-Za-z][A-Za-z0-9_.+-]*)=(.*)$", re.DOTALL)


def _checked_regex(option: str, spec: str, regex: str) -> None:
    """Raise a one-line `UsageError` when `regex` is empty, invalid, or names a group outside `FIELDS`."""
    if not regex:
        raise UsageError(f"{option} {spec!r}: the regular expression is empty")
    unknown = sorted(set(_GROUP_NAME.findall(regex)) - set(FIELDS))
    if unknown:
        raise UsageError(
            f"{option} {spec!r}: unknown group(s) {', '.join(unknown)}; allowed: {', '.join(FIELDS)}"
        )
    try:
        pl.Series([""], dtype=pl.Utf8).str.contains(regex)
    except pl.exceptions.PolarsError as error:
        first_line = next((line for line in str(error).splitlines() if line.strip()), "")
        raise UsageError(f"{option} {spec!r}: not a valid regular expression ({first_line})") from error


def _user_pattern(spec: str) -> KernelPattern:
    """One `--comm-pattern` spec (`REGEX` or `LIBRARY=REGEX`) as a checked `KernelPattern`."""
    match = _USER_SPEC.match(spec)
    library, regex = (match[1], match[2]) if match else ("user", spec)
    _checked_regex("--comm-pattern", spec, regex)
    return KernelPattern(library=library, generation="user", regex=regex)


def _compute_pattern(regex: str) -> KernelPattern:
    """One `--compute-pattern` regex as a checked compute row."""
    _checked_regex("--compute-pattern", regex, regex)
    return KernelPattern(library="user", generation="user compute", regex=regex, is_comm=False)


def user_patterns(specs: Sequence[str], compute_specs: Sequence[str] = ()) -> tuple[KernelPattern, ...]:
    """The user's rows, placed before the defaults: `compute_specs` first (`--compute-pattern REGEX`: names
    that are compute, whatever a later row says), then `specs` (`--comm-pattern REGEX` or `LIBRARY=REGEX`,
    library `user`: names that are communication).

    A regex (Rust/polars syntax, searched anywhere in the name: anchor with `^`) may name groups among
    `FIELDS`. Raises `UsageError` for an empty or invalid regex or an unknown group name.
    """
    return (*(_compute_pattern(spec) for spec in compute_specs), *(_user_pattern(spec) for spec in specs))


DECODED_CACHE_NAMES = 65_536
"""Decoded names a process keeps per pattern set (`decode_kernel_names`); past it the cache starts afresh."""
_DECODED: dict[tuple[KernelPattern, ...], dict[str, tuple[object, ...]]] = {}


def _first_match(patterns: Sequence[KernelPattern]) -> pl.Expr:
    """Index of the first row of `patterns` whose regex the name contains (null: none)."""
    found: pl.Expr = pl.lit(None, dtype=pl.Int32)
    for index in reversed(range(len(patterns))):
        found = (
            pl.when(pl.col("name").str.contains(patterns[index].regex)).then(pl.lit(index)).otherwise(found)
        )
    return found.cast(pl.Int32)


def _field_expr(group: str, rows: Sequence[tuple[int, KernelPattern]]) -> pl.Expr:
    """The text of named group `group` captured by each name's first matching row (null: not captured)."""
    captured = [
        pl.when(pl.col("_row") == index).then(pl.col(f"_groups{index}").struct.field(group))
        for index, pattern in rows
        if group in pattern.groups
    ]
    return pl.coalesce(captured) if captured else pl.lit(None, dtype=pl.Utf8)


def _decode_batch(names: Sequence[str], patterns: tuple[KernelPattern, ...]) -> pl.DataFrame:
    """`DECODED_SCHEMA` rows of `names` (distinct), in their order: two queries whatever the patterns."""
    frame = pl.DataFrame({"name": list(names)}, schema={"name": pl.Utf8}).with_columns(
        _first_match(patterns).alias("_row")
    )
    used = sorted(int(i) for i in frame.get_column("_row").drop_nulls().unique().to_list())
    comm = [(i, patterns[i]) for i in used if patterns[i].is_comm]
    groups = [
        pl.col("name").str.extract_groups(pattern.regex).alias(f"_groups{index}")
        for index, pattern in comm
        if pattern.groups
    ]
    by_row: dict[str, tuple[dict[int, object], pl.DataType, object]] = {
        "is_comm": ({i: True for i, _ in comm}, pl.Boolean(), False),
        "comm_library": ({i: p.library for i, p in comm}, pl.Utf8(), None),
        "_implied": ({i: p.collective for i, p in comm if p.collective}, pl.Utf8(), None),
    }
    looked_up = [
        pl.col("_row")
        .replace_strict(dict(table), default=pl.lit(default, dtype), return_dtype=dtype)
        .alias(name)
        for name, (table, dtype, default) in by_row.items()
    ]
    decoded = {
        column: normalise(_field_expr(group, comm)) for column, (group, normalise) in _OUTPUT_COLUMNS.items()
    }
    decoded["kernel_collective"] = pl.coalesce(decoded["kernel_collective"], pl.col("_implied"))
    return (
        frame.lazy()
        .with_columns(*groups, *looked_up)
        .select("name", "is_comm", "comm_library", *(expr.alias(column) for column, expr in decoded.items()))
        .collect()
    )


def _decoded_rows(names: list[str], patterns: tuple[KernelPattern, ...]) -> list[tuple[object, ...]]:
    """The decoded row of each name, from this process's cache; the names it lacks decoded in one batch."""
    known = _DECODED.setdefault(patterns, {})
    missing = [name for name in dict.fromkeys(names) if name not in known]
    if len(known) + len(missing) > DECODED_CACHE_NAMES:
        known.clear()
        missing = list(dict.fromkeys(names))
    if missing:
        known.update((str(row[0]), row) for row in _decode_batch(missing, patterns).iter_rows())
    return [known[name] for name in names]


def decode_kernel_names(names: pl.Series, extra: Sequence[KernelPattern] = ()) -> pl.DataFrame:
    """One row per distinct non-null kernel name (first-seen order), with columns `DECODED_SCHEMA`.

    `is_comm` says whether any pattern (`extra` first, then `DEFAULT_PATTERNS`) matches; the first match
    gives `comm_library` and the normalised fields, null where the name does not carry them. Each distinct
    name is decoded once per process (a run's ranks share their few hundred kernel names): the names not yet
    seen are decoded together, by one query that finds each name's first matching row and one that reads
    the fields of the rows found.
    """
    distinct = names.cast(pl.Utf8).drop_nulls().unique(maintain_order=True).to_list()
    rows = _decoded_rows(distinct, (*extra, *DEFAULT_PATTERNS))
    return pl.DataFrame(rows, schema=dict(DECODED_SCHEMA), orient="row")


def with_kernel_fields(
    frame: pl.DataFrame, extra: Sequence[KernelPattern] = (), name: str = "name"
) -> pl.DataFrame:
    """`frame` with the decoded columns of its `name` column joined on (row order kept).

    Decodes each distinct name once, so it costs one `unique` and one join however many rows share a name.
    """
    decoded = decode_kernel_names(frame.get_column(name), extra).rename({"name": name})
    return frame.join(decoded, on=name, how="left", maintain_order="left")


def is_comm_kernel_expr(extra: Sequence[KernelPattern] = (), *, name: str | pl.Expr = "name") -> pl.Expr:
    """Boolean expression: is the kernel name (column `name`) communication, by the first matching row of
    `extra` then `DEFAULT_PATTERNS` (a compute row says no)? Null names give null.

    Consecutive rows of one kind are joined by `|`, so it costs one regex search per run of rows.
    """
    column = pl.col(name) if isinstance(name, str) else name
    runs: list[tuple[bool, list[str]]] = []
    for pattern in (*extra, *DEFAULT_PATTERNS):
        if runs and runs[-1][0] == pattern.is_comm:
            runs[-1][1].append(f"(?:{pattern.bare_regex})")
        else:
            runs.append((pattern.is_comm, [f"(?:{pattern.bare_regex})"]))
    verdict: pl.Expr = pl.lit(False)
    for is_comm, regexes in reversed(runs):
        verdict = pl.when(column.str.contains("|".join(regexes))).then(pl.lit(is_comm)).otherwise(verdict)
    result = pl.when(column.is_null()).then(pl.lit(None, dtype=pl.Boolean)).otherwise(verdict)
    output_name = column.meta.output_name(raise_if_undetermined=False)
    return result.alias(output_name) if output_name is not None else result
