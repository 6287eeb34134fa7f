"""Communication-kernel names decoded into (collective, algorithm, protocol, reduction op, dtype) (SPEC 2, 3).

One table, `DEFAULT_PATTERNS`, holds a regular expression per naming generation; named groups `collective`,
`algorithm`, `protocol`, `reduce_op` and `dtype` capture the fields a name carries (any may be absent). The
first matching row wins, user rows (`user_patterns`, the `--comm-pattern` option) before the defaults. A
name that only the catch-all rows match (`nccl*Kernel*`, `rccl*`, `msccl*Kernel*`) is still communication,
with null fields: an unknown communication kernel is never dropped nor counted as compute. Field values are
normalised by `traceview.vocab` (`Ring` -> `RING`, `sum` -> `Sum`, `f32`/`float` -> `float32`); a value
outside its table is null.

Generations, as the kernels are named in Kineto traces:

- NCCL <= 2.7: `ncclAllReduceRingLLKernel_sum_f32(ncclColl)`, `ncclBroadcastRingLLKernel_copy_i8`,
  `ncclSendRecvKernel_copy_i8` (`copy` is no reduction: null).
- NCCL 2.8-2.18 (and RCCL of that era): `ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)`,
  `ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)`, the bare
  `ncclKernel_AllReduce`.
- NCCL >= 2.19: `ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)`, `ncclDevKernel_AllGather_RING_LL(...)`,
  `ncclDevKernel_SendRecv(...)`; `ncclDevKernel_Generic` (no fields); RCCL: `ncclDevKernel_Generic_4`.
- NCCL >= 2.27 symmetric-memory kernels: `ncclSymDevKernel_AllReduce_AGxLL_R_sum_bf16`,
  `ncclSymkDevKernel_*` (their algorithms, e.g. `AGxLL_R`, are outside the NCCL algorithm list: null).
- MSCCL (RCCL, msccl): `mscclKernel_Sum_float_LL128_false(...)` (op, dtype, protocol; collective unknown).

Caution: since NCCL 2.2 one kernel launch may run several operations, and from 2.8 on only some (algorithm,
protocol) pairs get a kernel of their own (e.g. every AllGather kernel is named `RING_LL`). The algorithm and
protocol of a name are the kernel's specialisation, a hint about the first operation, not proof of what ran;
the NCCL_DEBUG log (TUNING) says what was chosen.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from traceview.errors import UsageError
from traceview.vocab import (
    canonical_algorithm_expr,
    canonical_collective_expr,
    canonical_dtype_expr,
    canonical_protocol_expr,
    canonical_reduce_op_expr,
)

FIELDS: tuple[str, ...] = ("collective", "algorithm", "protocol", "reduce_op", "dtype")
"""Named groups a pattern may capture."""

_OUTPUT_COLUMNS: Mapping[str, tuple[str, Callable[[pl.Expr], pl.Expr]]] = {
    "kernel_collective": ("collective", canonical_collective_expr),
    "algorithm": ("algorithm", canonical_algorithm_expr),
    "protocol": ("protocol", canonical_protocol_expr),
    "reduce_op": ("reduce_op", canonical_reduce_op_expr),
    "kernel_dtype": ("dtype", canonical_dtype_expr),
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
_USER_SPEC = re.compile(r"^([A-Za-z][A-Za-z0-9_.+-]*)=(.*)$", re.DOTALL)


@dataclass(frozen=True)
class KernelPattern:
    """One row of the kernel-name grammar: a regex (Rust/polars syntax) and the library it marks.

    `regex` is searched in the kernel name (anchor it with `^` to match from the start); its named groups,
    any of `FIELDS`, capture the fields the name carries.
    """

    library: str
    generation: str
    regex: str

    @property
    def groups(self) -> tuple[str, ...]:
        """Named groups of `regex`, in order."""
        return tuple(_GROUP_NAME.findall(self.regex))

    @property
    def bare_regex(self) -> str:
        """`regex` with its named groups made non-capturing, so several patterns can be joined by `|`."""
        return _GROUP_NAME.sub("(?:", self.regex)


_START = r"^(?:void\s+)?"
_END = r"(?:\(|$)"  # the argument list, or the end of a name written without one
_ALGOS = "NVLS_TREE|NVLS|RING|TREE|COLLNET_DIRECT|COLLNET_CHAIN|COLLNET|PAT"
_PROTOS = "LL128|LL|SIMPLE"

DEFAULT_PATTERNS: tuple[KernelPattern, ...] = (
    KernelPattern("nccl", "NCCL >= 2.19 generic", _START + r"ncclDevKernel_Generic" + _END),
    KernelPattern("rccl", "RCCL generic (unroll)", _START + r"ncclDevKernel_Generic_[0-9]+" + _END),
    KernelPattern(
        "nccl",
        "NCCL >= 2.19",
        _START + r"ncclDevKernel_(?P<collective>[A-Za-z]+)"
        r"(?:_(?P<reduce_op>[A-Za-z]+)_(?P<dtype>[a-z][a-z0-9]*))?"
        rf"(?:_(?P<algorithm>{_ALGOS})_(?P<protocol>{_PROTOS}))?" + _END,
    ),
    KernelPattern(
        "nccl",
        "NCCL >= 2.27 symmetric",
        _START + r"ncclSymk?DevKernel_(?P<collective>[A-Za-z]+)(?:_[A-Za-z0-9]+)*?"
        r"(?:_(?P<reduce_op>sum|prod|minmax|min|max|avg|premulsum|sumpostdiv)_(?P<dtype>[a-z][a-z0-9]*))?"
        + _END,
    ),
    KernelPattern(
        "nccl",
        "NCCL 2.8-2.18",
        _START + r"ncclKernel_(?P<collective>[A-Za-z]+)"
        rf"(?:_(?P<algorithm>{_ALGOS}))?(?:_(?P<protocol>{_PROTOS}))?"
        r"(?:_(?P<reduce_op>[A-Za-z]+)_(?P<dtype>\w+))?" + _END,
    ),
    KernelPattern(
        "nccl",
        "NCCL <= 2.7",
        _START + r"nccl(?P<collective>AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|SendRecv|AllToAll)"
        r"(?P<algorithm>Ring|Tree|CollNet)?(?P<protocol>LL128|LL)?"
        r"Kernel_(?P<reduce_op>[a-z]+)_(?P<dtype>[a-z][a-z0-9]*)" + _END,
    ),
    KernelPattern(
        "msccl",
        "MSCCL",
        _START + r"mscclKernel_(?P<reduce_op>[A-Za-z]+)_(?P<dtype>\w+?)_(?P<protocol>LL128|LL|Simple|SIMPLE)"
        r"(?:_\w+)?" + _END,
    ),
    KernelPattern("nccl", "unrecognised NCCL", r"(?i)" + _START + r"nccl\w*kernel"),
    KernelPattern("rccl", "unrecognised RCCL", r"(?i)" + _START + r"rccl"),
    KernelPattern("msccl", "unrecognised MSCCL", r"(?i)" + _START + r"msccl\w*kernel"),
)
"""The grammar: specific generations first, catch-all rows (communication, fields unknown) last."""


def _user_pattern(spec: str) -> KernelPattern:
    """One `--comm-pattern` spec (`REGEX` or `LIBRARY=REGEX`) as a checked `KernelPattern`."""
    match = _USER_SPEC.match(spec)
    library, regex = (match[1], match[2]) if match else ("user", spec)
    if not regex:
        raise UsageError(f"--comm-pattern {spec!r}: the regular expression is empty")
    unknown = sorted(set(_GROUP_NAME.findall(regex)) - set(FIELDS))
    if unknown:
        raise UsageError(
            f"--comm-pattern {spec!r}: unknown group(s) {', '.join(unknown)}; allowed: {', '.join(FIELDS)}"
        )
    try:
        pl.Series([""], dtype=pl.Utf8).str.contains(regex)
    except pl.exceptions.PolarsError as error:
        first_line = next((line for line in str(error).splitlines() if line.strip()), "")
        raise UsageError(f"--comm-pattern {spec!r}: not a valid regular expression ({first_line})") from error
    return KernelPattern(library=library, generation="user", regex=regex)


def user_patterns(specs: Sequence[str]) -> tuple[KernelPattern, ...]:
    """Patterns for other communication libraries, from specs `REGEX` or `LIBRARY=REGEX` (library `user`).

    The regex (Rust/polars syntax, searched anywhere in the name: anchor with `^`) may name groups among
    `FIELDS`. Raises `UsageError` for an empty or invalid regex or an unknown group name.
    """
    return tuple(_user_pattern(spec) for spec in specs)


def _decode_matched(frame: pl.DataFrame, pattern: KernelPattern | None) -> pl.DataFrame:
    """Decoded columns for names that `pattern` matched (None: names no pattern matched)."""
    groups = pattern.groups if pattern is not None else ()
    extracted = pl.col("name").str.extract_groups(pattern.regex) if pattern is not None and groups else None

    def field(group: str) -> pl.Expr:
        if extracted is None or group not in groups:
            return pl.lit(None, dtype=pl.Utf8)
        return extracted.struct.field(group)

    return frame.select(
        pl.col("name"),
        pl.lit(pattern is not None, dtype=pl.Boolean).alias("is_comm"),
        pl.lit(pattern.library if pattern is not None else None, dtype=pl.Utf8).alias("comm_library"),
        *(normalise(field(group)).alias(column) for column, (group, normalise) in _OUTPUT_COLUMNS.items()),
    )


def decode_kernel_names(names: pl.Series, extra: Sequence[KernelPattern] = ()) -> pl.DataFrame:
    """One row per distinct non-null kernel name (first-seen order), with columns `DECODED_SCHEMA`.

    `is_comm` says whether any pattern (`extra` first, then `DEFAULT_PATTERNS`) matches; the first match
    gives `comm_library` and the normalised fields, null where the name does not carry them. Vectorised: one
    pass per pattern over the distinct names.
    """
    distinct = names.cast(pl.Utf8).rename("name").drop_nulls().unique(maintain_order=True).to_frame()
    remaining = distinct
    parts: list[pl.DataFrame] = []
    for pattern in (*extra, *DEFAULT_PATTERNS):
        matched = remaining.select(pl.col("name").str.contains(pattern.regex)).to_series()
        parts.append(_decode_matched(remaining.filter(matched), pattern))
        remaining = remaining.filter(~matched)
    parts.append(_decode_matched(remaining, None))
    decoded = pl.concat(parts, how="vertical")
    return distinct.join(decoded, on="name", how="left", maintain_order="left").select(
        [pl.col(column).cast(dtype) for column, dtype in DECODED_SCHEMA.items()]
    )


def with_kernel_fields(
    frame: pl.DataFrame, extra: Sequence[KernelPattern] = (), name: str = "name"
) -> pl.DataFrame:
    """`frame` with the decoded columns of its `name` column joined on (row order kept).

    Decodes each distinct name once, so it costs one `unique` and one join however many rows share a name.
    """
    decoded = decode_kernel_names(frame.get_column(name), extra).rename({"name": name})
    return frame.join(decoded, on=name, how="left", maintain_order="left")


def is_comm_kernel_expr(extra: Sequence[KernelPattern] = (), *, name: str | pl.Expr = "name") -> pl.Expr:
    """Boolean expression: does the kernel name (column `name`) match any communication pattern?

    One regex search per row (all patterns joined); null names give null.
    """
    column = pl.col(name) if isinstance(name, str) else name
    joined = "|".join(f"(?:{pattern.bare_regex})" for pattern in (*extra, *DEFAULT_PATTERNS))
    return column.str.contains(joined)
