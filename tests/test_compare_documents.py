"""compare and trend on small summary documents written by hand: structure changes, partial runs, the
algorithm mix, thresholds, bad input and the HTML's escaping."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.test_cli import traceview
from traceview.compare.settings import load_settings
from traceview.compare.two_runs import compare

XSS = "<script>alert(1)</script>"


def document(
    step_us: float = 100.0,
    allreduce_us: float = 10.0,
    collectives: tuple[str, ...] = ("AllReduce",),
    **run: Any,
) -> dict[str, Any]:
    """A summary of 2 ranks x 6 steps: step/comp/comm per step with a +-1% spread, 24 kernels per
    collective."""
    spread = [0.99, 1.0, 1.01, 0.995, 1.005, 1.0]
    per_step = [
        {
            "rank": rank,
            "step": step,
            "window_start_us": 1000.0 * step,
            "step_us": step_us * f,
            "comp_us": 0.6 * step_us * f,
            "comm_us": 0.3 * step_us * f,
            "exposed_comm_us": 0.2 * step_us * f,
            "idle_us": 0.2 * step_us * f,
            "gamma": 0.5,
            "exposed_gamma": 0.2 / 0.6,
            "overlap_ratio": 1 / 3,
        }
        for rank in (0, 1)
        for step, f in enumerate(spread)
    ]
    kernels = [
        {
            "pg_key": "0",
            "collective": name,
            "size_bucket": "4 MiB - 64 MiB",
            "kernels": 24,
            "dur_us": [allreduce_us * f for f in spread * 4],
            "busbw_Bps": [1e9 / f for f in spread * 4],
        }
        for name in collectives
    ]
    return {
        "schema_version": "1.3",
        "run": {"source": "hand", "ranks": [0, 1], "world_size": 2, "skipped": [], **run},
        "time_budget": {"run_median": {"step_us": step_us}, "per_step": per_step},
        "distributions": {
            "collective_kernels": kernels,
            "algorithms": [
                {
                    "collective": "AllReduce",
                    "algorithm": run.get("algorithm", "RING"),
                    "protocol": "LL",
                    "kernels": 24,
                }
            ],
        },
    }


def test_slower_collective_against_hand_arithmetic() -> None:
    settings, _ = load_settings()
    comparison = compare(document(), document(allreduce_us=15.0), settings)
    (kernel,) = [f for f in comparison.failing if f.metric == "kernel_us"]
    assert kernel.subject == "AllReduce pg=0 4 MiB - 64 MiB"
    assert kernel.change_pct == pytest.approx((15 - 10) / 10 * 100)
    assert (kernel.test.baseline_n, kernel.test.candidate_n) == (24, 24)
    assert kernel.test.statistic == 24 * 24  # every candidate kernel is longer than every baseline one


def test_structure_changes_are_listed_not_judged() -> None:
    settings, _ = load_settings()
    candidate = document(collectives=("AllReduce", "AllGather"), algorithm="TREE")
    candidate["across_ranks"] = {"stragglers": [1]}
    baseline = document()
    for doc in (baseline, candidate):  # kernel-name mixes hold only evidence from schema 1.11 on
        doc["schema_version"] = "1.11"
    comparison = compare(baseline, candidate, settings)
    assert comparison.structure.appeared == ["AllGather pg=0 4 MiB - 64 MiB"]
    assert comparison.structure.baseline_stragglers == []
    assert comparison.structure.candidate_stragglers == [1]
    assert comparison.failing == []
    mix = comparison.structure.algorithm_mix.to_dicts()
    assert {(r["algorithm"], r["baseline_share"], r["candidate_share"]) for r in mix} == {
        ("RING", 1.0, 0.0),
        ("TREE", 0.0, 1.0),
    }


def test_algorithm_mix_of_kernel_names_is_not_paired_across_older_summaries() -> None:
    """A summary older than 1.11 may count a NCCL >= 2.19 kernel's specialisation (RING_LL) as its algorithm:
    the kernel-name mix is not paired (no rows) and the comparison says why, in its JSON and its text."""
    settings, _ = load_settings()
    baseline, candidate = document(), document(algorithm="TREE")
    candidate["schema_version"] = "1.11"
    structure = compare(baseline, candidate, settings).structure
    assert structure.algorithm_mix.height == 0
    assert structure.algorithm_mix_note is not None
    assert structure.algorithm_mix_note.startswith("NCCL algorithm mix not compared: baseline (schema 1.3)")
    assert "candidate" not in structure.algorithm_mix_note


def test_partial_run_does_not_fail() -> None:
    settings, _ = load_settings()
    comparison = compare(
        document(), document(step_us=150.0, skipped=[["rank-1.json", "truncated"]]), settings
    )
    assert comparison.regressions
    assert all(f.partial for f in comparison.regressions)
    assert comparison.failing == []
    assert "partial: " not in comparison.verdict
    assert "Uncertain (candidate: 1 file(s) skipped when parsing)" in comparison.verdict


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Path, Path]:
    base, slow = tmp_path / "base.json", tmp_path / "slow.json"
    base.write_text(json.dumps(document()), encoding="utf-8")
    slow.write_text(json.dumps(document(step_us=150.0)), encoding="utf-8")
    return base, slow


def test_threshold_option_and_file(saved: tuple[Path, Path], tmp_path: Path) -> None:
    base, slow = saved
    assert traceview("compare", str(base), str(slow)).returncode == 1
    assert traceview("compare", str(base), str(slow), "--threshold", "60").returncode == 0
    loose = tmp_path / "loose.toml"
    loose.write_text("[compare]\nthreshold_pct = 60.0\n", encoding="utf-8")
    assert traceview("compare", str(base), str(slow), "--thresholds", str(loose)).returncode == 0
    broken = tmp_path / "broken.toml"
    broken.write_text("[compare\n", encoding="utf-8")
    result = traceview("compare", str(base), str(slow), "--thresholds", str(broken))
    assert result.returncode == 2
    assert "broken.toml" in result.stderr


def test_fail_on_names_compare_figures(saved: tuple[Path, Path]) -> None:
    base, slow = saved
    assert traceview("compare", str(base), str(slow), "--fail-on", "step_us_change_pct>60").returncode == 0
    assert traceview("compare", str(base), str(slow), "--fail-on", "step_us_change_pct>40").returncode == 1


def test_newer_major_schema_is_exit_2(tmp_path: Path) -> None:
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({**document(), "schema_version": "2.0"}), encoding="utf-8")
    result = traceview("compare", str(newer), str(newer))
    assert result.returncode == 2
    assert "newer.json" in result.stderr


def test_html_escapes_input_strings(tmp_path: Path) -> None:
    base, cand = document(), document(allreduce_us=15.0)
    for doc in (base, cand):
        doc["distributions"]["collective_kernels"][0]["pg_key"] = XSS
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for path, doc in zip(paths, (base, cand), strict=True):
        path.write_text(json.dumps(doc), encoding="utf-8")
    result = traceview("compare", *map(str, paths), "-o", str(tmp_path / "diff.html"))
    assert result.returncode == 1
    page = (tmp_path / "diff.html").read_text(encoding="utf-8")
    assert XSS not in page
    assert "&lt;script&gt;alert(1)" in page


def test_trend_page_and_bad_input(saved: tuple[Path, Path], tmp_path: Path) -> None:
    base, slow = saved
    result = traceview(
        "trend", str(base), str(base), str(base), str(slow), "-o", str(tmp_path / "trend.html")
    )
    assert result.returncode == 1  # the latest run's steps are 50% longer than the three before
    page = (tmp_path / "trend.html").read_text(encoding="utf-8")
    assert "Content-Security-Policy" in page
    followed = load_settings()[1].metrics  # one figure per metric followed (the step's six, the skew)
    assert page.count('class="figure" id="fig-trend-') == len(followed) == 7
    not_summary = tmp_path / "trace.json"
    not_summary.write_text('{"traceEvents": []}', encoding="utf-8")
    refused = traceview("trend", str(not_summary))
    assert refused.returncode == 2
    assert "trace.json" in refused.stderr


def test_algorithm_mix_prefers_the_nccl_logs() -> None:
    """With TUNING choices from NCCL logs in both summaries, the mix is read there (3 of 4 AllReduce choices
    Ring/LL128 -> 1 of 4), not from the kernel names (Ring/LL in both)."""
    settings, _ = load_settings()
    base, cand = document(), document()
    base["nccl"] = {
        "algorithms": [
            {"op": "AllReduce", "algo": "Ring", "proto": "LL128", "choices": 3},
            {"op": "AllReduce", "algo": "Tree", "proto": "LL", "choices": 1},
        ]
    }
    cand["nccl"] = {
        "algorithms": [
            {"op": "AllReduce", "algo": "Ring", "proto": "LL128", "choices": 1},
            {"op": "AllReduce", "algo": "Tree", "proto": "LL", "choices": 3},
        ]
    }
    mix = compare(base, cand, settings).structure.algorithm_mix.to_dicts()
    assert {(r["algorithm"], r["baseline_share"], r["candidate_share"]) for r in mix} == {
        ("Ring", 3 / 4, 1 / 4),
        ("Tree", 1 / 4, 3 / 4),
    }


def with_calls(doc: dict[str, Any], factor: float, only_rank: int | None = None) -> dict[str, Any]:
    """`doc` with paired samples: per rank (0, 1) four AllReduce sizes (median 10 us x size index), and per
    rank, step and class (gemm, softmax) a compute time; `factor` scales the calls, or with `only_rank` that
    rank's compute only."""
    calls = [
        {
            "rank": rank,
            "pg_key": "0",
            "collective": "AllReduce",
            "size_bytes": size << 20,
            "kernels": 6,
            "median_us": 10.0 * size * (factor if only_rank is None else 1.0),
        }
        for rank in (0, 1)
        for size in (1, 2, 3, 4)
    ]
    classes = [
        {
            "rank": rank,
            "step": step,
            "kernel_class": kernel_class,
            "time_us": (30.0 + step) * (factor if rank == only_rank else 1.0),
        }
        for rank in (0, 1)
        for step in range(6)
        for kernel_class in ("gemm", "softmax")
    ]
    doc["distributions"] |= {"collective_calls": calls, "kernel_classes": classes}
    return doc


