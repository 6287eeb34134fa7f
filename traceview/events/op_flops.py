"""FLOPs of host operators from the shapes the profiler recorded (`record_shapes=True`), for traces without
the profiler's own `flops` args (docs/metrics.md, "Predicted gamma", FLOPs from shapes).

`op_flops(ops)` gives every operator of `OP_FLOPS_RULES` its FLOPs from its `Input Dims` (and, for a
convolution, the stride, padding, dilation and groups of its `Concrete Inputs`), by the standard formulas
(2 FLOPs per multiply-add):

| operator | inputs | FLOPs |
|---|---|---|
| `aten::mm` | A [M, K], B [K, N] | 2 M K N |
| `aten::addmm` | bias, A [M, K], B [K, N] | 2 M K N |
| `aten::bmm` | A [b, M, K], B [b, K, N] | 2 b M K N |
| `aten::baddbmm` | bias, A [b, M, K], B [b, K, N] | 2 b M K N |
| `aten::convolution` | x [N, C, *in], w [C_out, C/g, *k] | 2 N prod(out) numel(w) (transposed: in for out) |
| `aten::convolution_backward` | grad [N, C_out, *out], x, w | 2 N prod(out) numel(w) per gradient [1] |
| `aten::cudnn_convolution_backward` [2] | x, grad, w | the same |
| `aten::_scaled_dot_product_*_attention` [3] | q [B,H,L,d], k [B,H,S,d], v [B,H,S,d_v] | 2 B H L S (d+d_v) |
| the same `..._backward` | grad, q, k, v, ... | 2.5 x the forward's (five matrix products against two) |

[1] each gradient its output mask computes (input's, weight's; both when no mask is recorded).
[2] PyTorch < 1.11; counted only where the trace has no `convolution_backward`.
[3] `flash`, `efficient` and `cudnn`.

Only leaf operators are counted, and of counted operators nested on one thread the outermost, so nothing is
counted twice: `aten::linear` and `aten::matmul` run as
`mm`/`addmm`/`bmm` (counted there), `aten::conv2d` as `aten::convolution`, the math attention as `bmm`, and
the backward passes' matrix products as `mm`. A convolution's output size comes from its stride, padding and
dilation (`Concrete Inputs`, PyTorch 2.x); without them, from a `convolution_backward` of the same input and
weight shapes (its gradient has the output's shape); else it is unknown (null FLOPs) and counted in
`unsized`. The formulas ignore causal masking (an upper bound for causal attention) and element-wise work.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import polars as pl

from traceview.core.records import record

SHAPE_FLOPS_MARK = "traceview::shape_flops"
"""Name of the synthetic host row that carries one step's FLOPs from shapes in a compact trace
(`traceview.map.rank_summary`)."""
CONV_FLOPS_MARK = "traceview::conv_flops"
"""The same for the convolutions' share of them (a convolutional net: 6 P b undercounts it)."""
DIMS_LIST = r"^\[\s*(?:\[[-0-9,\s]*\]\s*,?\s*)*\]$"
"""`Input Dims` that is a plain list of shapes (a scalar argument: `[]`); nested lists (tensor lists) are not.
"""

Dims = pl.Expr
Formula = Callable[[pl.Expr, pl.Expr], pl.Expr]


def _dim(shape: pl.Expr, index: int) -> pl.Expr:
    return shape.list.get(index, null_on_oob=True).cast(pl.Float64)


def _numel(shape: pl.Expr) -> pl.Expr:
    return shape.list.eval(pl.element().cast(pl.Float64).product()).list.first()


def _arg(dims: pl.Expr, index: int) -> pl.Expr:
    return dims.list.get(index, null_on_oob=True)


def _matmul(first: int) -> Formula:
    """2 M K N (with a batch dimension: 2 b M K N) of the operands at `first`, `first` + 1."""

    def formula(dims: pl.Expr, _: pl.Expr) -> pl.Expr:
        a, b = _arg(dims, first), _arg(dims, first + 1)
        batch = pl.when(a.list.len() == 3).then(_dim(a, 0)).otherwise(pl.lit(1.0))
        rows, inner = _dim(a, -2), _dim(a, -1)
        return 2.0 * batch * rows * inner * _dim(b, -1)

    return formula


