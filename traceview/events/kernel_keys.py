"""Kernel keys: a kernel name with what varies between runs of the same work folded (docs/metrics.md, "Kernels
and operators"), so one kernel pairs across ranks and across nights (`compare`, `trend`, the slow rank's
kernels).

From the name Kineto writes, in order:

- the return type, `(anonymous namespace)::`, the argument list and the template arguments go
  (`void at::native::reduce_kernel<512, 1, ...>(...)` -> `at::native::reduce_kernel`);
- a PyTorch launcher that runs many operations (`vectorized_elementwise_kernel`, `reduce_kernel`,
  `multi_tensor_apply_kernel`, `index_elementwise_kernel`, ...) keeps, in brackets, what its template
  arguments say it runs (`DETAIL_RULES`: the function taking the TensorIterator, else the functor or reduction
  ops): `at::native::vectorized_elementwise_kernel[CUDAFunctor_add]`, `at::native::reduce_kernel[MeanOps]`;
- generated suffixes fold: Inductor's kernel counter (`triton_poi_fused_add_cos_sin_0` -> `..._sin`) and the
  signature of old Triton names (`triton__0d1d2d3d` -> `triton_`);
- autotuning variants fold: tile shapes (`128x64`, `256x128x64`) and numbered tokens between underscores
  become `#` (`volta_sgemm_128x64_nn` and `volta_sgemm_64x64_nn` are both `volta_sgemm_#_nn`), and so do the
  numbers after `align`, `stage`, `knob`, `ldg`.

A memory operation's name is its key. Digits inside a word stay (`sm90`, `bf16`, `s1688gemm`): they name the
architecture, the dtype or the instruction.
"""

from __future__ import annotations

import polars as pl

LAUNCHERS = (
    r"(?:vectorized_|unrolled_)?elementwise_kernel(?:_with_index)?|reduce_kernel|multi_tensor_apply_kernel"
    r"|index_elementwise_kernel|_scatter_gather_elementwise_kernel"
)
"""PyTorch kernels whose name alone does not say which operation they run."""

DETAIL_RULES: tuple[str, ...] = (
    r"(\w+)(?:<[^<>]*>)?\(at::Tensor",  # the op's kernel function, whose lambda is the kernel body
    r"(index_\w+_impl|\w+Ops|\w+_functor)<",  # index kernels, reduction ops
    r"(\w+Functor\w*)(?:<|,|\s*>)",  # the functor (`AUnaryFunctor<float, ..., MulFunctor<float> >`: the last)
    r"::(Reduce[A-Z]\w*|TensorAssign)>",  # scatter/gather's reduction
)
"""How the operation a launcher runs is read from its template arguments: the first rule that matches; within
a rule the last identifier found (the innermost functor)."""

WRAPPERS = r"(?:^|[\s:])(?:Kernel2?|device_kernel)<"
"""Kernels named after a template that wraps the real one
(`cutlass::Kernel<cutlass_80_tensorop_s1688gemm_...>`): the wrapped kernel's name, folded, is the detail."""
WRAPPED = r"<\s*(?:[\w:]*::)?(?:enable_\w+<\s*(?:[\w:]*::)?)?([A-Za-z_]\w*)"

MAX_KEY_CHARS = 200
_NESTING = 12
"""Template argument lists are removed from the innermost out, this many levels deep."""


def _without_templates(name: pl.Expr) -> pl.Expr:
    for _ in range(_NESTING):
        name = name.str.replace_all(r"<[^<>]*>", "")
    return name


def _base(name: pl.Expr) -> pl.Expr:
    """The function's name: no return type, template arguments or argument list."""
    plain = _without_templates(name.str.replace_all(r"\(anonymous namespace\)::", "")).str.replace(
        r"\(.*$", ""
    )
    return plain.str.strip_chars().str.extract(r"(\S+)$", 1).fill_null(plain)


def _detail(name: pl.Expr) -> pl.Expr:
    """What a launcher runs (`DETAIL_RULES`) or a wrapper wraps (`WRAPPED`), null for any other kernel."""
    found = [name.str.extract_all(rule).list.last().str.extract(rule, 1) for rule in DETAIL_RULES]
    is_launcher = name.str.contains(rf"(?:^|\W)(?:{LAUNCHERS})<")
    wrapped = _folded(name.str.extract(WRAPPED, 1))
    return pl.when(is_launcher).then(pl.coalesce(found)).when(name.str.contains(WRAPPERS)).then(wrapped)


def _folded(base: pl.Expr) -> pl.Expr:
    """Generated suffixes and autotuning variants folded (module docstring)."""
    return (
        base.str.replace(r"^(triton_[a-z]+_\w+?)_\d+$", "${1}")
        .str.replace(r"^(triton_)_?(?:\d+d)*\d*$", "${1}")
        .str.replace_all(r"\d+(?:x\d+)+", "#")
        .str.replace_all(r"(align|stage|knob_?|ldg|_v)\d+", "${1}#")
        .str.replace_all(r"_\d+_", "_#_")
        .str.replace_all(r"_\d+_", "_#_")
        .str.replace(r"_\d+$", "_#")
    )


MEMORY_NAME = r"^(?:Memcpy|Memset) "
"""Memory operations (`Memcpy DtoD (Device -> Device)`): their name is their key."""


def kernel_key_expr(name: pl.Expr) -> pl.Expr:
    """The key of each kernel name (module docstring)."""
    base = _folded(_base(name))
    detail = _detail(name)
    keyed = pl.when(detail.is_not_null()).then(pl.format("{}[{}]", base, detail)).otherwise(base)
    return pl.when(name.str.contains(MEMORY_NAME)).then(name).otherwise(keyed).str.slice(0, MAX_KEY_CHARS)


KEY = kernel_key_expr(pl.col("name")).alias("key")
"""The key of column `name`, as column `key` (built once: the expression is long)."""


_KEYS: dict[str | None, str | None] = {}
KEYS_CACHE = 65_536
"""Distinct kernel names whose key a process keeps; past it the cache starts afresh."""


def keys_of(names: list[str | None]) -> list[str | None]:
    """The key of each name, each distinct name keyed once per process (those not yet seen, by one query):
    the ranks of a job share their kernel names."""
    missing = [name for name in dict.fromkeys(names) if name not in _KEYS]
    if len(_KEYS) + len(missing) > KEYS_CACHE:
        _KEYS.clear()
        missing = list(dict.fromkeys(names))
    if missing:
        keys = pl.LazyFrame({"name": missing}, schema={"name": pl.Utf8}).select(KEY).collect()
        _KEYS.update(zip(missing, keys.to_series().to_list(), strict=True))
    return [_KEYS[name] for name in names]


def kernel_keys(names: pl.Series) -> pl.DataFrame:
    """One row per distinct non-null name: `name`, `key`."""
    distinct = names.cast(pl.Utf8).to_frame("name").lazy().drop_nulls().unique()
    return distinct.with_columns(KEY).collect()