def test_paired_calls_by_hand() -> None:
    settings, _ = load_settings()
    comparison = compare(with_calls(document(), 1.0), with_calls(document(), 1.5), settings)
    (calls,) = [f for f in comparison.findings if f.family == "collective_calls"]
    assert calls.subject == "AllReduce pg=0 all sizes"
    assert calls.baseline == pytest.approx(2 * 10 * (1 + 2 + 3 + 4))  # the medians summed over the 8 pairs
    assert calls.change_pct == pytest.approx(50.0)
    assert calls.test.baseline_n == 8
    assert calls.p_adjusted == pytest.approx(2 / 2**8)  # 8 pairs, all longer: exact, one collective
    assert calls.outcome == "regression"


def test_paired_rank_stands_out_beyond_its_peers() -> None:
    settings, _ = load_settings()
    comparison = compare(with_calls(document(), 1.0), with_calls(document(), 1.3, only_rank=1), settings)
    ranks = {f.subject: f for f in comparison.findings if f.family == "rank"}
    assert ranks["rank 1"].change_pct == pytest.approx(30.0)
    # the median log ratio of each (step, class) over two ranks is log(1.3) / 2
    assert ranks["rank 1"].beyond_peers_pct == pytest.approx((math.sqrt(1.3) - 1) * 100)
    # 12 pairs all longer, on both tests: 2 / 2^12; Holm over the two ranks
    assert ranks["rank 1"].p_adjusted == pytest.approx(2 * 2 / 2**12)
    assert ranks["rank 1"].outcome == "regression"
    assert ranks["rank 0"].outcome == "unchanged"  # its own compute did not move


