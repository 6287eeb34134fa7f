"""NCCL Inspector's per-collective JSON output: read (format v4.0 only), joined to a factory trace by the
stated bridge (docs/metrics.md, "NCCL Inspector"). The records follow the format's documented examples
(tests/fixtures/nccl_inspector/); expected values are arithmetic on the factory's numbers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from traceview.parsers.nccl_inspector import read_inspector
from traceview.reports.json.summary import summary_document

from tests import kineto_factory as kf
from traceview.core.errors import InputError, UsageError
from traceview.load.inputs import load_run
from traceview.options.run import build_options
from traceview.options.user import UserOptions
from traceview.reduce.analysis import RunAnalysis, analyze

FIXTURES = Path(__file__).parent / "fixtures" / "nccl_inspector"
ELEMENTS = 1 << 20  # float32 elements of every AllReduce: S = 4 MiB
SIZE = ELEMENTS * 4


def test_the_documented_examples_are_read() -> None:
    frame = read_inspector(FIXTURES / "readme_example_v4.json")
    rows = frame.select("comm_id", "comm_rank", "n_ranks", "collective", "coll_sn", "msg_size_bytes").rows()
    assert rows == [
        ("0x7f8c496ae9f661", 2, 8, "AllReduce", 1407, 17179869184),
        ("0xe62dedaa97644a", 4, 8, "ReduceScatter", 1231, 2147483648),
    ]
    assert frame["busbw_Bps"].to_list() == pytest.approx([485.119099e9, 366.134533e9])
    assert frame["timing_source"].to_list() == [None, "kernel_gpu"]


def test_another_format_version_is_refused_in_one_line(tmp_path: Path) -> None:
    record = json.loads((FIXTURES / "readme_example_v4.json").read_text().split("\n}\n")[0] + "\n}")
    record["metadata"]["inspector_output_format_version"] = "v5.1"
    path = tmp_path / "inspector.log"
    path.write_text(json.dumps(record))
    with pytest.raises(InputError) as error:
        read_inspector(path)
    assert "'v5.1' is not read (only v4.0" in str(error.value)
    assert "\n" not in str(error.value)
    (tmp_path / "prom.txt").write_text('nccl_bus_bandwidth_gbs{version="v5.1"} 678.263\n')
    with pytest.raises(InputError):
        read_inspector(tmp_path / "prom.txt")


def _record(
    comm: str, rank: int, sn: int, exec_us: float, busbw_gbs: float, size: int = SIZE
) -> dict[str, Any]:
    """One record in the documented format (README "Output Example")."""
    return {
        "header": {"id": comm, "comm_name": "", "rank": rank, "n_ranks": 2, "nnodes": 1},
        "metadata": {
            "inspector_output_format_version": "v4.0",
            "git_rev": "",
            "rec_mechanism": "nccl_profiler_interface",
            "dump_timestamp_us": 1748030377748202,
            "hostname": "host",
            "pid": 100 + rank,
        },
        "coll_perf": {
            "coll": "AllReduce",
            "coll_sn": sn,
            "coll_msg_size_bytes": size,
            "coll_exec_time_us": exec_us,
            "coll_timing_source": "kernel_gpu",
            "coll_algobw_gbs": busbw_gbs,
            "coll_busbw_gbs": busbw_gbs,
        },
    }


def _trace(rank: int) -> dict[str, Any]:
    """Three AllReduce calls on the group [0, 1]: 4, 8 and 16 MiB (S x 1, 2, 4), of 100, 200, 400 us."""
    events: list[dict[str, Any]] = [kf.step(1, 0, 5000)]
    for i, (at, dur) in enumerate(((100, 100), (1000, 200), (2000, 400))):
        args = {
            "Collective name": "allreduce",
            "In msg nelems": ELEMENTS << i,
            "Out msg nelems": ELEMENTS << i,
            "Group size": 2,
            "dtype": "Float",
            "Process Group Name": "0",
            "Process Group Ranks": "[0, 1]",
        }
        events += [
            kf.cpu_op("record_param_comms", at - 50, 30, args=args),
            kf.launch(at - 40, i + 1),
            kf.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgs4K)", at, dur, i + 1, 20),
        ]
    return kf.document(events, rank=rank, world_size=2)


def _inspector_files(folder: Path, exec_us: tuple[float, ...], extra_comm: bool = False) -> None:
    """Per rank one file: calls 1-2 (4 MiB) before the traced window, then the three traced calls (coll_sn
    3-5: 4, 8, 16 MiB), then one of 4 MiB after: the traced run of sizes is found at one place only. busbw as
    NCCL computes it, S/t (n-1)/n x 2 for AllReduce. With `extra_comm`, a second communicator of the same
    size whose records fit the trace as well (the bridge cannot tell them apart)."""
    folder.mkdir()
    for rank in (0, 1):
        calls = ((50.0, SIZE), (50.0, SIZE), *((t, SIZE << i) for i, t in enumerate(exec_us)), (50.0, SIZE))
        records = [
            _record("0xabc", rank, sn, t, size / (t * 1e-6) * 2 * (2 - 1) / 2 / 1e9, size)
            for sn, (t, size) in enumerate(calls, start=1)
        ]
        if extra_comm:
            records += [
                _record(
                    "0xdef", rank, r["coll_perf"]["coll_sn"], 60.0, 1.0, r["coll_perf"]["coll_msg_size_bytes"]
                )
                for r in records
            ]
        (folder / f"host-pid{100 + rank}.log").write_text("\n".join(json.dumps(r) for r in records) + "\n")


def _analysed(tmp_path: Path, inspector: str) -> RunAnalysis:
    run = tmp_path / "run"
    run.mkdir()
    for rank in (0, 1):
        kf.write(_trace(rank), run / f"rank{rank}.json")
    return analyze(load_run(str(run)), build_options(run, UserOptions(inspector=(inspector,))))


def test_records_join_to_their_calls_and_disagreements_are_said(tmp_path: Path) -> None:
    _inspector_files(tmp_path / "insp", (100.0, 200.0, 800.0))  # the third call: twice the trace's time
    analysis = _analysed(tmp_path, str(tmp_path / "insp"))
    found = analysis.inspector
    assert found is not None
    assert (found.records, found.joined.height) == (2 * 6, 2 * 3)
    assert found.joined_share == pytest.approx(6 / 12)
    assert found.communicators["bridge"].to_list() == ["joined", "joined"]
    assert found.communicators["rank"].to_list() == [0, 1]
    joined = found.joined.filter(found.joined["rank"] == 0)
    assert joined["coll_sn"].to_list() == [3, 4, 5]
    assert joined["inspector_exec_time_us"].to_list() == [100.0, 200.0, 800.0]
    assert joined["trace_dur_us"].to_list() == [100.0, 200.0, 400.0]
    # busbw of an AllReduce, n = 2: S/t x 2 (n-1)/n = S/t
    trace_bw = [SIZE / 100e-6, 2 * SIZE / 200e-6, 4 * SIZE / 400e-6]
    assert joined["trace_busbw_Bps"].to_list() == pytest.approx(trace_bw)
    assert joined["inspector_busbw_Bps"].to_list() == pytest.approx(
        [*trace_bw[:2], 4 * SIZE / 800e-6], rel=1e-6
    )
    agree = found.comparison.select("size_bytes", "joined", "agrees").rows()
    assert agree == [(SIZE, 2, True), (2 * SIZE, 2, True), (4 * SIZE, 2, False)]  # 800 us against 400
    assert len(found.disagreements) == 1
    assert found.disagreements[0].startswith(f"AllReduce of {4 * SIZE} B: NCCL Inspector busbw")
    document = summary_document(analysis)
    assert document["nccl"]["inspector"]["joined"] == 6
    assert document["nccl"]["inspector"]["format_version"] == "v4.0"


def test_a_glob_names_the_files_and_agreeing_records_raise_nothing(tmp_path: Path) -> None:
    _inspector_files(tmp_path / "insp", (110.0, 190.0, 420.0))  # within 25% of the trace's times
    found = _analysed(tmp_path, str(tmp_path / "insp" / "*.log")).inspector
    assert found is not None
    assert len(found.files) == 2
    assert found.joined.height == 6
    assert found.disagreements == ()


def test_a_steady_run_of_one_size_is_ambiguous_by_order(tmp_path: Path) -> None:
    """Every call of one size: the traced calls fit the records at several places, so none is joined."""
    folder = tmp_path / "insp"
    folder.mkdir()
    for rank in (0, 1):
        lines = [json.dumps(_record("0xabc", rank, sn, 100.0, 40.0, 4 * SIZE)) for sn in range(1, 9)]
        (folder / f"r{rank}.log").write_text("\n".join(lines))
    found = _analysed(tmp_path, str(folder)).inspector
    assert found is not None
    assert found.joined.height == 0


def test_an_ambiguous_communicator_is_never_joined(tmp_path: Path) -> None:
    _inspector_files(tmp_path / "insp", (100.0, 200.0, 400.0), extra_comm=True)
    found = _analysed(tmp_path, str(tmp_path / "insp")).inspector
    assert found is not None
    # both communicators of each process fit the group [0, 1]: the group is claimed twice, nothing joins
    assert found.records == 2 * 12
    assert found.communicators["bridge"].to_list() == ["ambiguous"] * 4
    assert (found.joined.height, found.joined_share) == (0, 0.0)


def test_an_inspector_path_that_names_nothing_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--inspector"):
        build_options(tmp_path, UserOptions(inspector=(str(tmp_path / "none*.log"),)))


def test_run_json_lists_inspector_output(tmp_path: Path) -> None:
    from traceview.options.manifest import ManifestLog, RunManifest, write_manifest

    for rank in (0, 1):
        kf.write(_trace(rank), tmp_path / f"rank{rank}.json")
    _inspector_files(tmp_path / "insp", (100.0, 200.0, 400.0))
    listed = [ManifestLog(path=f"insp/host-pid{100 + rank}.log") for rank in (0, 1)]
    write_manifest(tmp_path / "run.json", RunManifest(nccl_inspector=listed))
    options = build_options(tmp_path)
    assert options.inspector_files == tuple(tmp_path / entry.path for entry in listed)
    found = analyze(load_run(str(tmp_path)), options).inspector
    assert found is not None
    assert found.joined.height == 6
