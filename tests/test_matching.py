"""Matching collective instances across ranks (traceview.across_ranks.matching), on frames built by
tests/crossrank_factory."""

from __future__ import annotations

import polars as pl

from tests.crossrank_factory import comm, kernels, windows
from traceview.across_ranks.alignment import align_one
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
    """Ranks 0 and 2 make four calls, rank 1 skips the second: missing on rank 1 at seq 1, the
    rest aligned."""
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
    """Two ranks, 4 calls against 3: the tie goes to the smaller count, so the extra is on the
    rank with more."""
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
    """No process group (`comm_kernels` writes `unknown`): the stream is the group. A Send/Recv pair and an
    uneven AllToAll (input and output of different sizes, so the members' bytes differ) still match."""
    rows = [comm(0, 0, 5, pg="unknown", ranks=None, collective="Send", size=10, stream=3)]
    rows += [comm(1, 1, 5, pg=None, ranks=None, collective="Recv", size=10, stream=3)]
    rows += [
        comm(r, 10, 20, pg="unknown", ranks=None, collective="AllToAll", size=100 + r, out=101 - r, stream=9)
        for r in (0, 1)
    ]
    result = match_instances(kernels(rows), ONE_STEP, [0, 1])
    assert result.mismatches.height == 0
    assert result.instances.select("group", "collective", "consistent").rows() == [
        ("stream 3", "SendRecv", True),
        ("stream 9", "AllToAll", True),
    ]


def _pairs(result: object, first: int = 0, second: int = 1) -> list[tuple[float, float]]:
    """(start on `first`, start on `second`) of every instance both placed a call in."""
    calls = result.calls  # type: ignore[attr-defined]
    a = calls.filter(pl.col("rank") == first).select("instance", pl.col("start_us").alias("a"))
    b = calls.filter(pl.col("rank") == second).select("instance", pl.col("start_us").alias("b"))
    return a.join(b, on="instance").sort("a").select("a", "b").rows()


def test_alltoall_calls_of_different_sizes_never_pair() -> None:
    """Two ranks without process groups (one stream), each trace missing calls the other holds (a sampled
    trace): rank 0 has AllToAll int64 3072 B (even), AllToAll uint8 (uneven: in 400, out 380), AllReduce 78,
    AllReduce 107; rank 1 has AllToAll uint8 (in 340, out 380), AllToAll int32 (uneven), AllReduce 78,
    AllReduce 105. Paired by position, the first two positions join an int64 AllToAll with a uint8 one and a
    uint8 with an int32. The right pairing: the uint8 AllToAlls (rank 0's second call, rank 1's first) and the
    78-byte AllReduces; the 107/105-byte AllReduces at one place differ; the int64 and int32 AllToAlls have
    no partner."""
    a2a = {"pg": "unknown", "ranks": None, "collective": "AllToAll"}
    rows = [
        comm(0, 0, 10, size=3072, dtype="int64", **a2a),  # type: ignore[arg-type]
        comm(0, 20, 40, size=400, out=380, dtype="uint8", **a2a),  # type: ignore[arg-type]
        comm(0, 50, 60, pg="unknown", ranks=None, size=78, dtype="float32"),
        comm(0, 70, 80, pg="unknown", ranks=None, size=107, dtype="float32"),
        comm(1, 25, 40, size=340, out=380, dtype="uint8", **a2a),  # type: ignore[arg-type]
        comm(1, 42, 48, size=11, out=10, dtype="int32", **a2a),  # type: ignore[arg-type]
        comm(1, 55, 60, pg="unknown", ranks=None, size=78, dtype="float32"),
        comm(1, 90, 95, pg="unknown", ranks=None, size=105, dtype="float32"),
    ]
    result = match_instances(kernels(rows), ONE_STEP, [0, 1])
    assert _pairs(result) == [(20.0, 25.0), (50.0, 55.0), (70.0, 90.0)]
    found = result.mismatches.select("position", "rank", "kind").rows()
    assert found == [(0, 1, "missing"), (2, 1, "unmatched"), (3, 1, "different")]
    usable = result.instances.filter(pl.col("consistent")).select("collective", "dtype").rows()
    assert usable == [("AllToAll", "uint8"), ("AllReduce", "float32")]


def test_even_alltoall_sizes_are_part_of_the_signature() -> None:
    """Even AllToAlls (input = output) of 1024 and 4096 bytes, issued in swapped order by rank 1 (a real
    mismatch: NCCL would pair them by order). Aligned by signature, rank 1's 1024-byte call pairs with rank
    0's and its 4096-byte call is left over; which of the two crossed calls is the odd one is not known, so
    both keys are flagged and neither instance is usable."""
    rows = [
        comm(0, 0, 10, collective="AllToAll", size=1024),
        comm(0, 20, 30, collective="AllToAll", size=4096),
    ]
    rows += [
        comm(1, 0, 10, collective="AllToAll", size=4096),
        comm(1, 20, 30, collective="AllToAll", size=1024),
    ]
    result = match_instances(kernels(rows), ONE_STEP, [0, 1])
    assert result.instances.get_column("consistent").to_list() == [False, False]
    assert result.mismatches.select("position", "rank", "kind").rows() == [
        (0, 1, "unmatched"),
        (1, 1, "missing"),
    ]
    assert _pairs(result) == [(0.0, 20.0)]


