"""The Kineto parser on factory traces: schema, time base, ranks, truncation, gzip, and refusing other
formats."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from traceview.parsers import kineto

from tests import kineto_factory as kf
from tests.shared_data import requires_shared
from traceview.core.errors import InputError, NotKinetoError, RunError
from traceview.load.inputs import load_run, resolve_trace_files

REAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "real"
NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"


def sample_events() -> list[kf.Event]:
    return [
        kf.step(7, 100, 900),
        kf.launch(110, correlation=1),
        kf.kernel("gemm", 200.5, 50.25, correlation=1),
        kf.cpu_op(
            "record_param_comms",
            300,
            20,
            args={
                "Collective name": "allreduce",
                "In msg nelems": 1024,
                "dtype": "Float",
                "Process Group Name": "0",
                "Process Group Ranks": [0, 1],
                "Seq": 4,
            },
        ),
        kf.launch(305, correlation=2),
        kf.kernel(NCCL, 400, 100, correlation=2, stream=20),
        kf.memcpy(600, 10),
    ]


def test_frames_hold_what_the_trace_says(tmp_path: Path) -> None:
    trace = kineto.parse(
        kf.write(
            kf.document(sample_events(), rank=3, world_size=8, base_ns=1_700_000_000_000_000_000),
            tmp_path / "t.json",
        )
    )
    assert (trace.rank, trace.meta.rank_source, trace.meta.world_size) == (3, "distributedInfo", 8)
    assert trace.meta.base_time_ns == 1_700_000_000_000_000_000
    assert trace.gpu.get_column("kind").to_list() == ["kernel", "kernel", "memcpy"]
    gemm = trace.gpu.row(0, named=True)
    assert (gemm["start_us"], gemm["end_us"], gemm["correlation"]) == (200.5, 200.5 + 50.25, 1)
    call = trace.cpu.filter(trace.cpu["name"] == "record_param_comms").row(0, named=True)
    assert (call["collective_name"], call["in_nelems"], call["pg_ranks"], call["seq"]) == (
        "allreduce",
        1024,
        "[0, 1]",
        4,
    )
    assert trace.steps.rows() == [(7, 100.0, 1000.0, "cpu")]
    assert trace.step_source == "cpu"


@pytest.mark.parametrize(
    ("name", "rank"), [("rank-3.pt.trace.json", 3), ("worker12.pt.trace.json.gz", 12), ("job_rank_5.json", 5)]
)
def test_rank_from_file_name(tmp_path: Path, name: str, rank: int) -> None:
    trace = kineto.parse(kf.write(kf.document(sample_events(), rank=None), tmp_path / name))
    assert (trace.rank, trace.meta.rank_source) == (rank, "file name")


def test_two_files_without_ranks_are_refused(tmp_path: Path) -> None:
    for name in ("a.json", "b.json"):
        kf.write(kf.document(sample_events(), rank=None), tmp_path / name)
    with pytest.raises(RunError, match="no rank"):
        load_run(tmp_path)


def test_two_files_claiming_one_rank_keep_the_first_and_name_both(tmp_path: Path) -> None:
    for name in ("rank0.json", "rank1.json"):
        kf.write(kf.document(sample_events(), rank=0), tmp_path / name)
    run = load_run(tmp_path)
    assert [trace.path for trace in run] == [str(tmp_path / "rank0.json")]
    assert [(s.path, s.reason) for s in run.skipped] == [
        (
            str(tmp_path / "rank1.json"),
            f"rank 0 is also claimed by {tmp_path / 'rank0.json'}; that file was kept",
        )
    ]


@pytest.mark.parametrize("workers", [1, 2])
def test_folder_glob_and_parallel_parse_agree(tmp_path: Path, workers: int) -> None:
    for rank in range(3):
        kf.write(kf.document(sample_events(), rank=rank, world_size=3), tmp_path / f"rank{rank}.json.gz")
    run = load_run(tmp_path, workers=workers)
    assert run.rank_ids == [0, 1, 2]
    assert [t.gpu.height for t in run] == [3, 3, 3]
    assert [p.name for p in resolve_trace_files(str(tmp_path / "rank[01].json.gz"))] == [
        "rank0.json.gz",
        "rank1.json.gz",
    ]


def test_a_bad_file_is_skipped_and_listed(tmp_path: Path) -> None:
    kf.write(kf.document(sample_events(), rank=0), tmp_path / "rank0.json")
    (tmp_path / "rank1.json").write_text("not json at all")
    run = load_run(tmp_path)
    assert run.rank_ids == [0]
    assert [s.path for s in run.skipped] == [str(tmp_path / "rank1.json")]


def test_truncated_json_keeps_complete_events_and_says_where(tmp_path: Path) -> None:
    text = json.dumps(kf.document(sample_events()), indent=1)
    cut = (
        text.index('"ph": "X", "cat": "gpu_memcpy"')
        if '"ph": "X", "cat": "gpu_memcpy"' in text
        else text.index('"gpu_memcpy"')
    )
    path = tmp_path / "rank0.json"
    path.write_text(text[:cut])
    trace = kineto.parse(path)
    assert trace.gpu.get_column("kind").to_list() == ["kernel", "kernel"]  # the memcpy was cut
    assert trace.truncated_at_byte == cut
    assert f"truncated at byte {cut}" in str(trace.warnings[0])


def test_truncated_gzip_is_read_as_far_as_it_goes(tmp_path: Path) -> None:
    events = [kf.kernel(f"k{i}", 1000 + 10 * i, 5) for i in range(3000)]
    data = gzip.compress(json.dumps(kf.document(events)).encode())
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(data[: len(data) // 2])
    trace = kineto.parse(path)
    assert 0 < trace.gpu.height < 3000
    names = trace.gpu.get_column("name").to_list()
    assert names == [f"k{i}" for i in range(len(names))]  # a prefix, in order, nothing invented
    assert any("gzip stream ends early" in str(w) for w in trace.warnings)


def test_pytorch_18_bare_event_array(tmp_path: Path) -> None:
    events = [
        {
            "ph": "X",
            "cat": "Kernel",
            "name": "k",
            "pid": 0,
            "tid": "stream 7",
            "ts": 10,
            "dur": 5,
            "args": {"correlation": 3, "external id": 9},
        }
    ]
    trace = kineto.parse(kf.write(events, tmp_path / "worker0.pt.trace.json"))
    assert trace.gpu.select("kind", "correlation", "external_id").rows() == [("kernel", 3, 9)]


@requires_shared
@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("horovod_timeline_small.json", "Horovod"),
        ("ip-172-31-19-241.trace.json", "TensorFlow"),
        ("pytorch_execution_trace.json.gz", "Execution Trace"),
        ("memory_timeline.raw.gz", "memory timeline"),
    ],
)
def test_real_files_of_other_formats_get_one_line_naming_them(name: str, says: str) -> None:
    path = REAL / "not_kineto" / name
    with pytest.raises(NotKinetoError) as caught:
        kineto.parse(path)
    message = str(caught.value)
    assert message.startswith(str(path))
    assert says in message
    assert "\n" not in message


def test_an_nccl_log_passed_as_a_trace(tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    path.write_text("host:1:1 [0] NCCL INFO NCCL version 2.18.1+cuda12.1\n")
    with pytest.raises(NotKinetoError, match="NCCL_DEBUG log"):
        kineto.parse(path)


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        kineto.parse(tmp_path / "missing.json")


def test_events_across_decoding_batches_are_all_kept(tmp_path: Path) -> None:
    """More events than one decoding batch, with odd events (an unknown phase, a kernel without `dur`, a
    numeric-string stream) in a later batch: every complete kernel is kept, in order, nothing else."""
    count = 25_000
    events: list[kf.Event] = [kf.kernel(f"k{i}", 10 * i, 5, correlation=i) for i in range(count)]
    events.insert(23_000, {"ph": "Z", "name": "from a future profiler", "ts": 1})
    events.insert(21_000, {"ph": "X", "cat": "kernel", "name": "no duration", "pid": 0, "tid": 7, "ts": 5})
    events[24_000]["args"]["stream"] = "9"  # k23998: two events were inserted before it
    trace = kineto.parse(kf.write(kf.document(events), tmp_path / "rank0.json"))
    assert trace.gpu.height == count
    assert trace.gpu.get_column("name").to_list() == [f"k{i}" for i in range(count)]
    assert trace.gpu.filter(trace.gpu["stream"] == 9).get_column("name").to_list() == ["k23998"]


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        # today's name on some ops, none on others
        ([{"Input Dims": [[2, 3]]}, {}, {"Input Dims": [[4]]}], ["[[2,3]]", None, "[[4]]"]),
        # PyTorch 1.x's name only
        ([{"Input dims": [[2, 3]]}, {}, {"Input dims": [[5, 6], []]}], ["[[2,3]]", None, "[[5,6],[]]"]),
        # both in one trace, today's name first where an op has both
        ([{"Input dims": [[1]]}, {"Input Dims": [[7]], "Input dims": [[8]]}, {}], ["[[1]]", "[[7]]", None]),
    ],
)
def test_input_shapes_under_either_name(
    tmp_path: Path, written: list[dict[str, object]], expected: list[str | None]
) -> None:
    events = [kf.cpu_op(f"aten::op{i}", 100 + 10 * i, 5, args=args) for i, args in enumerate(written)]
    trace = kineto.parse(kf.write(kf.document(events), tmp_path / "t.json"))
    ops = trace.cpu.filter(trace.cpu["kind"] == "op").sort("start_us")
    kept = ops.get_column("input_dims").to_list()
    assert [None if text is None else json.loads(text) for text in kept] == [
        None if text is None else json.loads(text) for text in expected
    ]
