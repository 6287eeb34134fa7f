"""FLOPs and bytes of an operator from its recorded shapes (docs/metrics.md, "Kernels and operators",
"Achieved FLOP/s"): the one place the FLOPs of an operator are computed, for the achieved FLOP/s of the
kernels analysis and for the prediction's FLOPs per step.

PyTorch's profiler records, with `record_shapes=True`, each operator's `Input Dims` (one list per argument,
`[]` for a non-tensor) and `Input type` (`float`, `c10::BFloat16`, `Scalar`, `TensorList`, ...), and with
`with_flops=True` its own `flops` for a few operators. `SHAPE_RULES` is a table: an operator name, its class
(`gemm`, `attention`, `convolution`, `elementwise`) and the formula that reads its arguments:

- `mm` (`aten::mm`, `aten::_scaled_mm`): A [M, K] x B [K, N]: 2 M N K FLOPs; bytes (M K + K N + M N) x the
  element size;
- `addmm`: bias, A [M, K], B [K, N]: 2 M N K, bytes of A, B, the bias and C [M, N];
- `bmm` / `baddbmm`: [b, M, K] x [b, K, N]: 2 b M N K;
- `sdpa_fwd` (q [b, h, s_q, d], k [b, h, s_k, d], v [b, h, s_k, d_v]; `bshd` operators take [b, s, h, d]): 2 b
  h s_q s_k (d + d_v), the two matrix products, without a causal mask (a causal mask halves it: the trace does
  not record the flag, so this is the upper bound); bytes of q, k, v and the output [b, h, s_q, d_v];
- `sdpa_bwd` (the gradient, then q, k, v): 2 b h s_q s_k (3 d + 2 d_v), the five products of a FlashAttention
  backward (the recomputed q k^T, dv, dp, dq, dk); bytes of q, k, v, out, dout, dq, dk, dv;
- `conv_bwd` (`aten::convolution_backward`: grad_out [N, O, Ho, Wo, ...], input [N, C, ...], weight [O, C / g,
  kh, kw, ...]): the input and the weight gradients, each 2 N O (Ho Wo ...) (C / g) (kh kw ...); a forward
  convolution's output size depends on its stride and padding, which the trace does not record: its FLOPs come
  from the profiler's `flops` only;
- `conv_bwd_input` / `conv_bwd_weight` (older PyTorch: `cudnn_convolution_backward_input(size, grad_out,
  weight)`, `..._weight(size, grad_out, input)`): one of the two;
- `elementwise` (`aten::add`, `mul`, `gelu`, ...): one FLOP per output element (the largest input's element
  count), bytes of every tensor read and the output written; `copy` (`copy_`, `fill_`, `cat`, ...): no FLOPs,
  bytes read and written.

The profiler's `flops`, when recorded, is used in place of the shapes' (`flops_source`). Bytes are given only
where every tensor argument's dtype is known (`TYPE_BYTES`); otherwise null. Each distinct (operator, dims,
types) is computed once.

Nested operators repeat their children's work (`aten::linear` holds `aten::addmm`, SDPA holds its backend's
operator): a total sums the operators that launched the kernels (`traceview.kernels.operators` links each
kernel to the innermost one), never every operator.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import msgspec
import polars as pl

from traceview.core.records import record

TYPE_BYTES: Mapping[str, int] = {
    "double": 8,
    "float": 4,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1,
    "long int": 8,
    "int": 4,
    "short int": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "c10::complex<float>": 8,
    "c10::complex<double>": 16,
}
"""Bytes per element of each tensor dtype as Kineto's `Input type` spells it."""
TYPE_NAMES: Mapping[str, str] = {
    "double": "fp64",
    "float": "fp32",
    "c10::Half": "fp16",
    "c10::BFloat16": "bf16",
    "c10::Float8_e4m3fn": "fp8",
    "c10::Float8_e5m2": "fp8",
    "c10::Float8_e4m3fnuz": "fp8",
    "c10::Float8_e5m2fnuz": "fp8",
    "long int": "int64",
    "int": "int32",
    "short int": "int16",
    "signed char": "int8",
    "unsigned char": "uint8",
    "bool": "bool",
}
"""The hardware table's name (`traceview.core.hardware.DTYPES`) of each floating dtype."""

Shape = Sequence[int]
Cost = tuple[float, float | None]
"""(FLOPs, bytes or None)."""


@record
class Args:
    """An operator's tensor arguments: the shape and the dtype of each (`()`, None for a non-tensor)."""

    dims: Sequence[Shape]
    types: Sequence[str | None]

    def shape(self, index: int) -> Shape:
        """The shape of argument `index` (`()` when absent or not a tensor)."""
        return self.dims[index] if index < len(self.dims) else ()

    def size(self, index: int) -> int | None:
        """Bytes per element of argument `index`, None when its dtype is not a known tensor dtype."""
        dtype = self.types[index] if index < len(self.types) else None
        return TYPE_BYTES.get(dtype) if dtype else None

    def tensor_bytes(self, index: int) -> float | None:
        """Bytes of tensor argument `index`; None when its dtype is unknown."""
        size = self.size(index)
        return None if size is None else math.prod(self.shape(index)) * size