def test_every_rank_slower_is_no_rank_subject() -> None:
    settings, _ = load_settings()
    base, cand = with_calls(document(), 1.0), with_calls(document(), 1.0)
    for row in cand["distributions"]["kernel_classes"]:
        row["time_us"] *= 1.3
    ranks = [f for f in compare(base, cand, settings).findings if f.family == "rank"]
    assert [f.change_pct for f in ranks] == pytest.approx([30.0, 30.0])
    assert {f.outcome for f in ranks} == {"unchanged"}  # each moved with its peers: nothing beyond them


def test_ranks_read_differ_is_partial() -> None:
    """Same world size, but the candidate read one rank of two: its run figures pool other ranks."""
    settings, _ = load_settings()
    candidate = document(step_us=150.0)
    candidate["run"]["ranks"] = [0]
    candidate["time_budget"]["per_step"] = [r for r in candidate["time_budget"]["per_step"] if r["rank"] == 0]
    comparison = compare(document(), candidate, settings)
    assert comparison.structure.partial_notes == [
        "candidate: rank(s) 1 not read",
        "ranks read differ at world size 2: baseline 2, candidate 1, 1 in both",
    ]
    assert comparison.regressions
    assert comparison.failing == []
    assert comparison.structure.disappeared == ["rank 1"]
