"""The rules behind the dimensions analysis, each against what it must say: framework group names
(torchtitan's DeviceMesh dims as PyTorch describes them, `mesh_<dim>`; Megatron-LM's `group_desc` strings),
the stated layout (the seeds' 3D process groups), the options and `run.json`, gloo's worker pools, a real
trace that names
no group (honestly unknown, with the evidence seen), and `compare`'s gate on one dimension."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.shared_data import REAL_KINETO, requires_shared
from tests.simulate.parallel import mesh_3d, write_planted
from traceview.api import analyze
from traceview.core.errors import UsageError
from traceview.dimensions.gloo_groups import with_gloo_groups
from traceview.dimensions.names import name_evidence
from traceview.events.gloo_pools import pool_ordinals
from traceview.options.parallel import layout_groups, parse_layout, parse_shape
from traceview.options.run import build_options
from traceview.options.user import UserOptions

NAMES = {
    # torchtitan's mesh dims (PyTorch describes a DeviceMesh dim's group as mesh_<dim>)
    "mesh_tp": ("tp",),
    "mesh_pp": ("pp",),
    "mesh_cp": ("cp",),
    "mesh_ep": ("ep",),
    "mesh_etp": ("tp",),
    "mesh_dp_replicate": ("dp",),
    "mesh_dp_shard": ("fsdp",),
    "mesh_dp_shard_cp": ("fsdp",),
    "mesh_dp_shard_mod_ep": ("fsdp",),
    "mesh_dp": ("dp", "fsdp"),
    "mesh_dp_cp": ("dp", "fsdp"),
    # Megatron-LM parallel_state group_desc strings
    "TENSOR_MODEL_PARALLEL_GROUP": ("tp",),
    "PIPELINE_MODEL_PARALLEL_GROUP": ("pp",),
    "DATA_PARALLEL_GROUP": ("dp", "fsdp"),
    "DATA_PARALLEL_GROUP_GLOO": ("dp", "fsdp"),
    "DATA_PARALLEL_GROUP_WITH_CP": ("dp", "fsdp"),
    "CONTEXT_PARALLEL_GROUP": ("cp",),
    "EXPERT_MODEL_PARALLEL_GROUP": ("ep",),
    "EXPERT_TENSOR_PARALLEL_GROUP": ("tp",),
    "EXPERT_DATA_PARALLEL_GROUP": ("dp", "fsdp"),
    "EMBEDDING_GROUP": ("pp",),
    # names that say nothing: several dimensions at once, PyTorch's defaults, numbers
    "TENSOR_AND_DATA_PARALLEL_GROUP": (),
    "TENSOR_AND_CONTEXT_PARALLEL_GROUP": (),
    "MODEL_PARALLEL_GROUP": (),
    "EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP": (),
    "default_pg": (),
    "undefined": (),
    "17": (),
}


@pytest.mark.parametrize(("name", "dimensions"), list(NAMES.items()))
def test_framework_names(name: str, dimensions: tuple[str, ...]) -> None:
    assert name_evidence(name)[0] == dimensions


def test_the_seeds_3d_layout() -> None:
    # docs 11.2: TP=2, PP=2, DP=2 on 8 GPUs, rank = dp * (tp * pp) + pp * tp + tp
    groups = layout_groups(parse_layout("tp=2,pp=2,dp=*"), 8)
    assert groups == {
        "tp": [(0, 1), (2, 3), (4, 5), (6, 7)],
        "pp": [(0, 2), (1, 3), (4, 6), (5, 7)],
        "dp": [(0, 4), (1, 5), (2, 6), (3, 7)],
    }
    assert layout_groups(parse_layout("tp=3,dp=*"), 8) == "--dims tp=3,dp=* does not divide the world size 8"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tp=8,xx=2", "unknown dimension 'xx'"),
        ("tp=8,dp=*,pp=*", "at most one dimension may be *"),
        ("tp=0", "tp=0 is not a size"),
        ("tp=8,tp=2", "named twice"),
        ("tp", "is not NAME=VALUE"),
    ],
)
def test_a_bad_layout_is_a_usage_error(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_layout(text)


def test_shape_and_layout_from_the_command_line_and_run_json(tmp_path: Path) -> None:
    assert parse_shape("h=4096,s=2048,layers=32,m=8,top_k=2") == {
        "hidden": 4096.0,
        "seq_len": 2048.0,
        "layers": 32.0,
        "micro_batches": 8.0,
        "top_k": 2.0,
    }
    with pytest.raises(UsageError, match="unknown key 'depth'"):
        parse_shape("depth=3")
    (tmp_path / "run.json").write_text(
        json.dumps(
            {
                "kind": "traceview-run",
                "schema_version": "1.0",
                "parallelism": "tp=2,dp=*",
                "model": {"hidden": 1024, "layers": 4},
            }
        ),
        encoding="utf-8",
    )
    options = build_options(tmp_path, UserOptions(shape="layers=8"))
    assert (options.layout.text(), options.layout.source) == ("tp=2,dp=*", "manifest")
    assert (options.shape.hidden, options.shape.source_of("hidden")) == (1024.0, "manifest")
    assert (options.shape.layers, options.shape.source_of("layers")) == (8.0, "command line")
    assert build_options(tmp_path, UserOptions(dims="pp=2,dp=*")).layout.text() == "pp=2,dp=*"
    with pytest.raises(UsageError, match="--links takes one of table, measured"):
        UserOptions(links="fitted")


def test_a_bad_dims_option_exits_2_naming_it() -> None:
    run = Path(__file__).resolve().parents[1] / "sample_traces" / "dp8_ideal"
    done = _traceview("summary", run, "--dims", "tp=8,zz=2", "-q")
    assert done.returncode == 2
    assert "--dims: unknown dimension 'zz'" in done.stderr


def _ops(rows: list[tuple[str, str, str]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema={"tid": pl.Utf8, "name": pl.Utf8, "input_dims": pl.Utf8}, orient="row")


def test_gloo_worker_pools() -> None:
    # group A's two workers share its all-reduce; group B's two ran one op each (its gathers and its
    # reduce-scatters: paired as lone threads); the calling thread (c10d ops, a send) is no worker
    ops = _ops(
        [
            ("10", "gloo:all_reduce", "[[544]]"),
            ("15", "gloo:all_reduce", "[[544]]"),
            ("20", "gloo:all_gather", "[[72]]"),
            ("23", "gloo:all_reduce", "[[144]]"),
            ("1", "gloo:send", "[[4, 32]]"),
            ("1", "c10d::send", "[[[4, 32]]]"),
        ]
    )
    pools = dict(pool_ordinals(ops.filter(pl.col("name").str.starts_with("gloo:")), ops).iter_rows())
    assert pools == {"10": 0, "15": 0, "20": 1, "23": 1}


def test_gloo_worker_pools_in_creation_order_when_thread_ids_wrap() -> None:
    # an all-to-all group's two workers (its dispatch on one, its combine on the other) created after the
    # all-reduce group's; the kernel's ids wrapped (pid_max) between the two: the second has a small id
    def pools(second_worker: str) -> dict[str, int]:
        rows = [
            ("8617", "gloo:all_reduce", "[[1072]]"),
            ("8618", "gloo:all_reduce", "[[1072]]"),
            ("8631", "gloo:all_to_all", "[[8, 8]]"),
            (second_worker, "gloo:all_to_all", "[[4, 8]]"),
            ("8477", "c10d::alltoall_base_", "[[8, 8]]"),
        ]
        ops = _ops(rows).with_columns(pid=pl.lit("8477"))
        return dict(pool_ordinals(ops.filter(pl.col("name").str.starts_with("gloo:")), ops).iter_rows())

    assert pools("8632") == {"8617": 0, "8618": 0, "8631": 1, "8632": 1}
    assert pools("300") == {"8617": 0, "8618": 0, "8631": 1, "300": 1}


def _p2p(rank: int, collective: str, end_us: float) -> dict[str, object]:
    return {"rank": rank, "group": "stream 0", "pg_key": "unknown", "collective": collective} | {
        "size_bytes": 512,
        "end_us": end_us,
        "stream": 0,
        "pg_desc": None,
        "pg_ranks": None,
        "group_size": None,
    }


def test_gloo_sends_of_two_lockstep_pipelines_find_their_own_group() -> None:
    # pipelines [0, 1] and [2, 3] on one gloo stream, in lockstep: rank 0 sends to 1 and rank 2 to 3 at
    # about 100 and 200 us; rank 2's first send ends nearest rank 1's receive, its second nearest rank 3's:
    # a tie its lowest peer (1) would win, putting rank 2 in the default group, but rank 1's own group
    # ([0, 1], from its commonest peer 0) leaves rank 2 out, and rank 3's holds it
    sends = [_p2p(0, "Send", 100.0), _p2p(0, "Send", 200.0), _p2p(2, "Send", 101.0), _p2p(2, "Send", 203.5)]
    recvs = [_p2p(1, "Recv", 100.8), _p2p(1, "Recv", 200.8), _p2p(3, "Recv", 103.0), _p2p(3, "Recv", 204.0)]
    config = pl.DataFrame(
        [
            (rank, name, desc, ranks, size, order)
            for rank in range(4)
            for name, desc, ranks, size, order in (
                ("0", "default_pg", "[0, 1, 2, 3]", 4, 0),
                ("3" if rank < 2 else "4", "mesh_pp", "[0, 1]" if rank < 2 else "[2, 3]", 2, 1),
            )
        ],
        schema=["rank", "cfg_name", "cfg_desc", "cfg_ranks", "cfg_size", "cfg_order"],
        orient="row",
    )
    filled = with_gloo_groups(pl.DataFrame(sends + recvs), config)
    found = dict(filled.select("rank", "pg_ranks").unique().iter_rows())
    assert found == {0: "[0, 1]", 1: "[0, 1]", 2: "[2, 3]", 3: "[2, 3]"}


@requires_shared
def test_a_trace_that_names_no_group_gets_a_dp_line_for_its_gradient_all_reduce() -> None:
    folder = REAL_KINETO / "hta_16rank_job_rank0"
    analysis = analyze(folder, workers=1).raw
    assert analysis.dimensions is not None
    groups, lines = analysis.dimensions.groups, analysis.dimensions.lines
    # rank 0 of a 16-rank TorchRec job: no process group names, no rank lists, one rank. Stream 84 carries
    # the DDP all-reduce (two per step: 366,336 floats = 1,465,344 B, and 1,791,693,584 B, both launched
    # after the step's first autograd op: gradients) and the sparse all-to-alls (launched in the forward)
    assert groups.get_column("group").to_list() == ["stream 285", "stream 363", "stream 84"]
    by_line = {
        (g, k): (d, b) for g, k, d, b in lines.select("group", "kind", "dimension", "best").iter_rows()
    }
    assert by_line[("stream 84", "ar")] == ("dp", "dp")
    assert by_line[("stream 84", "a2a")] == ("unknown", "ep")
    assert by_line[("stream 285", "agrs")] == ("unknown", "fsdp")
    assert by_line[("stream 363", "a2a")] == ("unknown", "ep")
    ar = lines.filter((pl.col("group") == "stream 84") & (pl.col("kind") == "ar")).row(0, named=True)
    assert ar["size_spread"] == pytest.approx(1_791_693_584 / 1_465_344)
    assert any("DDP's gradient buckets" in e for e in ar["evidence"])
    evidence = dict(groups.select("group", "evidence").iter_rows())
    assert any("all-gather and reduce-scatter of sizes spread" in e for e in evidence["stream 285"])
    # the group's row is its dominant line: the all-reduce's time outweighs its all-to-alls' and sends'
    assert dict(groups.select("group", "dimension").iter_rows()) == {
        "stream 285": "unknown",
        "stream 363": "unknown",
        "stream 84": "dp",
    }
    assert analysis.verdict.label != "dimension-bound"


def _traceview(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "traceview", *map(str, args)], capture_output=True, text=True, check=False
    )


def test_compare_gates_on_one_dimension(tmp_path: Path) -> None:
    base, _ = write_planted(mesh_3d(), tmp_path / "base")
    slow, _ = write_planted(mesh_3d(tp_link=(2e-6, 0.5e9)), tmp_path / "slow")
    for run, name in ((base, "base"), (slow, "slow")):
        analyze(run, workers=1).to_json(tmp_path / f"{name}.json")
    gate = ("--fail-on", "tp_comm_us_change_pct>20")
    done = _traceview("compare", tmp_path / "base.json", tmp_path / "slow.json", "--json", *gate)
    assert done.returncode == 1, done.stderr
    findings = json.loads(done.stdout)["compared"]
    tp = next(f for f in findings if f["subject"] == "dimension tp" and f["metric"] == "comm_us")
    assert tp["family"] == "dimension"
    assert tp["change_pct"] > 20
    kept = _traceview("compare", tmp_path / "base.json", tmp_path / "base.json", *gate)
    assert kept.returncode == 0, kept.stderr
