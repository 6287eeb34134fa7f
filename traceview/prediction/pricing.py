"""Every collective call priced by the alpha-beta model on the link its group spans (docs/metrics.md,
"Predicted gamma"): T_pred = k(n) * alpha + f(n) * S / B, with its bandwidth and latency parts, for `gamma`
and `whatif`.
"""

from __future__ import annotations

import polars as pl

from traceview.core.algorithms import algorithm_exprs
from traceview.core.costmodel import (
    bandwidth_exprs,
    bus_factor_expr,
    hierarchical_exprs,
    latency_steps_expr,
)
from traceview.prediction.algorithms import logged_algorithm
from traceview.prediction.inputs import ModelInputs


def spans_nodes(ranks_per_node: int) -> pl.Expr:
    """Whether a call's group spans nodes: its listed ranks fall on two nodes (rank // ranks per node), else
    (ranks unknown, or a truncated list on one node) its size exceeds a node."""
    nodes = (
        pl.col("pg_ranks")
        .cast(pl.Utf8)
        .str.extract_all(r"-?\d+")
        .list.eval(pl.element().cast(pl.Int64) // ranks_per_node)
    )
    listed = nodes.list.len() > 0
    complete = nodes.list.len() >= pl.col("group_size").fill_null(0)  # PyTorch truncates after 30 ranks
    spans = nodes.list.n_unique() > 1
    return pl.when(listed & (complete | spans)).then(spans).otherwise(pl.col("group_size") > ranks_per_node)


def node_shape(ranks_per_node: int, n: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """(N, g): the nodes a call's group spans and its ranks per node, from its listed ranks (rank // ranks per
    node) when all are listed, else (none listed, or a list PyTorch truncated) from its size (N = ceil(n /
    ranks per node)); g = n / N, null where the nodes are uneven."""
    listed = pl.col("pg_ranks").cast(pl.Utf8).str.extract_all(r"-?\d+")
    nodes_listed = listed.list.eval(pl.element().cast(pl.Int64) // ranks_per_node).list.n_unique()
    by_size = (n.cast(pl.Float64) / ranks_per_node).ceil().cast(pl.Int64)
    # a list shorter than the group is truncated (PyTorch writes 30 ranks then "..."): its nodes are not all
    complete = listed.list.len() >= n
    nodes = pl.when((nodes_listed > 0) & complete).then(nodes_listed).otherwise(by_size)
    per_node = pl.when(n % nodes == 0).then(n // nodes)
    return nodes, per_node


def _link_value(inputs: ModelInputs, field: str) -> pl.Expr:
    """The field of each call's link: across nodes the NIC; inside a node the device's link, or for a call
    that ran on the host (gloo, MPI) the host's (loopback or shared memory; null when unknown)."""
    intra = getattr(inputs.intra, field) if inputs.intra else None
    inter = getattr(inputs.inter, field) if inputs.inter else None
    host = getattr(inputs.host_link, field) if inputs.host_link else None
    on_host = pl.col("comm_kind") == "host"
    return (
        pl.when(pl.col("spans_nodes"))
        .then(pl.lit(inter))
        .when(on_host.fill_null(False))
        .then(pl.lit(host))
        .otherwise(pl.lit(intra))
    )


def price(calls: pl.DataFrame, inputs: ModelInputs, n: pl.Expr | None = None) -> pl.DataFrame:
    """`calls` with spans_nodes (unless present), link, link_source, bandwidth_Bps, alpha_s, model_algorithm
    (the algorithm an NCCL log names for the call's collective and size where the model prices it: `tree`,
    `halving_doubling`; else `hierarchical` across nodes where it applies, else `ring`), t_pred_us, t_bw_us,
    t_lat_us, bw_bound (f S / B >= k alpha) and busbw_Bps (achieved, `costmodel.bandwidth_exprs`). `n`
    overrides the group size."""
    size = n if n is not None else pl.col("group_size")
    frame = calls.lazy()
    if "spans_nodes" not in calls.columns:
        frame = frame.with_columns(spans_nodes(inputs.ranks_per_node).alias("spans_nodes"))
    if "comm_kind" not in calls.columns:
        frame = frame.with_columns(pl.lit("device").alias("comm_kind"))
    frame = frame.with_columns(
        _link_value(inputs, "name").alias("link"),
        _link_value(inputs, "source").cast(pl.Utf8).alias("link_source"),
        _link_value(inputs, "bandwidth_Bps").cast(pl.Float64).alias("bandwidth_Bps"),
        _link_value(inputs, "alpha_s").cast(pl.Float64).alias("alpha_s"),
    )
    device = (pl.col("comm_kind") != "host").fill_null(True)  # NCCL's logs say nothing of gloo's calls
    logged = logged_algorithm(calls, inputs.logged_algorithms, size)
    branches = _branches(inputs, size)
    return (
        _group_overrides(frame, inputs)
        .with_columns(logged.alias("_logged"))
        .with_columns(pl.when(device).then(pl.col("_logged")).alias("_logged"))
        .with_columns(**_node_columns(inputs, size))
        .with_columns(**_choices(branches))
        .with_columns(**_chosen(branches, size))
        .with_columns(
            (pl.col("t_bw_us") + pl.col("t_lat_us")).alias("t_pred_us"),
            (pl.col("t_bw_us") >= pl.col("t_lat_us")).alias("bw_bound"),
        )
        .drop(*CHOICE_COLUMNS, "_nodes", "_per_node", "_logged", strict=False)
        .collect()
    )


def _branches(inputs: ModelInputs, size: pl.Expr) -> dict[str, pl.Expr]:
    """Each algorithm's (latency, transfer) per call: the algorithm the logs name (s), the hierarchical one
    (s) and the flat ring (us)."""
    collective, bytes_ = pl.col("collective"), pl.col("size_bytes")
    named_lat, named_bw = algorithm_exprs(
        collective, pl.col("_logged"), size, bytes_, pl.col("alpha_s"), pl.col("bandwidth_Bps")
    )
    hier_lat, hier_bw = _hierarchical(inputs)
    return {
        "named_lat": named_lat,
        "named_bw": named_bw,
        "hier_lat": hier_lat,
        "hier_bw": hier_bw,
        "flat_lat": latency_steps_expr(collective, size) * pl.col("alpha_s") * 1e6,
        "flat_bw": bus_factor_expr(collective, size)
        * bytes_.cast(pl.Float64)
        / pl.col("bandwidth_Bps")
        * 1e6,
    }


def _node_columns(inputs: ModelInputs, size: pl.Expr) -> dict[str, pl.Expr]:
    """`_nodes` and `_per_node` of each call (`node_shape`), which the hierarchical pricing reads: computed
    once (its listed ranks parsed once), not once per expression that reads them."""
    nodes, per_node = node_shape(inputs.ranks_per_node, size)
    return {"_nodes": nodes, "_per_node": per_node}


CHOICE_COLUMNS = ("_named", "_hierarchical")
"""Whether the logged algorithm prices a call, and whether the hierarchical one does: computed once as a
column, as each of the chosen columns reads them (an expression repeated in a plan is evaluated each time;
the values stay inside the choice, where polars computes them as it always did, to the last bit)."""


def _choices(branches: dict[str, pl.Expr]) -> dict[str, pl.Expr]:
    """`CHOICE_COLUMNS` from the branches' values."""
    return {
        "_named": branches["named_bw"].is_not_null() & branches["named_lat"].is_not_null(),
        "_hierarchical": branches["hier_bw"].is_not_null() & branches["hier_lat"].is_not_null(),
    }


def _chosen(branches: dict[str, pl.Expr], size: pl.Expr) -> dict[str, pl.Expr]:
    """model_algorithm, t_bw_us, t_lat_us (the logged algorithm where priced, else the hierarchical one
    where it applies, else the ring) and busbw_Bps."""
    named, hierarchical = map(pl.col, CHOICE_COLUMNS)
    bytes_, duration = pl.col("size_bytes"), pl.col("dur_us")
    return {
        "model_algorithm": pl.when(named)
        .then(pl.col("_logged"))
        .when(hierarchical)
        .then(pl.lit("hierarchical"))
        .otherwise(pl.lit("ring")),
        "t_bw_us": pl.when(named)
        .then(branches["named_bw"] * 1e6)
        .when(hierarchical)
        .then(branches["hier_bw"] * 1e6)
        .otherwise(branches["flat_bw"]),
        "t_lat_us": pl.when(named)
        .then(branches["named_lat"] * 1e6)
        .when(hierarchical)
        .then(branches["hier_lat"] * 1e6)
        .otherwise(branches["flat_lat"]),
        "busbw_Bps": bandwidth_exprs(pl.col("collective"), size, bytes_, duration)[1],
    }


def _hierarchical(inputs: ModelInputs) -> tuple[pl.Expr, pl.Expr]:
    """(latency s, transfer s) of a device call across nodes priced hierarchically (docs/metrics.md,
    "Predicted gamma", Links): the scale-up link inside each node, then rail-aligned rings over the NICs;
    null for calls inside a node, on the host, of other collectives, of uneven nodes or of an NCCL-log group
    link. Reads the call's nodes and ranks per node (`_nodes`, `_per_node`: `node_shape`)."""
    if inputs.intra is None or inputs.inter is None:
        return pl.lit(None, dtype=pl.Float64), pl.lit(None, dtype=pl.Float64)
    nodes, per_node = pl.col("_nodes"), pl.col("_per_node")
    overridden = (
        pl.col("pg_key").is_in([g for g, _ in inputs.group_links]) if inputs.group_links else pl.lit(False)
    )
    device = (pl.col("comm_kind") != "host").fill_null(True)
    usable = pl.col("spans_nodes") & device & ~overridden & (per_node > 1)
    rails = pl.min_horizontal(pl.lit(inputs.nics_per_node or inputs.ranks_per_node), per_node).cast(
        pl.Float64
    )
    latency, transfer = hierarchical_exprs(
        pl.col("collective"),
        pl.col("size_bytes"),
        per_node,
        nodes,
        (pl.lit(inputs.intra.alpha_s), pl.lit(inputs.intra.bandwidth_Bps)),
        (pl.col("alpha_s"), pl.col("bandwidth_Bps")),
        rails,
    )
    return pl.when(usable).then(latency), pl.when(usable).then(transfer)


def _group_overrides(frame: pl.LazyFrame, inputs: ModelInputs) -> pl.LazyFrame:
    """The link columns of calls of groups the NCCL log overrides (`ModelInputs.group_links`)."""
    if not inputs.group_links:
        return frame
    links = dict(inputs.group_links)
    return frame.with_columns(
        pl.col("pg_key")
        .replace_strict(
            {g: getattr(found, field) for g, found in links.items()},
            default=pl.col(column),
            return_dtype=dtype,
        )
        .alias(column)
        for field, column, dtype in (
            ("name", "link", pl.Utf8),
            ("source", "link_source", pl.Utf8),
            ("bandwidth_Bps", "bandwidth_Bps", pl.Float64),
            ("alpha_s", "alpha_s", pl.Float64),
        )
    )
