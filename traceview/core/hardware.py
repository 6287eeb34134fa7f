"""The hardware table: peak FLOP/s per device and dtype, peak memory bandwidth, GPU links, NICs, and
device-name matching (docs/metrics.md, "Predicted gamma", "Achieved FLOP/s").

The figures live in `hardware.toml` (package data, loaded once); every row names its datasheet. Bandwidths
follow one convention: `bandwidth_bytes_per_s` / `scale_up_uni_bytes_per_s` is one direction per GPU, the B of
the alpha-beta model and the figure nccl-tests busbw is compared with; the bidirectional figure is kept
alongside because it is the one datasheets print. Memory bandwidth (`memory_bytes_per_s`, the roofline's
slope) is the datasheet's peak, read and write together, with its own source (`memory_source`).
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Mapping
from importlib import resources
from typing import Any

from traceview.core.errors import TraceviewError, UsageError
from traceview.core.records import record

TABLE_FILE = "hardware.toml"

DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8")

_DTYPE_ALIASES: Mapping[str, str] = {
    "fp32": "fp32",
    "float32": "fp32",
    "float": "fp32",
    "f32": "fp32",
    "tf32": "tf32",
    "tensorfloat32": "tf32",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "f16": "fp16",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp8": "fp8",
    "float8": "fp8",
    "f8": "fp8",
    "float8e4m3fn": "fp8",
    "float8e4m3fnuz": "fp8",
    "float8e5m2": "fp8",
    "float8e5m2fnuz": "fp8",
    "e4m3": "fp8",
    "e5m2": "fp8",
}

_DROPPED_TOKENS = frozenset({"nvidia", "tesla", "amd", "instinct"})
_TOKEN_SPELLINGS: Mapping[str, str] = {"pci": "pcie", "pcie": "pcie", "pciexpress": "pcie"}


class HardwareLookupError(UsageError):
    """A device, dtype or link the hardware table does not know: the message says what to give instead."""


class HardwareTableError(TraceviewError):
    """hardware.toml itself is malformed (a defect of the shipped table, caught by its tests)."""


@record
class LinkSpec:
    """One link kind. `bandwidth_bytes_per_s` is one direction per GPU / port: the model's B."""

    key: str
    name: str
    kind: str
    bandwidth_bytes_per_s: float
    bidirectional_bytes_per_s: float
    alpha_s: float
    source: str
    alpha_source: str


@record
class GpuSpec:
    """One device as PyTorch sees it (one GCD of an MI250X): peaks, links and where the figures come from."""

    key: str
    name: str
    vendor: str
    memory_gb: float
    peak_dense_flops: tuple[tuple[str, float], ...]
    scale_up: str | None
    scale_up_uni_bytes_per_s: float | None
    scale_up_bidi_bytes_per_s: float | None
    scale_up_max_gpus: int
    pcie_gen: int | None
    pcie_uni_bytes_per_s: float | None
    intra_node_alpha_s: float
    source: str
    alpha_source: str
    note: str = ""
    memory_bytes_per_s: float | None = None  # peak memory (HBM/GDDR) bandwidth, both directions together
    memory_source: str = ""


@record
class MatchRule:
    """A device-name rule: every `all` token present, no `none` token, and `num_sms` equal when set."""

    required: frozenset[str]
    forbidden: frozenset[str]
    num_sms: int | None
    gpu: str

    @property
    def conditions(self) -> int:
        """How specific the rule is: the number of conditions it checks."""
        return len(self.required) + len(self.forbidden) + (self.num_sms is not None)


@record
class HardwareTable:
    """The parsed table."""

    gpus: Mapping[str, GpuSpec]
    links: Mapping[str, LinkSpec]
    rules: tuple[MatchRule, ...]
    unmatchable_tokens: frozenset[str]


def _require(row: Mapping[str, Any], field: str, where: str) -> Any:
    if field not in row:
        raise HardwareTableError(f"{TABLE_FILE}: {where} has no {field!r}")
    return row[field]


def _parse_link(key: str, row: Mapping[str, Any], alpha_source: str) -> LinkSpec:
    where = f"[links.{key}]"
    return LinkSpec(
        key=key,
        name=str(_require(row, "name", where)),
        kind=str(_require(row, "kind", where)),
        bandwidth_bytes_per_s=float(_require(row, "bandwidth_bytes_per_s", where)),
        bidirectional_bytes_per_s=float(_require(row, "bidirectional_bytes_per_s", where)),
        alpha_s=float(_require(row, "alpha_s", where)),
        source=str(_require(row, "source", where)),
        alpha_source=alpha_source,
    )