def _spatial_out(dims: pl.Expr, concrete: pl.Expr) -> pl.Expr:
    """prod(output spatial size) of a convolution from its input, weight and `Concrete Inputs` (stride 3,
    padding 4, dilation 5, transposed 6, output padding 7); null without them."""
    x, w = _arg(dims, 0), _arg(dims, 1)
    spatial = x.list.len() - 2

    def ints(index: int) -> pl.Expr:
        return concrete.list.get(index, null_on_oob=True).str.extract_all(r"-?\d+").cast(pl.List(pl.Float64))

    def pick(values: pl.Expr, axis: int) -> pl.Expr:  # one value may stand for every axis ("[1]" or "1")
        return (
            pl.when(values.list.len() == 1)
            .then(values.list.first())
            .otherwise(values.list.get(axis, null_on_oob=True))
        )

    sizes = []
    for axis in range(3):  # conv1d, 2d, 3d
        size = _dim(x, 2 + axis)
        kernel = _dim(w, 2 + axis)
        stride, padding, dilation = (pick(ints(index), axis) for index in (3, 4, 5))
        out = ((size + 2 * padding - dilation * (kernel - 1) - 1) / stride).floor() + 1
        sizes.append(pl.when(spatial > axis).then(out).otherwise(pl.lit(1.0)))
    transposed = concrete.list.get(6, null_on_oob=True).str.to_lowercase() == "true"
    direct = sizes[0] * sizes[1] * sizes[2]
    return pl.when(transposed).then(_numel(x.list.slice(2))).otherwise(direct)


def _convolution(dims: pl.Expr, concrete: pl.Expr) -> pl.Expr:
    """2 N prod(out) numel(w); `_out_spatial` (from the backward) where the concrete inputs do not say."""
    out = pl.coalesce(_spatial_out(dims, concrete), pl.col("_out_spatial"))
    return 2.0 * _dim(_arg(dims, 0), 0) * out * _numel(_arg(dims, 1))


CONV_BACKWARD_ARGS = {"aten::convolution_backward": (0, 1, 2), "aten::cudnn_convolution_backward": (1, 0, 2)}
"""A convolution's backward: (gradient, input, weight) argument indices; PyTorch before 1.11 recorded the
cuDNN op (input first), later ones `aten::convolution_backward` (gradient first)."""


OUTPUT_MASK_AT = 10
"""`Concrete Inputs` index of `convolution_backward`'s output mask: which of (input, weight, bias) gradients
it computes; the first convolution of a net computes no input gradient."""


def _gradients(concrete: pl.Expr) -> pl.Expr:
    """How many of the input's and the weight's gradients a convolution's backward computes: the `True`s among
    the first two entries of its output mask; 2 when the mask is not recorded."""
    mask = concrete.list.get(OUTPUT_MASK_AT, null_on_oob=True).str.extract_all(r"(?i)true|false").list.head(2)
    counted = mask.list.eval(pl.element().str.to_lowercase() == "true").list.sum().cast(pl.Float64)
    return pl.when(mask.list.len() == 2).then(counted).otherwise(pl.lit(2.0))


def _convolution_backward(grad_at: int, weight_at: int) -> Formula:
    def formula(dims: pl.Expr, concrete: pl.Expr) -> pl.Expr:
        grad = _arg(dims, grad_at)
        forward = 2.0 * _dim(grad, 0) * _numel(grad.list.slice(2)) * _numel(_arg(dims, weight_at))
        return _gradients(concrete) * forward

    return formula


def _attention(first: int) -> Formula:
    """2 B H L S (d + d_v) of q, k, v at `first`, `first` + 1, `first` + 2 (layout [B, H, L, d])."""

    def formula(dims: pl.Expr, _: pl.Expr) -> pl.Expr:
        q, k, v = _arg(dims, first), _arg(dims, first + 1), _arg(dims, first + 2)
        heads = _dim(q, 0) * _dim(q, 1) * _dim(q, 2) * _dim(k, 2)
        return 2.0 * heads * (_dim(q, 3) + _dim(v, 3))

    return formula


