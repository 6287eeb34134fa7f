"""The host side of a step (docs/metrics.md, "Kernels and operators", "Host side"): what the CPU did that the
idle-GPU advice cites, from the trace's own spans.

`HOST_RULES` is a table: a phase, the kinds of host rows it reads (op | annotation | runtime) and a regex on
their names. Per (rank, step, phase): `time_us`, the union of the matching spans cut to the host step windows
(the CPU `ProfilerStep#N` marks; the device windows when the trace has none), and `spans`, how many there
are. Several rules of one phase are one union (an annotated `## backward ##` and the autograd engine's
operators inside it count once).
"""

from __future__ import annotations

import polars as pl

from traceview.core.intervals import clipped, union_length
from traceview.core.records import record


@record
class HostRule:
    """One row: a phase of the step, the host row kinds it reads, a regex on their names, and whose names."""

    phase: str
    kinds: tuple[str, ...]
    regex: str
    source: str


HOST_RULES: tuple[HostRule, ...] = (
    HostRule(
        "data_loading", ("op", "annotation"), r"^enumerate\(DataLoader\)#", "torch DataLoader iteration"
    ),
    HostRule(
        "data_loading",
        ("annotation",),
        r"^## ?(?:load_batch|data_load\w*|wait_for_batch) ?##$",
        "TorchRec train pipeline annotations",
    ),
    HostRule(
        "synchronize",
        ("runtime",),
        r"^(?:cuda|hip|cu)(?:Device|Stream|Event|Ctx)Synchronize(?:_v\d+)?$",
        "CUDA/HIP runtime",
    ),
    HostRule(
        "to_host",
        ("op",),
        r"^aten::(?:item|_local_scalar_dense|nonzero|is_nonzero|equal)$",
        "tensor values read on the host (`.item()`, `nonzero`)",
    ),
    HostRule("forward", ("annotation",), r"^## forward ##$", "user annotation"),
    HostRule(
        "forward",
        ("annotation", "op"),
        r"^(?:DistributedDataParallel|FullyShardedDataParallel)\.forward$",
        "DDP / FSDP forward",
    ),
    HostRule("backward", ("annotation",), r"^## backward ##$", "user annotation"),
    HostRule("backward", ("op",), r"^autograd::engine::evaluate_function: ", "autograd engine"),
    HostRule("optimizer", ("annotation",), r"^## (?:optimizer|zero_grad) ##$", "user annotation"),
    HostRule("optimizer", ("annotation", "op"), r"^Optimizer\.(?:step|zero_grad)#", "torch.optim profiling"),
    HostRule(
        "serving_step",
        ("annotation",),
        r"(?i)^step\[(?:decode|prefill|extend|mixed|idle)\b",
        "serving engine step annotations (`step[DECODE bs=32]`)",
    ),
    HostRule(
        "serving_step",
        ("op",),
        r"^(?:vllm|sglang)::",
        "a serving engine's own operators (vLLM's and SGLang's custom ops: `vllm::unified_attention`)",
    ),
    HostRule("warmup", ("annotation",), r"(?i)^(?:## ?)?warm[-_ ]?up\b", "a benchmark harness's annotation"),
)
"""Host phases and where a trace records them; a phase with no matching row is not measured (absent)."""

PHASES = tuple(dict.fromkeys(rule.phase for rule in HOST_RULES))
HOST_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64(),
    "step": pl.Int64(),
    "phase": pl.Utf8(),
    "time_us": pl.Float64(),
    "spans": pl.Int64(),
}


def host_windows(trace_steps: pl.DataFrame, windows: pl.DataFrame) -> pl.LazyFrame:
    """The host step windows of each rank (`rank`, `step`, `window_start_us`, `window_end_us`): its CPU
    `ProfilerStep#N` marks (`RankTrace.steps` with `rank`, source cpu), else its `windows`; a query."""
    marks = trace_steps.lazy().filter(_FROM_CPU)
    if not (trace_steps.get_column("source") == "cpu").any():
        return windows.lazy().select(_WINDOW)
    marked = marks.unique(["rank", "step"], keep="first", maintain_order=True).select(
        "rank", "step", *_WINDOW_EDGES
    )
    unmarked = windows.lazy().join(marks.select("rank").unique(), on="rank", how="anti").select(_WINDOW)
    return pl.concat([marked, unmarked])