def _sum_bytes(parts: Sequence[float | None]) -> float | None:
    return None if any(part is None for part in parts) else sum(p for p in parts if p is not None)


def _mm(args: Args, a: int = 0, b: int = 1, extra: int | None = None) -> Cost | None:
    shape_a, shape_b = args.shape(a), args.shape(b)
    if len(shape_a) != 2 or len(shape_b) != 2 or shape_a[1] != shape_b[0]:
        return None
    (m, k), n = shape_a, shape_b[1]
    size = args.size(a)
    out = None if size is None else m * n * size
    parts = [args.tensor_bytes(a), args.tensor_bytes(b), out]
    parts += [args.tensor_bytes(extra)] if extra is not None else []
    return 2.0 * m * n * k, _sum_bytes(parts)


def _bmm(args: Args, a: int = 0, b: int = 1, extra: int | None = None) -> Cost | None:
    shape_a, shape_b = args.shape(a), args.shape(b)
    if len(shape_a) != 3 or len(shape_b) != 3 or shape_a[2] != shape_b[1] or shape_a[0] != shape_b[0]:
        return None
    (batch, m, k), n = shape_a, shape_b[2]
    size = args.size(a)
    out = None if size is None else batch * m * n * size
    parts = [args.tensor_bytes(a), args.tensor_bytes(b), out]
    parts += [args.tensor_bytes(extra)] if extra is not None else []
    return 2.0 * batch * m * n * k, _sum_bytes(parts)


def _attention_dims(q: Shape, k: Shape, v: Shape, layout: str) -> tuple[int, int, int, int, int, int] | None:
    """(b, h, s_q, s_k, d, d_v) of 4-d q, k, v in `layout` (bhsd | bshd)."""
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        return None
    if layout == "bshd":
        q, k, v = (q[0], q[2], q[1], q[3]), (k[0], k[2], k[1], k[3]), (v[0], v[2], v[1], v[3])
    return q[0], q[1], q[2], k[2], q[3], v[3]


def _attention(args: Args, first: int, layout: str, backward: bool) -> Cost | None:
    """Forward: q, k, v from argument `first`; backward: the output gradient first, then q, k, v."""
    found = _attention_dims(args.shape(first), args.shape(first + 1), args.shape(first + 2), layout)
    if found is None:
        return None
    b, h, s_q, s_k, d, d_v = found
    size = args.size(first)
    out = None if size is None else b * h * s_q * d_v * size
    qkv = [args.tensor_bytes(first + i) for i in range(3)]
    if backward:  # read q, k, v, out, dout; write dq, dk, dv
        return 2.0 * b * h * s_q * s_k * (3 * d + 2 * d_v), _sum_bytes([*qkv, out, out, *qkv])
    return 2.0 * b * h * s_q * s_k * (d + d_v), _sum_bytes([*qkv, out])


def _conv_pass(grad_out: Shape, weight: Shape) -> float | None:
    """2 N O (output positions) (C / g) (kernel positions) of one convolution pass."""
    if len(grad_out) < 3 or len(weight) != len(grad_out):
        return None
    return 2.0 * math.prod(grad_out) * math.prod(weight[1:])


def _conv_backward(args: Args, grad: int, weight: int, passes: int, others: Sequence[int]) -> Cost | None:
    one = _conv_pass(args.shape(grad), args.shape(weight))
    if one is None:
        return None
    parts = [args.tensor_bytes(i) for i in (grad, weight, *others)]
    return passes * one, _sum_bytes([*parts, *parts[1:]])


def _elementwise(args: Args, flops_per_element: float, in_place: bool) -> Cost | None:
    """One output element per element of the largest tensor argument; the first tensor is the output's dtype
    (and, `in_place`, the tensor written, not read)."""
    tensors = [i for i in range(len(args.dims)) if args.shape(i)]
    if not tensors:
        return None
    elements = max(math.prod(args.shape(i)) for i in tensors)
    size = args.size(tensors[0])
    read = [args.tensor_bytes(i) for i in (tensors[1:] if in_place else tensors)]
    return flops_per_element * elements, _sum_bytes([*read, None if size is None else elements * size])