@record
class OpFlops:
    """A row of the table: operators whose name matches `regex` have `formula(dims, concrete) x factor` FLOPs;
    `family` says what they are (matmul, convolution, attention)."""

    regex: str
    formula: Formula
    factor: float = 1.0
    family: str = "matmul"
    backward_shapes: bool = False  # the formula reads `_out_spatial` (from a backward of the same shapes)


_SDPA = r"^aten::_scaled_dot_product_(?:flash|efficient|cudnn)_attention"
OP_FLOPS_RULES: tuple[OpFlops, ...] = (
    OpFlops(r"^aten::mm$", _matmul(0)),
    OpFlops(r"^aten::addmm$", _matmul(1)),
    OpFlops(r"^aten::bmm$", _matmul(0)),
    OpFlops(r"^aten::baddbmm$", _matmul(1)),
    OpFlops(r"^aten::convolution$", _convolution, family="convolution", backward_shapes=True),
    OpFlops(r"^aten::convolution_backward$", _convolution_backward(0, 2), family="convolution"),
    OpFlops(r"^aten::cudnn_convolution_backward$", _convolution_backward(1, 2), family="convolution"),
    OpFlops(_SDPA + r"$", _attention(0), family="attention"),
    OpFlops(_SDPA + r"_backward$", _attention(1), 2.5, family="attention"),
)
"""The operators counted (module docstring): leaves only, first matching row wins."""


def _outermost(ops: pl.LazyFrame, thread: list[str]) -> pl.LazyFrame:
    """The counted operators that no other counted operator on their thread (columns `thread`) contains
    (PyTorch 1.8 records some operators twice, one inside the other)."""
    ordered = ops.sort([*thread, "start_us", "end_us"], descending=[False] * len(thread) + [False, True])
    reach = pl.col("end_us").cum_max().shift(1)
    reach = reach.over(thread) if thread else reach
    return ordered.filter(reach.is_null() | (pl.col("start_us") >= reach))


def _shape_key(shape: pl.Expr) -> pl.Expr:
    """A shape as text (`"8,3,32,32"`), to join shapes on."""
    return shape.list.eval(pl.element().cast(pl.Utf8)).list.join(",")


def _conv_outputs(ops: pl.LazyFrame, keys: list[str]) -> pl.LazyFrame:
    """Per (input shape, weight shape) of a convolution (`keys`: with the `rank` of a batch of ranks), the
    output's spatial size its backward shows."""
    frames = [
        ops.filter(pl.col("name") == name).select(
            *keys[:-2],
            _shape_key(pl.col("_dims").list.get(x, null_on_oob=True)).alias("_x"),
            _shape_key(pl.col("_dims").list.get(w, null_on_oob=True)).alias("_w"),
            _numel(pl.col("_dims").list.get(grad, null_on_oob=True).list.slice(2)).alias("_out_spatial"),
        )
        for name, (grad, x, w) in CONV_BACKWARD_ARGS.items()
    ]
    return pl.concat(frames).drop_nulls().unique(keys, keep="first")


