"""What the user states of the run's parallelism and model shape (docs/metrics.md, "Parallelism dimensions"):
`--dims "tp=8,pp=4,dp=*"` (or `run.json` `parallelism`) and `--shape "hidden=4096,seq=2048,layers=32"` (or
`run.json` `model.hidden`, ...), parsed and checked here, each value with its source.

A layout lists the mesh's axes innermost first: the first axis varies fastest over consecutive ranks (the
seeds' 3D layout: rank = dp * (tp * pp) + pp * tp + tp for `tp=T,pp=P,dp=*`); `*` is the rest of the world (at
most one).
"""

from __future__ import annotations

import math
import re
from dataclasses import field

from traceview.core.errors import UsageError
from traceview.core.records import record

DIMENSIONS: tuple[str, ...] = ("dp", "fsdp", "tp", "pp", "ep", "cp")
"""The parallelism dimensions traceview names (docs/metrics.md, "Parallelism dimensions")."""
DIMENSION_ALIASES: dict[str, str] = {
    "dp_replicate": "dp",
    "ddp": "dp",
    "hsdp": "dp",
    "dp_shard": "fsdp",
    "zero": "fsdp",
    "sp": "tp",
    "etp": "tp",
}
"""Other names a layout may use for a dimension."""
SHAPE_KEYS: dict[str, str] = {
    "hidden": "hidden",
    "h": "hidden",
    "seq": "seq_len",
    "s": "seq_len",
    "seq_len": "seq_len",
    "layers": "layers",
    "l": "layers",
    "micro_batches": "micro_batches",
    "microbatches": "micro_batches",
    "m": "micro_batches",
    "top_k": "top_k",
    "topk": "top_k",
    "k": "top_k",
    "experts": "experts",
    "moe_layers": "moe_layers",
}
"""`--shape` keys (and short forms) -> `ModelShape` fields."""
SHAPE_BOUNDS = (1.0, 1e9)


@record
class Layout:
    """A stated layout: (dimension, size or None for `*`) innermost first, and where it came from."""

    axes: tuple[tuple[str, int | None], ...] = ()
    source: str = ""  # command line | manifest

    @property
    def stated(self) -> bool:
        """Whether a layout was stated at all."""
        return bool(self.axes)

    def model_shards(self) -> int | None:
        """How many ways the stated layout splits the model's parameters (tp x pp x fsdp x ep sizes stated;
        `*` unknown: None); None without one of them stated."""
        sizes = [size for name, size in self.axes if name in MODEL_SHARDING]
        if not sizes or any(size is None for size in sizes):
            return None
        found = 1
        for size in sizes:
            found *= size or 1
        return found

    def text(self) -> str:
        """The layout as `--dims` writes it."""
        return ",".join(f"{name}={'*' if size is None else size}" for name, size in self.axes)


MODEL_SHARDING = ("tp", "pp", "fsdp")
"""The dimensions that split the model's parameters among ranks (each rank holds P / their sizes' product)."""


@record
class ModelShape:
    """The model's shape as stated: hidden size h, sequence length s, layers L, micro-batches m per step,
    top-k experts per token, experts E, MoE layers; None where not stated. `sources`: (field, source)."""

    hidden: float | None = None
    seq_len: float | None = None
    layers: float | None = None
    micro_batches: float | None = None
    top_k: float | None = None
    experts: float | None = None
    moe_layers: float | None = None
    sources: tuple[tuple[str, str], ...] = field(default=())

    def source_of(self, name: str) -> str | None:
        """Where field `name` came from (None when not stated)."""
        return dict(self.sources).get(name)


def _pairs(text: str, what: str) -> list[tuple[str, str]]:
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise UsageError(f"{what} is empty")
    found = []
    for part in parts:
        matched = re.fullmatch(r"([A-Za-z_]+)\s*=\s*(\S+)", part)
        if matched is None:
            raise UsageError(f"{what}: {part!r} is not NAME=VALUE")
        found.append((matched.group(1).lower(), matched.group(2)))
    return found


def parse_layout(text: str, source: str = "command line", what: str = "--dims") -> Layout:
    """`"tp=8,pp=4,dp=*"` -> a `Layout` (innermost axis first). A usage error names a bad part."""
    axes: list[tuple[str, int | None]] = []
    for name, value in _pairs(text, what):
        dimension = DIMENSION_ALIASES.get(name, name)
        if dimension not in DIMENSIONS:
            raise UsageError(f"{what}: unknown dimension {name!r} (one of {', '.join(DIMENSIONS)})")
        if value == "*":
            axes.append((dimension, None))
            continue
        if not value.isdigit() or not 1 <= int(value) <= 2**24:
            raise UsageError(f"{what}: {name}={value} is not a size from 1 to 16777216 or *")
        axes.append((dimension, int(value)))
    names = [name for name, _ in axes]
    if len(set(names)) < len(names):
        raise UsageError(f"{what}: a dimension is named twice in {text!r}")
    if sum(size is None for _, size in axes) > 1:
        raise UsageError(f"{what}: at most one dimension may be * (the rest of the world)")
    return Layout(tuple(axes), source)


def parse_shape(text: str, what: str = "--shape") -> dict[str, float]:
    """`"hidden=4096,seq=2048,layers=32"` -> {field: value}; each a number in [1, 1e9]."""
    found: dict[str, float] = {}
    for name, value in _pairs(text, what):
        key = SHAPE_KEYS.get(name)
        if key is None:
            raise UsageError(f"{what}: unknown key {name!r} (one of {', '.join(sorted(set(SHAPE_KEYS)))})")
        try:
            number = float(value)
        except ValueError:
            raise UsageError(f"{what}: {name}={value} is not a number") from None
        low, high = SHAPE_BOUNDS
        if not (math.isfinite(number) and low <= number <= high):
            raise UsageError(f"{what}: {name}={value} is outside [{low:g}, {high:g}]")
        found[key] = number
    return found


def model_shape(stated: dict[str, float], manifest: dict[str, float]) -> ModelShape:
    """The shape from the command line (`stated`), completed by the manifest's values."""
    values = {**manifest, **stated}
    sources = tuple((name, "command line" if name in stated else "manifest") for name in sorted(values))
    return ModelShape(**values, sources=sources)


def layout_groups(layout: Layout, world: int) -> dict[str, list[tuple[int, ...]]] | str:
    """Every group of ranks of each stated dimension for a world of `world` ranks, or why the layout does
    not fit it (a sentence). Axis i's groups vary its coordinate with every other axis fixed."""
    sizes = [size for _, size in layout.axes]
    known = math.prod(size for size in sizes if size is not None)
    if world % known:
        return f"--dims {layout.text()} does not divide the world size {world}"
    rest = world // known
    filled = [rest if size is None else size for size in sizes]
    if math.prod(filled) != world:
        return f"--dims {layout.text()} makes {math.prod(filled)} ranks, not the world size {world}"
    groups: dict[str, list[tuple[int, ...]]] = {}
    stride = 1
    for (name, _), size in zip(layout.axes, filled, strict=True):
        starts = [rank for rank in range(world) if (rank // stride) % size == 0]
        groups[name] = [tuple(start + i * stride for i in range(size)) for start in starts]
        stride *= size
    return groups
