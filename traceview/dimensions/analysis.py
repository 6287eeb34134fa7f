"""Parallelism dimensions (docs/metrics.md, "Parallelism dimensions"): which dimension each process group is,
with its evidence and confidence; what each dimension costs per step; its volume against the seeds' formulas.

`analyze_dimensions(...) -> Dimensions` is pure: the run's communication kernels, step windows, the map's time
per (rank, step, group), the cross-rank matching and the prediction's priced calls and inputs in; a new result
out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field

import polars as pl

from traceview.across_ranks.analysis import CrossRank
from traceview.core.records import record
from traceview.dimensions.classify import THRESHOLD, UNKNOWN
from traceview.dimensions.cost import (
    call_figures,
    dimension_links,
    matched_figures,
    per_dimension,
    per_step,
    time_figures,
)
from traceview.dimensions.evidence import (
    EVIDENCE_SCHEMA,
    library_rows,
    name_rows,
    rule_evidence,
    stated_rows,
)
from traceview.dimensions.features import LINE_KEY, calls_in_steps, group_calls, kind_expr, with_structure
from traceview.dimensions.gloo_groups import with_gloo_groups
from traceview.dimensions.inputs import volume_inputs
from traceview.dimensions.lines import (
    communicated_names,
    decided_lines,
    dominant_groups,
    line_features,
    with_libraries,
)
from traceview.dimensions.names import name_column
from traceview.dimensions.volume import VolumeInputs, volume_table
from traceview.dimensions.zero import run_zero
from traceview.events.kernel_names import decode_kernel_names
from traceview.options.parallel import Layout, ModelShape, layout_groups
from traceview.prediction.gamma import Prediction

DIMENSION_NAMES = {
    "dp": "data parallelism",
    "fsdp": "sharded data parallelism (FSDP/ZeRO)",
    "tp": "tensor parallelism",
    "pp": "pipeline parallelism",
    "ep": "expert parallelism",
    "cp": "context parallelism",
    UNKNOWN: "groups of unknown dimension",
}
"""How a sentence names each dimension."""
DIMENSION_ADVICE = {
    "dp": "its gradient all-reduces should run under the backward pass: check the bucket order and "
    "size (bucket_cap_mb), or raise the local batch",
    "fsdp": "prefetch the next unit's all-gather earlier (forward/backward prefetch), shard over a "
    "smaller group (HSDP) or keep parameters after forward when memory allows",
    "tp": "its all-reduces sit on the critical path by design; consider sequence parallelism or fewer "
    "TP ranks (keep TP inside a node)",
    "pp": "its sends wait on the schedule: raise the micro-batches per step or interleave stages "
    "(virtual stages) to shrink the bubble",
    "ep": "its all-to-alls sit between the router and the experts: balance the experts' load, overlap "
    "dispatch with compute, or keep EP inside a node",
    "cp": "its ring exchanges should overlap attention: check that the KV passes run under the blocks' "
    "compute",
}
"""One line of advice per dimension, for the verdict and the recommendations."""


LINK_SCHEMA: Mapping[str, pl.DataType] = {
    "dimension": pl.Utf8(),
    "link": pl.Utf8(),
    "links": pl.List(pl.Utf8()),
    "link_Bps": pl.Float64(),
    "spans_nodes": pl.Boolean(),
    "on_host": pl.Boolean(),
    "latency_share": pl.Float64(),
}


@record
class Dimensions:
    """Every result of the dimensions analysis; renderers read it and never compute.

    `groups`: one row per group (group, desc, pg_name, n, ranks, dimension, confidence, best, runner_up,
    evidence, calls, calls_per_step, family shares: its dominant line's dimension). `lines`: one row per
    (group, kind) with its own figures and dimension. `evidence`: every rule that fired, per line.
    `per_step`: per (dimension, rank, step) figures. `per_dimension`: medians per dimension, costliest
    exposed first. `volumes`: expected against measured volume. `inputs`: the formulas' inputs with their
    sources."""

    groups: pl.DataFrame
    evidence: pl.DataFrame
    per_step: pl.DataFrame
    per_dimension: pl.DataFrame
    volumes: pl.DataFrame
    lines: pl.DataFrame = field(default_factory=pl.DataFrame)
    zero: pl.DataFrame = field(default_factory=pl.DataFrame)
    inputs: VolumeInputs | None = None
    layout: str | None = None
    layout_note: str | None = None
    threshold: float = THRESHOLD
    notes: tuple[str, ...] = field(default=())

    @property
    def named(self) -> pl.DataFrame:
        """`per_dimension` without the unknown groups."""
        return self.per_dimension.filter(pl.col("dimension") != UNKNOWN)

    @property
    def costliest(self) -> dict[str, object] | None:
        """The named dimension whose median exposed time per step is the largest (None: none named)."""
        named = self.named.filter(pl.col("exposed_us") > 0)
        return named.row(0, named=True) if named.height else None

    def gate_figures(self) -> dict[str, float | None]:
        """`<dim>_exposed_us`, `<dim>_comm_us` and `<dim>_wait_us` of every named dimension (run medians)."""
        figures: dict[str, float | None] = {}
        for row in self.named.iter_rows(named=True):
            for figure in ("exposed_us", "comm_us", "wait_us", "bytes"):
                figures[f"{row['dimension']}_{figure}"] = row[figure]
        return figures


def _layout_evidence(
    features: pl.DataFrame, layout: Layout, world: int | None
) -> tuple[pl.DataFrame, str | None]:
    if not layout.stated:
        return pl.DataFrame(schema=EVIDENCE_SCHEMA), None
    if world is None:
        return pl.DataFrame(
            schema=EVIDENCE_SCHEMA
        ), f"--dims {layout.text()} not used: the world size is unknown"
    groups = layout_groups(layout, world)
    if isinstance(groups, str):
        return pl.DataFrame(schema=EVIDENCE_SCHEMA), f"{groups}: not used"
    return stated_rows(features, groups), None


def _gradient_elem_size(calls: pl.DataFrame) -> float | None:
    """The median element size of the data-parallel (dp, fsdp) calls: the gradients' e."""
    found = calls.filter(pl.col("dimension").is_in(["dp", "fsdp"])).get_column("elem_size").drop_nulls()
    return float(found.median()) if found.len() else None  # type: ignore[arg-type]


def classify_groups(
    calls: pl.DataFrame, phases: pl.DataFrame, ranks_per_node: int, world: int | None, layout: Layout
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, str | None]:
    """(per group: features and its dominant dimension; per line: features and the decided dimension; the
    evidence rows, per line; a note on the layout)."""
    groups = with_structure(group_calls(calls, phases), ranks_per_node, world)
    features = line_features(calls, phases, groups)
    stated, note = _layout_evidence(features, layout, world)
    evidence = pl.concat(
        [
            stated,
            name_rows(features, name_column(features["desc"])),
            library_rows(features),
            rule_evidence(features),
        ]
    )
    lines = decided_lines(features, evidence)
    ordered = evidence.sort("group", "line_kind", "kind", "rule")
    return dominant_groups(groups, lines), lines, ordered, note


def analyze_dimensions(
    kernels: pl.DataFrame,
    config: pl.DataFrame,
    windows: pl.DataFrame,
    group_parts: tuple[pl.DataFrame, pl.DataFrame],
    crossrank: CrossRank | None,
    prediction: Prediction | None,
    world: int | None,
    settings: tuple[Layout, ModelShape, int],
    micro_batches: float | None = None,
) -> Dimensions:
    """The dimensions analysis (module docstring); `config` = every rank's `pg_config`
    (`traceview.collectives.groups.config_groups`), `group_parts` = the map's time and phases per group
    (`traceview.dimensions.group_time`), `settings` = (stated layout, stated shape, virtual stages),
    `micro_batches` the pipeline's M measured by the bubbles analysis (median), if any."""
    layout, shape, virtual_stages = settings
    group_time, phases = group_parts
    found = with_gloo_groups(calls_in_steps(kernels, windows), config)
    calls = with_libraries(found, decode_kernel_names(communicated_names(kernels)))
    ranks_per_node = prediction.inputs.ranks_per_node if prediction else 8
    groups, lines, evidence, note = classify_groups(calls, phases, ranks_per_node, world, layout)
    labels, line_labels = groups.select("group", "dimension"), lines.select(*LINE_KEY, "dimension")
    matched = (
        matched_figures(crossrank.calls, crossrank.instances.with_columns(kind_expr()), line_labels)
        if crossrank is not None and crossrank.calls.height
        else pl.DataFrame(schema={"dimension": pl.Utf8, "rank": pl.Int64, "step": pl.Int64})
    )
    steps = per_step(call_figures(calls, line_labels), time_figures(group_time, labels), matched)
    for column in ("wait_us", "transfer_us", "matched_calls", "matched_bus_bytes", "unsized_calls"):
        steps = steps if column in steps.columns else steps.with_columns(pl.lit(0.0).alias(column))
    priced = prediction.calls if prediction is not None else pl.DataFrame()
    links = dimension_links(calls, priced, line_labels) if priced.height else pl.DataFrame(schema=LINK_SCHEMA)
    labelled = calls.join(line_labels, on=LINE_KEY)
    inputs = volume_inputs(lines, labelled, prediction, shape, (virtual_stages, micro_batches))
    latency = dict(zip(links["dimension"].to_list(), links["latency_share"].to_list(), strict=True))
    return Dimensions(
        groups=groups,
        evidence=evidence,
        per_step=steps,
        per_dimension=per_dimension(steps, lines, links),
        volumes=volume_table(labelled, inputs, latency),
        lines=lines,
        zero=run_zero(inputs.params.value, inputs.sizes, _gradient_elem_size(labelled)),
        inputs=inputs,
        layout=layout.text() if layout.stated else None,
        layout_note=note,
    )