_RULE_OF = pl.coalesce(
    [
        pl.when(pl.col("name").str.contains(rule.regex)).then(pl.lit(i))
        for i, rule in enumerate(OP_FLOPS_RULES)
    ]
)
_ANY_RULE = pl.col("name").str.contains("|".join(f"(?:{rule.regex})" for rule in OP_FLOPS_RULES))
_SHAPED = pl.col("input_dims").str.contains(DIMS_LIST).fill_null(False)
_NESTED_CUDNN = (pl.col("name") == "aten::convolution_backward").any() & (
    pl.col("name") == "aten::cudnn_convolution_backward"
)  # `aten::convolution_backward` runs the cuDNN op inside
_RULE_FLOPS = [
    pl.when(pl.col("_rule") == i).then(rule.formula(pl.col("_dims"), pl.col("_concrete")) * rule.factor)
    for i, rule in enumerate(OP_FLOPS_RULES)
]
_FAMILY = pl.col("_rule").replace_strict(
    {i: rule.family for i, rule in enumerate(OP_FLOPS_RULES)}, return_dtype=pl.Utf8
)
_NO_FLOPS = pl.lit(None, pl.Float64).alias("shape_flops"), pl.lit(None, pl.Utf8).alias("flops_family")
_DIMS = pl.col("input_dims").str.json_decode(pl.List(pl.List(pl.Int64))).alias("_dims")
_SHAPE_KEYS = (
    _shape_key(pl.col("_dims").list.get(0, null_on_oob=True)).alias("_x"),
    _shape_key(pl.col("_dims").list.get(1, null_on_oob=True)).alias("_w"),
)
_RANKED = ("rank", "pid", "tid")
"""The columns that set an operator's thread (with its rank's, in a batch of ranks)."""
_HELPERS = ["_rule", "_dims", "_concrete", "_x", "_w", "_out_spatial"]


def _decoded_concrete(concrete: pl.Expr) -> pl.Expr:
    return (
        pl.when(concrete.str.starts_with("["))
        .then(concrete.str.json_decode(pl.List(pl.Utf8)))
        .alias("_concrete")
    )


_CONCRETE = {
    True: _decoded_concrete(pl.col("concrete_inputs")),
    False: _decoded_concrete(pl.lit(None, pl.Utf8)),
}
"""The decoded `Concrete Inputs`, by whether the operators record them."""


def counted_ops(ops: pl.LazyFrame, columns: Sequence[str]) -> pl.LazyFrame:
    """The operators of `ops` (with `columns`) that a rule counts, of nested ones the outermost, with `_rule`
    (the index of the first matching rule): the first query of `op_flops`, for a caller to collect with
    others."""
    found = ops.filter(_ANY_RULE & _SHAPED).with_columns(_RULE_OF.alias("_rule"))  # one pass over every op
    return _outermost(found.filter(~_NESTED_CUDNN), [c for c in _RANKED if c in columns])


def counted_families(found: pl.DataFrame) -> set[str]:
    """The families (`OpFlops.family`) of the operators `found` (`counted_ops`, collected) holds."""
    return {OP_FLOPS_RULES[i].family for i in found.get_column("_rule").unique().to_list()}


def with_flops(found: pl.DataFrame) -> pl.LazyFrame:
    """`found` (`counted_ops`, collected) with `shape_flops` and `flops_family`: the second query of
    `op_flops`; only the rules that `found` holds are evaluated (a formula is costly, even on no rows)."""
    held = set(found.get_column("_rule").unique().to_list())
    if not held:
        return found.lazy().drop("_rule").with_columns(_NO_FLOPS)
    decoded = found.lazy().with_columns(_DIMS, _CONCRETE["concrete_inputs" in found.columns])
    if any(OP_FLOPS_RULES[i].backward_shapes for i in held):
        keys = [*_RANKED[: 1 if "rank" in found.columns else 0], "_x", "_w"]  # a batch's ranks apart
        decoded = decoded.with_columns(*_SHAPE_KEYS).join(
            _conv_outputs(decoded, keys), on=keys, how="left", maintain_order="left"
        )
    flops = pl.coalesce([_RULE_FLOPS[i] for i in sorted(held)])
    return decoded.with_columns(flops.alias("shape_flops"), _FAMILY.alias("flops_family")).drop(
        _HELPERS, strict=False
    )


def op_flops(ops: pl.DataFrame) -> pl.DataFrame:
    """The operators of `OP_FLOPS_RULES` among `ops` (host rows with `name`, `input_dims` and, when recorded,
    `concrete_inputs`), each with `shape_flops` (null when a shape it needs is unknown) and `flops_family`;
    other rows dropped. Every column of `ops` is kept. Two queries: the operators counted, then their FLOPs.
    """
    return with_flops(counted_ops(ops.lazy(), ops.columns).collect()).collect()