def test_unknown_group_falls_back_to_each_stream() -> None:
    """No process group (`unknown`), two communicators on streams 3 and 9 whose kernels interleave in another
    order on each rank: one group per stream, each matched in its own order."""
    rows = [
        comm(0, 0, 10, pg="unknown", size=100, stream=3),
        comm(0, 5, 15, pg="unknown", size=200, stream=9),
    ]
    rows += [
        comm(1, 6, 10, pg="unknown", size=100, stream=3),
        comm(1, 2, 15, pg="unknown", size=200, stream=9),
    ]
    result = match_instances(kernels(rows), ONE_STEP, [0, 1])
    assert result.mismatches.height == 0
    assert result.instances.select("group", "size_bytes", "consistent").rows() == [
        ("stream 3", 100, True),
        ("stream 9", 200, True),
    ]


def test_calls_outside_the_step_windows_are_not_matched() -> None:
    """Windows (1: 0..100) and (2: 200..300). Rank 0 also runs a call at 150 (after step 1 ended) and one at
    350 (after the last window): they belong to no step, are counted, and no mismatch is invented."""
    steps = windows([0, 1], [(1, 0.0, 100.0), (2, 200.0, 300.0)])
    rows = [comm(r, t + r, t + 20) for r in (0, 1) for t in (10.0, 210.0)]
    rows += [comm(0, 150, 160), comm(0, 350, 360)]
    result = match_instances(kernels(rows), steps, [0, 1])
    assert result.mismatches.height == 0
    assert result.instances.select("step", "matched", "consistent").rows() == [(1, 2, True), (2, 2, True)]
    assert result.outside.rows() == [(0, "pg0", 2)]


def test_different_dtype_at_a_position_is_a_mismatch() -> None:
    rows = [comm(0, 0, 10, dtype="bfloat16"), comm(1, 0, 10, dtype="float32")]
    result = match_instances(kernels(rows), ONE_STEP, [0, 1])
    assert result.mismatches.select("rank", "kind").rows() == [(1, "different")]
    assert "float32 where peers have AllReduce 1024 B bfloat16" in result.mismatches.item(0, "detail")


def test_alignment_by_longest_common_subsequence() -> None:
    """align_one on signatures (collective, size, dtype codes): the common calls keep their order, one
    leftover on each side between them pairs as a different call, a null size matches any."""
    a, b, c, d = (1, 10, 0), (1, 20, 0), (2, -1, 0), (3, 5, 0)
    pairs, ambiguous = align_one([b, c, (1, 99, 0), d], [a, b, (2, 7, 0), (1, 30, 0), d], more_calls=False)
    assert pairs == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert ambiguous == []
    pairs, ambiguous = align_one([a, a, a], [a, a], more_calls=True)  # which copy is extra is not known
    assert pairs == [(1, 0), (2, 1)]
    assert ambiguous == [0, 1]


def test_calls_missing_at_the_end_of_a_ranks_recording_are_a_cut_not_a_mismatch() -> None:
    """Three ranks, two steps of two calls; rank 1's trace lacks the second call of each step. In step 2, its
    last recorded step, the call comes after its last placed call there: the end of its recording cut it (left
    out of the mismatches, its instance still unusable). In step 1 the same absence is a mismatch."""
    group = "[0, 1, 2]"
    steps = windows([0, 1, 2], [(1, 0.0, 1000.0), (2, 1000.0, 2000.0)])
    starts = [100.0, 500.0, 1100.0, 1500.0]
    rows = [
        comm(r, start, start + 10, ranks=group, size=100 * (i % 2 + 1))
        for r in (0, 2)
        for i, start in enumerate(starts)
    ]
    rows += [comm(1, start, start + 10, ranks=group, size=100) for start in starts[::2]]
    result = match_instances(kernels(rows), steps, [0, 1, 2])
    assert result.mismatches.select("step", "position", "rank", "kind").rows() == [(1, 1, 1, "missing")]
    assert result.cut.select("step", "position", "rank", "kind").rows() == [(2, 1, 1, "missing")]
    assert result.instances.get_column("consistent").to_list() == [True, False, True, False]


def test_a_rank_that_holds_its_last_calls_out_of_order_is_not_cut() -> None:
    """Rank 1 holds both calls of its last step, in swapped order: one is unplaced, so the missing position
    is a disagreement, never a recording cut."""
    rows = [comm(0, 0, 10, size=1024), comm(0, 20, 30, size=4096)]
    rows += [comm(1, 0, 10, size=4096), comm(1, 20, 30, size=1024)]
    result = match_instances(kernels(rows), ONE_STEP, [0, 1])
    assert result.cut.height == 0
    assert result.mismatches.get_column("kind").to_list() == ["unmatched", "missing"]
