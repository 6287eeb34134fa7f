"""Matching collective instances across ranks (traceview.across_ranks.matching), on frames built by tests/crossrank_factory."""

from __future__ import annotations

import polars as pl

from tests.crossrank_factory import comm, kernels, windows
from traceview.across_ranks.matching import KERNEL_COLUMNS, match_instances

ONE_STEP = windows([0, 1], [(7, -100.0, 1000.0)])


def _keyed(calls: pl.DataFrame, rank: int) -> list[tuple[int, float]]:
    return calls.filter(pl.col("rank") == rank).sort("seq").select("seq", "start_us").rows()


def test_factory_matches_the_contract() -> None:
    assert tuple(kernels([comm(0, 0, 1)]).columns) == KERNEL_COLUMNS


def test_equal_sequences_match_by_ordinal() -> None:
    rows = [comm(rank, 100 * i + rank, 100 * i + 10, size=100 * (i + 1)) for rank in (0, 1) for i in range(3)]
    result = match_instances(kernels(rows), ONE_STEP, [0, 1])
    assert result.instances.height == 3
    assert result.instances.get_column("consistent").to_list() == [True, True, True]
    assert result.mismatches.height == 0
    assert _keyed(result.calls, 1) == [(0, 1.0), (1, 101.0), (2, 201.0)]


def test_extra_call_is_reported_and_later_calls_resynchronise() -> None:
    """Rank 1 issues a copy of the second collective just before it: one extra at seq 1, then back in step."""
    sizes = [100, 200, 300, 400]
    rows = [comm(0, 100 * i, 100 * i + 10, size=s) for i, s in enumerate(sizes)]
    rows += [comm(1, 100 * i + 1, 100 * i + 10, size=s) for i, s in enumerate(sizes)]
    rows.append(comm(1, 95, 98, size=200))  # the extra copy, before the real 200-byte call at 101
    result = match_instances(kernels(rows), ONE_STEP, [0, 1])
    assert result.mismatches.select("rank", "seq", "kind").rows() == [(1, 1, "extra")]
    assert _keyed(result.calls, 1) == [(0, 1.0), (1, 101.0), (2, 201.0), (3, 301.0)]
    assert result.instances.get_column("consistent").to_list() == [True, False, True, True]


def test_missing_call_is_reported_and_later_calls_resynchronise() -> None:
    """Ranks 0 and 2 make four calls, rank 1 skips the second: missing on rank 1 at seq 1, the rest aligned."""
    sizes = [100, 200, 300, 400]
    rows = [
        comm(r, 100 * i + r, 100 * i + 10, ranks="[0, 1, 2]", size=s)
        for r in (0, 2)
        for i, s in enumerate(sizes)
    ]
    rows += [
        comm(1, 100 * i + 1, 100 * i + 10, ranks="[0, 1, 2]", size=s) for i, s in enumerate(sizes) if i != 1
    ]
    result = match_instances(kernels(rows), windows([0, 1, 2], [(7, -1.0, 999.0)]), [0, 1, 2])
    assert result.mismatches.select("rank", "seq", "kind").rows() == [(1, 1, "missing")]
    assert _keyed(result.calls, 1) == [(0, 1.0), (2, 201.0), (3, 301.0)]
    assert result.instances.select("matched", "consistent").rows() == [
        (3, True),
        (2, False),
        (3, True),
        (3, True),
    ]


def test_two_ranks_with_different_counts_report_an_extra_call() -> None:
    """Two ranks, 4 calls against 3: the tie goes to the smaller count, so the extra is on the rank with more."""
    sizes = [100, 200, 300, 400]
    rows = [comm(0, 100 * i, 100 * i + 10, size=s) for i, s in enumerate(sizes)]
    rows += [comm(1, 100 * i + 1, 100 * i + 10, size=s) for i, s in enumerate(sizes) if i != 1]
    result = match_instances(kernels(rows), ONE_STEP, [0, 1])
    assert result.mismatches.select("rank", "seq", "kind").rows() == [(0, 1, "extra")]
    assert result.instances.get_column("size_bytes").to_list() == [100, 300, 400]