Formula = Callable[[Args], Cost | None]
FORMULAS: Mapping[str, Formula] = {
    "mm": _mm,
    "addmm": lambda a: _mm(a, 1, 2, extra=0),
    "bmm": _bmm,
    "baddbmm": lambda a: _bmm(a, 1, 2, extra=0),
    "sdpa_fwd_bhsd": lambda a: _attention(a, 0, "bhsd", backward=False),
    "sdpa_fwd_bshd": lambda a: _attention(a, 0, "bshd", backward=False),
    "sdpa_bwd_bhsd": lambda a: _attention(a, 1, "bhsd", backward=True),
    "sdpa_bwd_bshd": lambda a: _attention(a, 1, "bshd", backward=True),
    "conv_bwd": lambda a: _conv_backward(a, 0, 2, 2, (1,)),
    "conv_bwd_input": lambda a: _conv_backward(a, 1, 2, 1, ()),
    "conv_bwd_weight": lambda a: _conv_backward(a, 1, 2, 1, ()),
    "elementwise": lambda a: _elementwise(a, 1.0, in_place=False),
    "elementwise_": lambda a: _elementwise(a, 1.0, in_place=True),
    "copy": lambda a: _elementwise(a, 0.0, in_place=True),
}
"""Formula name -> the (FLOPs, bytes) of an operator's arguments (module docstring)."""


@record
class ShapeRule:
    """One operator family: its class, a regex on the operator name, the formula, and the convention's
    source."""

    op_class: str
    regex: str
    formula: str
    source: str


_SDPA = r"_scaled_dot_product_(?:flash|efficient|cudnn)_attention|_cudnn_attention"
_UNARY = (
    r"relu|gelu|silu|sigmoid|tanh|exp|log|sqrt|rsqrt|neg|abs|reciprocal|pow|sin|cos|erf|hardtanh|leaky_relu"
)
_BINARY = r"add|sub|mul|div|maximum|minimum|where|clamp|clamp_min|lerp|addcmul|addcdiv|masked_fill"

SHAPE_RULES: tuple[ShapeRule, ...] = (
    ShapeRule("gemm", r"^aten::(?:mm|_scaled_mm|matmul_out|mm\.out)$", "mm", "2MNK (A [M,K] x B [K,N])"),
    ShapeRule("gemm", r"^aten::addmm_?$", "addmm", "2MNK (bias, A [M,K], B [K,N])"),
    ShapeRule("gemm", r"^aten::bmm$", "bmm", "2bMNK"),
    ShapeRule("gemm", r"^aten::baddbmm_?$", "baddbmm", "2bMNK (bias, A, B)"),
    ShapeRule("attention", rf"^aten::(?:{_SDPA})(?:_forward)?$", "sdpa_fwd_bhsd", "2 b h s_q s_k (d + d_v)"),
    ShapeRule(
        "attention",
        r"^(?:aten::_(?:flash|efficient)_attention_forward|flash_attn::_flash_attn_forward)$",
        "sdpa_fwd_bshd",
        "2 b h s_q s_k (d + d_v), q as [b, s, h, d]",
    ),
    ShapeRule("attention", rf"^aten::(?:{_SDPA})_backward$", "sdpa_bwd_bhsd", "2 b h s_q s_k (3d + 2d_v)"),
    ShapeRule(
        "attention",
        r"^(?:aten::_(?:flash|efficient)_attention_backward|flash_attn::_flash_attn_backward)$",
        "sdpa_bwd_bshd",
        "2 b h s_q s_k (3d + 2d_v), q as [b, s, h, d]",
    ),
    ShapeRule("convolution", r"^aten::convolution_backward$", "conv_bwd", "2 x 2 N O HoWo (C/g) khkw"),
    ShapeRule(
        "convolution",
        r"^aten::(?:cudnn|miopen)_convolution_backward_input$",
        "conv_bwd_input",
        "2 N O HoWo (C/g) khkw",
    ),
    ShapeRule(
        "convolution",
        r"^aten::(?:cudnn|miopen)_convolution_backward_weight$",
        "conv_bwd_weight",
        "2 N O HoWo (C/g) khkw",
    ),
    ShapeRule("convolution", r"^aten::(?:cudnn_|miopen_|_)?convolution$|^aten::conv\dd$", "none", "profiler"),
    ShapeRule("elementwise", r"^aten::(?:copy_|fill_|zero_|_to_copy|clone|cat)$", "copy", "bytes only"),
    ShapeRule("elementwise", rf"^aten::(?:{_BINARY}|{_UNARY})_$", "elementwise_", "1 FLOP per element"),
    ShapeRule(
        "elementwise",
        rf"^aten::(?:{_BINARY}|{_UNARY}|(?:{_UNARY}|threshold)_backward)$",
        "elementwise",
        "1 FLOP per element",
    ),
)
"""Operator families with a FLOPs formula; `none`: FLOPs only from the profiler's `flops`."""