def _resolve_base(key: str, rows: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """A GPU row with the fields of its `base` chain filled in (the row's own `source` is required)."""
    row = rows[key]
    _require(row, "source", f"[gpus.{key}]")
    if "base" not in row:
        return dict(row)
    base = str(row["base"])
    if base not in rows or base == key:
        raise HardwareTableError(f"{TABLE_FILE}: [gpus.{key}] names an unknown base {base!r}")
    merged = _resolve_base(base, rows)
    merged.update({name: value for name, value in row.items() if name != "base"})
    return merged


def _parse_gpu(key: str, row: Mapping[str, Any], links: Mapping[str, LinkSpec], alpha_source: str) -> GpuSpec:
    where = f"[gpus.{key}]"
    flops = dict(_require(row, "peak_dense_flops", where))
    unknown = sorted(set(flops) - set(DTYPES))
    if unknown:
        raise HardwareTableError(f"{TABLE_FILE}: {where} has unknown dtypes {unknown}")
    pcie_gen = row.get("pcie_gen")
    pcie = links.get(f"pcie_gen{pcie_gen}") if pcie_gen is not None else None
    if pcie_gen is not None and pcie is None:
        raise HardwareTableError(f"{TABLE_FILE}: {where} names PCIe gen {pcie_gen}, not in [links]")
    uni, bidi = row.get("scale_up_uni_bytes_per_s"), row.get("scale_up_bidi_bytes_per_s")
    return GpuSpec(
        key=key,
        name=str(_require(row, "name", where)),
        vendor=str(_require(row, "vendor", where)),
        memory_gb=float(_require(row, "memory_gb", where)),
        peak_dense_flops=tuple((dtype, float(flops[dtype])) for dtype in DTYPES if dtype in flops),
        scale_up=row.get("scale_up"),
        scale_up_uni_bytes_per_s=None if uni is None else float(uni),
        scale_up_bidi_bytes_per_s=None if bidi is None else float(bidi),
        scale_up_max_gpus=int(row.get("scale_up_max_gpus", 1)),
        pcie_gen=None if pcie_gen is None else int(pcie_gen),
        pcie_uni_bytes_per_s=None if pcie is None else pcie.bandwidth_bytes_per_s,
        intra_node_alpha_s=float(_require(row, "intra_node_alpha_s", where)),
        source=str(row["source"]),
        alpha_source=alpha_source,
        note=str(row.get("note", "")),
        memory_bytes_per_s=_optional_float(row.get("memory_bandwidth_bytes_per_s")),
        memory_source=str(row.get("memory_source", "")),
    )


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _parse_rule(index: int, row: Mapping[str, Any], gpus: Mapping[str, GpuSpec]) -> MatchRule:
    gpu = str(_require(row, "gpu", f"[[match]] #{index}"))
    if gpu not in gpus:
        raise HardwareTableError(f"{TABLE_FILE}: [[match]] #{index} names an unknown gpu {gpu!r}")
    num_sms = row.get("num_sms")
    return MatchRule(
        required=frozenset(str(token) for token in _require(row, "all", f"[[match]] #{index}")),
        forbidden=frozenset(str(token) for token in row.get("none", [])),
        num_sms=None if num_sms is None else int(num_sms),
        gpu=gpu,
    )


def parse_table(document: Mapping[str, Any]) -> HardwareTable:
    """Build the table from a parsed TOML document; HardwareTableError names the first malformed row."""
    meta = _require(document, "meta", "the document")
    alpha_source = str(_require(meta, "alpha_source", "[meta]"))
    links = {key: _parse_link(key, row, alpha_source) for key, row in _require(document, "links", "").items()}
    gpu_rows = _require(document, "gpus", "the document")
    gpus = {key: _parse_gpu(key, _resolve_base(key, gpu_rows), links, alpha_source) for key in gpu_rows}
    rules = tuple(_parse_rule(index, row, gpus) for index, row in enumerate(document.get("match", [])))
    unmatchable = frozenset(str(token) for token in meta.get("unmatchable_tokens", []))
    return HardwareTable(gpus=gpus, links=links, rules=rules, unmatchable_tokens=unmatchable)


@functools.cache
def table() -> HardwareTable:
    """The shipped table, read from the package data once."""
    text = resources.files("traceview.core").joinpath(TABLE_FILE).read_text(encoding="utf-8")
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise HardwareTableError(f"{TABLE_FILE}: {error}") from error
    return parse_table(document)


def device_tokens(name: str) -> frozenset[str]:
    """The tokens a device name is matched on: case, vendor prefixes, separators and "80 GB" spellings erased.

    "NVIDIA A100-SXM4-80GB" -> {"a100", "sxm4", "sxm", "80gb"};
    "Tesla V100-PCIE-32 GB" -> {"v100", "pcie", "32gb"}.
    """
    text = re.sub(r"(\d+)\s*gi?b?\b", r"\1gb", name.lower())
    tokens: set[str] = set()
    for raw in re.split(r"[^a-z0-9]+", text):
        token = _TOKEN_SPELLINGS.get(raw, raw)
        if not token or token in _DROPPED_TOKENS:
            continue
        tokens.add(token)
        if re.fullmatch(r"sxm\d*", token):
            tokens.add("sxm")
    return frozenset(tokens)


def _rule_matches(rule: MatchRule, tokens: frozenset[str], num_sms: int | None) -> bool:
    if not rule.required <= tokens or rule.forbidden & tokens:
        return False
    return rule.num_sms is None or rule.num_sms == num_sms


def match_device(name: str, *, num_sms: int | None = None) -> GpuSpec | None:
    """The table's GPU for a `deviceProperties` name, or None for an unknown or ambiguous one.

    `num_sms` (the trace's `numSms`, compute units on AMD) tells apart devices that share a name ("AMD Radeon
    Graphics"). On None the caller reports "unknown device <name>: give --peak-flops / --bandwidth".
    """
    tokens = device_tokens(name)
    if tokens & table().unmatchable_tokens:
        return None
    hits = [rule for rule in table().rules if _rule_matches(rule, tokens, num_sms)]
    if not hits:
        return None
    best = max(rule.conditions for rule in hits)
    winners = {rule.gpu for rule in hits if rule.conditions == best}
    if len(winners) != 1:
        return None
    return table().gpus[winners.pop()]


def gpu(key: str) -> GpuSpec:
    """A GPU row by its table key (e.g. "a100_sxm4_80gb")."""
    spec = table().gpus.get(key)
    if spec is None:
        raise HardwareLookupError(f"unknown GPU {key!r}: known GPUs are {', '.join(table().gpus)}")
    return spec


def normalise_dtype(dtype: str) -> str:
    """The table's name of a dtype ("torch.bfloat16", "BF16", "bfloat16" -> "bf16")."""
    key = re.sub(r"[^a-z0-9]", "", dtype.lower().removeprefix("torch."))
    found = _DTYPE_ALIASES.get(key)
    if found is None:
        raise HardwareLookupError(f"unknown dtype {dtype!r}: known dtypes are {', '.join(DTYPES)}")
    return found


def peak_flops(spec: GpuSpec, dtype: str) -> float:
    """Peak dense FLOP/s of `spec` in `dtype`; HardwareLookupError when the device has no such peak."""
    wanted = normalise_dtype(dtype)
    for name, value in spec.peak_dense_flops:
        if name == wanted:
            return value
    raise HardwareLookupError(f"device {spec.name} has no {wanted} peak in {TABLE_FILE}: give --peak-flops")


def link(name: str) -> LinkSpec:
    """A link by its key, spelled loosely ("IB NDR", "ib-ndr" -> "ib_ndr"); HardwareLookupError if unknown."""
    key = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    spec = table().links.get(key)
    if spec is None:
        known = ", ".join(table().links)
        raise HardwareLookupError(f"unknown link {name!r}: known links are {known}; or give --bandwidth")
    return spec


def intra_node_link(spec: GpuSpec, group_size: int) -> LinkSpec:
    """The link a group of `group_size` GPUs of one node uses.

    The scale-up link (NVLink, xGMI) when it spans the group, else the GPU's PCIe link. B is the
    unidirectional per-GPU figure. HardwareLookupError when neither link applies.
    """
    uni, bidi = spec.scale_up_uni_bytes_per_s, spec.scale_up_bidi_bytes_per_s
    if spec.scale_up and uni is not None and bidi is not None and group_size <= spec.scale_up_max_gpus:
        return LinkSpec(
            key=f"{spec.key}.scale_up",
            name=f"{spec.scale_up} of {spec.name}",
            kind="scale_up",
            bandwidth_bytes_per_s=uni,
            bidirectional_bytes_per_s=bidi,
            alpha_s=spec.intra_node_alpha_s,
            source=spec.source,
            alpha_source=spec.alpha_source,
        )
    if spec.pcie_gen is None:
        raise HardwareLookupError(
            f"a group of {group_size} {spec.name} exceeds its {spec.scale_up} domain: give --bandwidth"
        )
    return link(f"pcie_gen{spec.pcie_gen}")