_FROM_CPU = pl.col("source") == "cpu"
_WINDOW_EDGES = (pl.col("start_us").alias("window_start_us"), pl.col("end_us").alias("window_end_us"))
_WINDOW = ("rank", "step", "window_start_us", "window_end_us")


def _phase() -> pl.Expr:
    found: pl.Expr = pl.lit(None, pl.Utf8)
    for rule in reversed(HOST_RULES):
        matched = pl.col("kind").is_in(list(rule.kinds)) & pl.col("name").str.contains(rule.regex)
        found = pl.when(matched).then(pl.lit(rule.phase)).otherwise(found)
    return found


_PHASE = _phase().alias("phase")
_ANY_RULE = pl.col("name").str.contains("|".join(f"(?:{rule.regex})" for rule in HOST_RULES))
_KEYS = ["rank", "step", "phase"]
_SPANS = pl.len().cast(pl.Int64).alias("spans")
_HOST_COLUMNS = [pl.col(c).cast(t) for c, t in HOST_SCHEMA.items()]
_CANDIDATE_SCHEMA = {"kind": pl.Utf8, "name": pl.Utf8}
_PHASES: dict[tuple[str | None, str | None], str | None] = {}
PHASES_CACHE = 65_536
"""Host (kind, name) pairs whose phase a process keeps; past it the cache starts afresh."""


def host_candidates(cpu: pl.DataFrame) -> pl.LazyFrame:
    """The host rows (with `rank`) some rule's regex matches (`rank`, `kind`, `name`, `start_us`, `end_us`),
    as a query: one scan of the names; the rules then run on few (`host_spans`)."""
    return cpu.lazy().select("rank", "kind", "name", "start_us", "end_us").filter(_ANY_RULE)


def _phases_of(kinds: list[str | None], names: list[str | None]) -> list[str | None]:
    """The phase of each (kind, name) (`HOST_RULES`; null: none), each distinct pair once per process (those
    not yet seen, by one query): the ranks of a job share their host names."""
    pairs = list(zip(kinds, names, strict=True))
    missing = [pair for pair in dict.fromkeys(pairs) if pair not in _PHASES]
    if len(_PHASES) + len(missing) > PHASES_CACHE:
        _PHASES.clear()
        missing = list(dict.fromkeys(pairs))
    if missing:
        frame = pl.DataFrame(missing, schema=_CANDIDATE_SCHEMA, orient="row")
        _PHASES.update(zip(missing, frame.select(_PHASE).to_series().to_list(), strict=True))
    return [_PHASES[pair] for pair in pairs]


def host_spans(candidates: pl.DataFrame, windows: pl.LazyFrame) -> pl.LazyFrame:
    """The host spans of a phase (rank, phase, start_us, end_us) of the `host_candidates` computed, cut into
    each rank's host step `windows` (with `step`), as a query."""
    kinds, names = candidates.get_column("kind").to_list(), candidates.get_column("name").to_list()
    phase = pl.Series("phase", _phases_of(kinds, names), dtype=pl.Utf8)
    spans = (
        candidates.hstack([phase]).lazy().drop_nulls("phase").select("rank", "phase", "start_us", "end_us")
    )
    return clipped(spans, windows, ["rank"])


def host_steps(spans: pl.DataFrame) -> pl.LazyFrame:
    """Per (rank, step, phase): `HOST_SCHEMA` from the `host_spans` computed (`spans`), as a query (the union
    of each phase's spans runs first)."""
    if spans.height == 0:
        return pl.LazyFrame(schema=HOST_SCHEMA)
    counted = spans.lazy().group_by(_KEYS).agg(_SPANS)
    return (
        union_length(spans, _KEYS, "time_us").lazy().join(counted, on=_KEYS).sort(_KEYS).select(_HOST_COLUMNS)
    )
