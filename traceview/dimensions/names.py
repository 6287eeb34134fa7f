"""What a process group's name says of its dimension (docs/metrics.md, "Parallelism dimensions", names).

The description PyTorch records (`Process Group Description`, `distributedInfo.pg_config[].pg_desc`) is the
framework's: a DeviceMesh dimension is `mesh_<dim>` (torchtitan's `dp_replicate`, `dp_shard`, `dp_shard_cp`,
`dp_shard_mod_ep`, `cp`, `tp`, `pp`, `ep`; flattened dims join names with `_`), Megatron-LM passes
`group_desc='TENSOR_MODEL_PARALLEL_GROUP'` and its kin, DeepSpeed's groups are mostly undescribed.
`NAME_RULES` is a table, first match wins, on the lowered description with `mesh_` and a `_gloo` suffix
removed; a name that joins several dimensions (`TENSOR_AND_DATA_PARALLEL_GROUP`, torchtitan's `dp_cp`-style
flattenings listed there) says nothing, and so does PyTorch's `undefined` or a bare number.
"""

from __future__ import annotations

import re

import polars as pl

from traceview.core.records import record


@record
class NameRule:
    """A name pattern (regex on the normalised description) and the dimension it names (None: no evidence)."""

    pattern: str
    dimensions: tuple[str, ...]
    says: str


NAME_RULES: tuple[NameRule, ...] = (
    NameRule(r"^(?:undefined|default_pg|default|world|dim_\d+|\d+|)$", (), "a default or unnamed group"),
    NameRule(
        r"tensor_and|and_data|and_context|and_expert|and_model|model_pipeline|^model_parallel(?:_group)?$"
        r"|^tp_(?:dp|cp|pp|ep)|^(?:tp|dp)_(?:dp|cp|pp|ep)_",
        (),
        "a group that joins several dimensions",
    ),
    NameRule(r"expert_tensor|^etp$", ("tp",), "the expert tensor-parallel group"),
    NameRule(r"expert_data|^edp$", ("dp", "fsdp"), "the experts' data-parallel group"),
    NameRule(
        r"^dp_shard_mod_ep$|^dp_shard_in_ep$", ("fsdp",), "the experts' sharded data-parallel dimension"
    ),
    NameRule(r"expert|^ep(?:_[\d_]+)?$|^ep_|_ep$|moe", ("ep",), "an expert-parallel group"),
    NameRule(
        r"^dp_shard(?:_cp)?$|fsdp|zero|^shard$|^hsdp_shard$", ("fsdp",), "a sharded data-parallel dimension"
    ),
    NameRule(r"^dp_replicate$|^replicate$|^hsdp_replicate$", ("dp",), "a replicated data dimension"),
    NameRule(r"sequence_data", ("dp", "fsdp"), "a data-parallel group (replicated or sharded)"),
    NameRule(
        r"context_parallel|^cp$|^cp_|ulysses|ring_attn|^sequence_parallel|^sp$",
        ("cp",),
        "a context-parallel group",
    ),
    NameRule(
        r"data_parallel|^dp(?:_[\d_]+)?$|^dp_cp$|^data$",
        ("dp", "fsdp"),
        "a data-parallel group (replicated or sharded)",
    ),
    NameRule(r"^ddp$", ("dp",), "a data-parallel group"),
    NameRule(r"tensor|^tp(?:_[\d_]+)?$|^mp$", ("tp",), "a tensor-parallel group"),
    NameRule(r"pipeline|^pp(?:_[\d_]+)?$|^stage", ("pp",), "a pipeline-parallel group"),
    NameRule(r"embedding", ("pp",), "the tied-embedding group of the first and last pipeline stages"),
)
"""Name rules, first match wins (module docstring)."""


def normalised(description: str) -> str:
    """The description as the rules read it: lower case, `mesh_` and `_gloo` removed, spaces to `_`."""
    text = re.sub(r"\s+", "_", description.strip().lower())
    return re.sub(r"_gloo$", "", re.sub(r"^mesh_", "", text))


def name_evidence(description: str | None) -> tuple[tuple[str, ...], str]:
    """(dimensions the name says, in words) of a group description; ((), "") without one. A generic
    data-parallel name says data parallelism, replicated or sharded: the collectives tell which."""
    if description is None or not description.strip():
        return (), ""
    text = normalised(description)
    rule = next((r for r in NAME_RULES if re.search(r.pattern, text)), None)
    if rule is None:
        return (), f"the name {description!r} matches no dimension"
    return rule.dimensions, f"the name {description!r} is {rule.says}"


def name_column(descriptions: pl.Series) -> pl.DataFrame:
    """`desc`, `name_dimension` (one row per dimension it says; null when none) and `name_says`, for each
    distinct description (one lookup per distinct name)."""
    rows = [
        (desc, dimension, says)
        for desc in descriptions.drop_nulls().unique().sort().to_list()
        for dimensions, says in [name_evidence(desc)]
        for dimension in (dimensions or (None,))
    ]
    schema = {"desc": pl.Utf8, "name_dimension": pl.Utf8, "name_says": pl.Utf8}
    return pl.DataFrame(rows, schema=schema, orient="row")
