"""Every kernel family from its library's own generator or sources (tests/fixtures/kernel_families/*.tsv).

Each fixture row is a name that the library's generator emits (NCCL: `src/device/generate.py` and
`src/device/symmetric/generate.py` run for every release tag from 2.19 on, 2.18's `IMPL_COLL_KERN` macros
expanded) or that its sources define (RCCL, NCCL EP, DeepEP legacy/elastic/v1, MSCCL++, aiter/vLLM/SGLang
custom all-reduce), with the library, the version or tag and commit, the source path, and the expected
`is_comm`, collective and (NCCL >= 2.19) kernel specialisation, all taken from the generator's own arguments
(`ncclFunc<Coll>`, `NCCL_ALGO_<A>`, `NCCL_PROTO_<P>`) or the source, never from traceview. The names only are
committed, never the libraries' code.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from traceview.events.kernel_names import decode_kernel_names
from traceview.events.kernel_table import COMM_LIBRARIES, DEFAULT_PATTERNS, HOST_LIBRARIES, SUSPECTED_LIBRARY

FIXTURES = Path(__file__).parent / "fixtures" / "kernel_families"
FILES = sorted(FIXTURES.glob("*.tsv"))


def _fixture(path: Path) -> pl.DataFrame:
    frame = pl.read_csv(path, separator="\t", infer_schema_length=0)
    return frame.with_columns(
        pl.col("is_comm") == "true",
        *(pl.col(c).replace("", None) for c in ("collective", "kernel_specialization")),
    ).unique("name", keep="first", maintain_order=True)


def _decoded(path: Path) -> pl.DataFrame:
    expected = _fixture(path)
    decoded = decode_kernel_names(expected.get_column("name")).rename({"is_comm": "got_comm"})
    return expected.join(decoded, on="name", how="left")


def test_the_name_lists_stay_small() -> None:
    """Names only, one row each: the lists of every library and release together stay within 512 KiB."""
    assert sum(p.stat().st_size for p in FIXTURES.iterdir() if p.is_file()) < 512 * 1024


def test_every_library_has_a_fixture() -> None:
    assert {path.stem for path in FILES} >= {"nccl", "nccl_ep", "rccl", "deepep", "mscclpp", "custom_ar"}


@pytest.mark.parametrize("path", FILES, ids=[path.stem for path in FILES])
def test_fixture_names_are_classed_as_their_library_says(path: Path) -> None:
    frame = _decoded(path)
    assert frame.height > 0
    wrong_class = frame.filter(pl.col("is_comm") != pl.col("got_comm"))["name"].to_list()
    assert wrong_class == []
    comm = frame.filter(pl.col("is_comm"))
    assert comm.filter(pl.col("comm_library") == SUSPECTED_LIBRARY)["name"].to_list() == []
    assert comm.filter(pl.col("comm_library") != pl.col("library"))["name"].to_list() == []
    implied = comm.filter(pl.col("collective").is_not_null())
    unsized = implied.filter(pl.col("kernel_collective").is_null())["name"].to_list()
    assert unsized == []  # a null collective where the name implies one
    differ = implied.filter(pl.col("kernel_collective") != pl.col("collective"))["name"].to_list()
    assert differ == []


def test_modern_nccl_names_give_their_specialisation_never_algorithm_or_protocol() -> None:
    frame = _decoded(FIXTURES / "nccl.tsv").filter(pl.col("name").str.starts_with("ncclDevKernel_"))
    assert frame.height > 0
    assert frame.filter(pl.col("algorithm").is_not_null() | pl.col("protocol").is_not_null()).height == 0
    said = frame.filter(pl.col("kernel_specialization").is_not_null())
    assert said.height >= frame.height - 2  # all but ncclDevKernel_Generic and ncclDevKernel_SendRecv
    # the fixture's specialisation (the generator's NCCL_ALGO_x, NCCL_PROTO_y) is what the decoder reads
    assert frame.select(
        pl.col("kernel_specialization").eq_missing(pl.col("kernel_specialization_right")).all()
    ).item()


def test_old_nccl_and_rccl_specialized_names_give_algorithm_and_protocol() -> None:
    old = _decoded(FIXTURES / "nccl.tsv").filter(pl.col("name").str.starts_with("ncclKernel_"))
    rccl = _decoded(FIXTURES / "rccl.tsv").filter(pl.col("name").str.ends_with("_Specialized"))
    for frame in (old, rccl):
        assert frame.height > 0
        said = pl.concat_str("algorithm", pl.lit("_"), "protocol").eq_missing(pl.col("kernel_specialization"))
        assert frame.select(said.all()).item()


def test_nccl_fixture_covers_every_release_from_2_18() -> None:
    versions = set(pl.read_csv(FIXTURES / "nccl.tsv", separator="\t", infer_schema_length=0)["version"])
    minors = {int(v.split(".")[1]) for v in versions}
    assert minors >= set(range(18, 30))


def test_comm_library_ids_are_the_agreed_ones() -> None:
    libraries = {p.library for p in DEFAULT_PATTERNS} - {SUSPECTED_LIBRARY, *HOST_LIBRARIES, "fsdp"}
    assert libraries == set(COMM_LIBRARIES)
    assert set(COMM_LIBRARIES) >= {
        "nccl",
        "nccl_ep",
        "rccl",
        "deepep",
        "symm_mem",
        "userbuffers",
        "custom_ar",
        "mscclpp",
        "nvshmem",
    }