COST_SCHEMA: Mapping[str, pl.DataType] = {
    "op_class": pl.Utf8(),
    "shape_flops": pl.Float64(),
    "shape_bytes": pl.Float64(),
    "op_dtype": pl.Utf8(),
}
_DECODER = msgspec.json.Decoder()
_COSTS: dict[tuple[int, str | None, str | None], tuple[object, ...]] = {}
COSTS_CACHE = 65_536
"""Distinct (operator, dims, types) a process keeps; past it the cache starts afresh."""


def _parsed(dims: str | None, types: str | None) -> Args | None:
    try:
        shapes = _DECODER.decode(dims) if dims else []
        names = _DECODER.decode(types) if types else []
    except msgspec.DecodeError:
        return None
    if not isinstance(shapes, list) or not isinstance(names, list):
        return None
    clean = [
        tuple(int(x) for x in s) if isinstance(s, list) and all(isinstance(x, int) for x in s) else ()
        for s in shapes
    ]
    return Args(clean, [n if isinstance(n, str) else None for n in names])


def _dtype(args: Args) -> str | None:
    first = next((t for t in args.types if t in TYPE_BYTES), None)
    return TYPE_NAMES.get(first, first) if first else None


def _cost(rule_index: int, dims: str | None, types: str | None) -> tuple[object, ...]:
    """(FLOPs, bytes, dtype) of one distinct (rule, dims, types); nulls where the shapes do not fit."""
    args = _parsed(dims, types)
    formula = FORMULAS.get(SHAPE_RULES[rule_index].formula)
    found = formula(args) if formula is not None and args is not None else None
    flops, size = found if found is not None else (None, None)
    return (flops, size, _dtype(args) if args else None)


def _rule_index() -> pl.Expr:
    """Index in `SHAPE_RULES` of the first rule matching the operator name (null: none)."""
    found: pl.Expr = pl.lit(None, dtype=pl.Int32)
    for index in reversed(range(len(SHAPE_RULES))):
        matched = pl.col("name").str.contains(SHAPE_RULES[index].regex)
        found = pl.when(matched).then(pl.lit(index, dtype=pl.Int32)).otherwise(found)
    return found


_RULE = _rule_index().alias("_rule")
_KEYS = ["name", "input_dims", "input_types"]
_KEY_SCHEMA: Mapping[str, pl.DataType] = {
    "name": pl.Utf8(),
    "input_dims": pl.Utf8(),
    "input_types": pl.Utf8(),
}
_RECORDED = pl.col("flops").is_not_null() & (pl.col("flops") > 0)
_SOURCES = (
    pl.when(_RECORDED).then(pl.col("flops")).otherwise(pl.col("shape_flops")).alias("op_flops"),
    pl.when(_RECORDED)
    .then(pl.lit("profiler"))
    .when(pl.col("shape_flops").is_not_null())
    .then(pl.lit("shapes"))
    .alias("flops_source"),
)


def _named(ops: pl.LazyFrame) -> pl.LazyFrame:
    """The distinct (name, dims, types) of `ops` a rule names, with the rule's index (`_rule`)."""
    return ops.select(_KEYS).unique().with_columns(_RULE).drop_nulls("_rule")


def _costs(named: pl.DataFrame) -> pl.DataFrame:
    """One row per distinct (name, dims, types) of the operators a rule names (`_named`), with their costs."""
    if len(_COSTS) + named.height > COSTS_CACHE:
        _COSTS.clear()
    rows = [
        (
            name,
            dims,
            types,
            SHAPE_RULES[rule].op_class,
            *_cached_cost(rule, dims, types),
        )
        for name, dims, types, rule in named.iter_rows()
    ]
    return pl.DataFrame(rows, schema={**_KEY_SCHEMA, **COST_SCHEMA}, orient="row")


def _cached_cost(rule: int, dims: str | None, types: str | None) -> tuple[object, ...]:
    """`_cost`, computed once per distinct (rule, dims, types) a process meets."""
    key = (rule, dims, types)
    found = _COSTS.get(key)
    if found is None:
        found = _COSTS[key] = _cost(rule, dims, types)
    return found


def shape_costs_query(ops: pl.LazyFrame) -> pl.LazyFrame:
    """`shape_costs` of the frame `ops` computes (once, with its distinct shapes: one query), as a query."""
    frame, named = pl.collect_all([ops, _named(ops)])
    return (
        frame.lazy().join(_costs(named).lazy(), on=_KEYS, how="left", nulls_equal=True).with_columns(_SOURCES)
    )


def shape_costs(ops: pl.DataFrame) -> pl.DataFrame:
    """`ops` (columns `name`, `input_dims`, `input_types`, `flops`) with `op_class`, `shape_flops`,
    `shape_bytes`, `op_dtype` (the hardware table's name of the first tensor's dtype), `op_flops` (the
    profiler's `flops` when recorded, else the shapes') and `flops_source` (profiler | shapes | null)."""
    return shape_costs_query(ops.lazy()).collect()