def test_different_bytes_at_a_key() -> None:
    rows = [comm(r, 0, 10, size=100) for r in (0, 1)] + [comm(0, 20, 30, size=200), comm(1, 20, 30, size=400)]
    rows += [comm(r, 40, 50, size=300) for r in (0, 1)]
    third = comm(2, 0, 10, size=100), comm(2, 20, 30, size=200), comm(2, 40, 50, size=300)
    frame = kernels([*rows, *[{**row, "pg_ranks": "[0, 1, 2]"} for row in third]])
    result = match_instances(
        frame.with_columns(pl.lit("[0, 1, 2]").alias("pg_ranks")),
        windows([0, 1, 2], [(7, -1, 99)]),
        [0, 1, 2],
    )
    assert result.mismatches.select("rank", "seq", "kind").rows() == [(1, 1, "different")]
    assert result.instances.get_column("consistent").to_list() == [True, False, True]


def test_absent_members_are_listed_not_missing() -> None:
    """A 4-rank group with 2 traces: instances match on the 2 present, 2 and 3 are absent."""
    rows = [comm(r, i * 50, i * 50 + 5, ranks="[0, 1, 2, 3]", size=64) for r in (0, 1) for i in range(2)]
    result = match_instances(kernels(rows), ONE_STEP, [0, 1])
    assert result.mismatches.height == 0
    assert result.instances.select("expected", "matched", "consistent").rows() == [(2, 2, True)] * 2
    group = result.groups.row(0, named=True)
    assert (group["members"], group["present"], group["absent"]) == (4, 2, [2, 3])


def test_trace_seq_is_the_key_and_multi_kernel_calls_collapse() -> None:
    """Seq 40 launches two kernels on rank 0: one call from 0 to 30; reported seqs are the trace's."""
    rows = [comm(0, 0, 10, seq=40), comm(0, 12, 30, seq=40), comm(1, 5, 30, seq=40)]
    rows += [comm(r, 50, 60, seq=41) for r in (0, 1)]
    result = match_instances(kernels(rows), ONE_STEP, [0, 1])
    assert result.instances.get_column("seq").to_list() == [40, 41]
    first = result.calls.filter((pl.col("seq") == 40) & (pl.col("rank") == 0)).row(0, named=True)
    assert (first["start_us"], first["end_us"], first["kernels"]) == (0.0, 30.0, 2)


def test_mismatch_in_one_step_leaves_the_next_step_aligned() -> None:
    """Rank 0 makes a third identical call in step 1: the extra cannot be placed by signature, so both keys of
    step 1 are flagged and the note names the range; step 2 starts afresh."""
    steps = windows([0, 1], [(1, 0.0, 1000.0), (2, 1000.0, 2000.0)])
    rows = [
        comm(r, s * 1000 + i * 100 + r, s * 1000 + i * 100 + 50)
        for r in (0, 1)
        for s in (0, 1)
        for i in range(2)
    ]
    rows.append(comm(0, 300, 350))
    result = match_instances(kernels(rows), steps, [0, 1])
    assert result.mismatches.select("rank", "step", "kind").rows() == [(0, 1, "extra")]
    assert "anywhere in seq 0..2" in result.mismatches.item(0, "detail")
    assert result.instances.select("step", "seq", "consistent").rows() == [
        (1, 0, False),
        (1, 1, False),
        (2, 2, True),
        (2, 3, True),
    ]


def test_groups_fall_back_to_streams_and_paired_sendrecv_sizes() -> None:
    """No process group: the stream is the group. A Send/Recv pair and uneven AllToAll bytes still match."""
    rows = [comm(0, 0, 5, pg=None, ranks=None, collective="Send", size=10, stream=3)]
    rows += [comm(1, 1, 5, pg=None, ranks=None, collective="Recv", size=10, stream=3)]
    rows += [
        comm(r, 10, 20, pg=None, ranks=None, collective="AllToAll", size=100 + r, stream=9) for r in (0, 1)
    ]
    result = match_instances(kernels(rows), ONE_STEP, [0, 1])
    assert result.mismatches.height == 0
    assert result.instances.select("group", "collective", "consistent").rows() == [
        ("stream 3", "SendRecv", True),
        ("stream 9", "AllToAll", True),
    ]
