"""The hardware table: device matching on the real traces' names, datasheet figures, links, table hygiene."""

from __future__ import annotations

import gzip
import json
import re
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from tests.shared_data import requires_shared
from traceview.core import hardware as hw
from traceview.core.errors import UsageError

REAL_KINETO = Path(__file__).resolve().parents[2] / "shared" / "data" / "real" / "kineto"

# Every distinct device in the real traces (name, SM / CU count) and the row it must match, written by hand
# from the names. PG509-200 is Meta's A100 SXM4 40GB board (108 SMs, 39.6 GiB in the trace); "AMD Radeon
# Graphics" with 104 CUs and gfx9 is one GCD of an MI250, as the trace's folder says.
EXPECTED_REAL_DEVICES: dict[tuple[str, int], str | None] = {
    ("NVIDIA A100-SXM4-80GB", 108): "a100_sxm4_80gb",
    ("NVIDIA A100-PG509-200", 108): "a100_sxm4_40gb",
    ("Tesla V100-SXM2-32GB", 80): "v100_sxm2_32gb",
    ("Tesla V100-SXM2-16GB", 80): "v100_sxm2_16gb",
    ("Tesla V100-DGXS-32GB", 80): "v100_dgxs_32gb",
    ("Quadro GP100", 56): "quadro_gp100",
    ("NVIDIA GeForce RTX 2080 Ti", 68): "rtx_2080_ti",
    ("AMD Radeon Graphics", 104): "mi250_gcd",
    ("NVIDIA H200", 132): "h200_sxm",
}


def _device_properties(path: Path) -> list[dict[str, Any]]:
    """The trace's device list, decoded from just after its key (a plain pass, independent of the parsers)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        text = handle.read()
    found = re.search(r'"(deviceProperties|computeProperties)"\s*:\s*', text)
    if found is None:
        return []
    devices, _ = json.JSONDecoder().raw_decode(text, found.end())
    return list(devices)


def _real_devices() -> set[tuple[str, int]]:
    devices: set[tuple[str, int]] = set()
    for path in sorted(REAL_KINETO.rglob("*.json*")):
        for device in _device_properties(path):
            count = device["numSms"] if "numSms" in device else device["multiProcessorCount"]
            devices.add((str(device["name"]), int(count)))
    return devices


@requires_shared
def test_every_real_device_name_matches_its_row() -> None:
    devices = _real_devices()
    assert devices == set(EXPECTED_REAL_DEVICES)
    for (name, num_sms), key in EXPECTED_REAL_DEVICES.items():
        spec = hw.match_device(name, num_sms=num_sms)
        assert (spec.key if spec else None) == key, name


def test_generic_amd_name_is_unknown_without_its_compute_units() -> None:
    assert hw.match_device("AMD Radeon Graphics") is None
    assert hw.match_device("AMD Radeon Graphics", num_sms=96) is None


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA A100-SXM4-80GB", "a100_sxm4_80gb"),
        ("nvidia a100-sxm4-80gb", "a100_sxm4_80gb"),
        ("A100 SXM4 80 GB", "a100_sxm4_80gb"),
        ("NVIDIA_A100_SXM4_80GB", "a100_sxm4_80gb"),
        ("NVIDIA A100-SXM-80GB", "a100_sxm4_80gb"),
        ("NVIDIA A100-SXM4-40GB", "a100_sxm4_40gb"),
        ("NVIDIA A100-PCIE-40GB", "a100_pcie_40gb"),
        ("NVIDIA A100 80GB PCIe", "a100_pcie_80gb"),
        ("tesla v100-sxm2-32gb", "v100_sxm2_32gb"),
        ("V100 SXM2 32G", "v100_sxm2_32gb"),
        ("Tesla V100-PCIE-16GB", "v100_pcie_16gb"),
        ("Tesla V100-PCIE-32GB", "v100_pcie_32gb"),
        ("Tesla V100-DGXS-16GB", "v100_dgxs_16gb"),
        ("NVIDIA H100 80GB HBM3", "h100_sxm"),
        ("NVIDIA H100 SXM5 80GB", "h100_sxm"),
        ("NVIDIA H100 PCIe", "h100_pcie"),
        ("NVIDIA H100 NVL", "h100_nvl"),
        ("NVIDIA H200", "h200_sxm"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA GB200", "gb200"),
        ("AMD Instinct MI300X", "mi300x"),
        ("AMD Instinct MI250X", "mi250x_gcd"),
        ("AMD Instinct MI250", "mi250_gcd"),
        ("QUADRO GP100", "quadro_gp100"),
        ("GeForce RTX 2080 Ti", "rtx_2080_ti"),
    ],
)
def test_matching_is_case_and_format_tolerant(name: str, key: str) -> None:
    spec = hw.match_device(name)
    assert spec is not None, name
    assert spec.key == key


@pytest.mark.parametrize(
    "name",
    [
        "",
        "NVIDIA A100",  # form factor unknown
        "NVIDIA H200 NVL",  # another part than the H200 SXM
        "NVIDIA GeForce RTX 3090",
        "NVIDIA GeForce RTX 2080",  # not the Ti
        "AMD Instinct MI250X / MI250",  # names both parts
        "NVIDIA A100-SXM4-40GB MIG 1g.5gb",  # a slice, not the whole device
        "MTIA",
    ],
)
def test_unknown_or_ambiguous_devices_are_none(name: str) -> None:
    assert hw.match_device(name) is None


def test_compute_units_settle_a_name_shared_by_two_parts() -> None:
    both = "AMD Instinct MI250X / MI250"
    assert hw.match_device(both, num_sms=110) == hw.gpu("mi250x_gcd")
    assert hw.match_device(both, num_sms=104) == hw.gpu("mi250_gcd")


def test_peak_flops_are_the_datasheet_figures() -> None:
    a100 = hw.gpu("a100_sxm4_80gb")
    assert hw.peak_flops(a100, "bf16") == 312e12
    assert hw.peak_flops(a100, "torch.bfloat16") == 312e12
    assert hw.peak_flops(a100, "TF32") == 156e12
    assert hw.peak_flops(a100, "float32") == 19.5e12
    # H100 SXM datasheet prints 1979 TFLOPS bf16 and 3958 fp8 with sparsity: dense is half.
    h100 = hw.gpu("h100_sxm")
    assert hw.peak_flops(h100, "bf16") == pytest.approx(1979e12 / 2)
    assert hw.peak_flops(h100, "float8_e4m3fn") == pytest.approx(3958e12 / 2)
    # One MI250 GCD is half the package's 362.1 TFLOPS bf16.
    assert hw.peak_flops(hw.gpu("mi250_gcd"), "bf16") == pytest.approx(362.1e12 / 2)
    assert hw.peak_flops(hw.gpu("v100_sxm2_32gb"), "half") == 125e12


def test_missing_peaks_and_dtypes_are_errors() -> None:
    with pytest.raises(hw.HardwareLookupError, match="no bf16 peak"):
        hw.peak_flops(hw.gpu("v100_sxm2_32gb"), "bfloat16")
    with pytest.raises(UsageError, match="unknown dtype 'int4'"):
        hw.peak_flops(hw.gpu("a100_sxm4_80gb"), "int4")
    with pytest.raises(UsageError, match="unknown GPU"):
        hw.gpu("tpu_v5")


def test_inherited_rows_keep_the_base_figures() -> None:
    assert hw.gpu("a100_sxm4_80gb").peak_dense_flops == hw.gpu("a100_sxm4_40gb").peak_dense_flops
    assert hw.gpu("a100_sxm4_80gb").memory_gb == 80
    assert hw.gpu("h200_sxm").peak_dense_flops == hw.gpu("h100_sxm").peak_dense_flops
    assert hw.gpu("a100_pcie_40gb").scale_up_max_gpus == 2


@pytest.mark.parametrize(
    ("name", "gbit_per_s"),
    [
        ("IB HDR", 200),
        ("ib-ndr", 400),
        ("ib_xdr", 800),
        ("RoCE 100", 100),
        ("roce_200", 200),
        ("RoCE-400", 400),
        ("eth 100g", 100),
        ("eth_200g", 200),
        ("ETH 400G", 400),
        ("tcp_socket", 10),
    ],
)
def test_links_by_loose_name(name: str, gbit_per_s: int) -> None:
    spec = hw.link(name)
    assert spec.bandwidth_bytes_per_s == gbit_per_s * 1e9 / 8
    assert spec.kind == "nic"


def test_unknown_link_is_an_error() -> None:
    with pytest.raises(hw.HardwareLookupError, match="unknown link 'omnipath'"):
        hw.link("omnipath")


def test_pcie_links_by_hand() -> None:
    # x16 lanes x GT/s x 128/130 / 8 bits, one direction.
    assert hw.link("pcie_gen3").bandwidth_bytes_per_s == pytest.approx(16 * 8e9 * 128 / 130 / 8, rel=1e-3)
    assert hw.link("pcie_gen4").bandwidth_bytes_per_s == pytest.approx(16 * 16e9 * 128 / 130 / 8, rel=1e-3)
    assert hw.link("pcie_gen5").bandwidth_bytes_per_s == pytest.approx(16 * 32e9 * 128 / 130 / 8, rel=1e-3)


def test_bidirectional_is_twice_unidirectional() -> None:
    for spec in hw.table().links.values():
        assert spec.bidirectional_bytes_per_s == 2 * spec.bandwidth_bytes_per_s, spec.key
    for gpu in hw.table().gpus.values():
        if gpu.scale_up_uni_bytes_per_s is not None:
            assert gpu.scale_up_bidi_bytes_per_s == 2 * gpu.scale_up_uni_bytes_per_s, gpu.key


def test_intra_node_link_is_unidirectional_nvlink_or_pcie() -> None:
    # A100 SXM: "NVLink 600 GB/s" in the datasheet is both directions; B is 300 GB/s.
    sxm = hw.intra_node_link(hw.gpu("a100_sxm4_80gb"), 8)
    assert sxm.bandwidth_bytes_per_s == 600e9 / 2
    assert sxm.kind == "scale_up"
    assert "A100" in sxm.source
    # The A100 PCIe bridge joins two GPUs: a group of 4 goes over PCIe Gen4.
    pcie = hw.gpu("a100_pcie_40gb")
    assert hw.intra_node_link(pcie, 2).bandwidth_bytes_per_s == 300e9
    assert hw.intra_node_link(pcie, 4) == hw.link("pcie_gen4")
    assert hw.intra_node_link(hw.gpu("v100_pcie_16gb"), 4) == hw.link("pcie_gen3")
    with pytest.raises(hw.HardwareLookupError, match="give --bandwidth"):
        hw.intra_node_link(hw.gpu("gb200"), 144)


def test_every_pcie_gpu_has_its_pcie_bandwidth() -> None:
    for gpu in hw.table().gpus.values():
        if gpu.pcie_gen is not None:
            assert gpu.pcie_uni_bytes_per_s == hw.link(f"pcie_gen{gpu.pcie_gen}").bandwidth_bytes_per_s


def _raw_table() -> dict[str, Any]:
    text = resources.files("traceview.core").joinpath("hardware.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def test_every_row_names_its_own_source() -> None:
    raw = _raw_table()
    rows = [("links", key, row) for key, row in raw["links"].items()]
    rows += [("gpus", key, row) for key, row in raw["gpus"].items()]
    assert len(rows) >= 30
    for section, key, row in rows:
        assert isinstance(row.get("source"), str), f"[{section}.{key}] has no source"
        assert len(row["source"]) > 15, f"[{section}.{key}] source too short"
    assert "assumption" in raw["meta"]["alpha_source"]


def test_loaded_rows_carry_sources() -> None:
    table = hw.table()
    assert table is hw.table()  # loaded once
    assert all(gpu.source and gpu.alpha_source for gpu in table.gpus.values())
    assert all(link.source and link.alpha_source for link in table.links.values())


def test_table_covers_the_named_gpus() -> None:
    wanted = {"v100_sxm2_16gb", "v100_sxm2_32gb", "v100_pcie_16gb", "a100_sxm4_40gb", "a100_sxm4_80gb"}
    wanted |= {"a100_pcie_40gb", "a100_pcie_80gb", "h100_sxm", "h100_pcie", "h100_nvl", "h200_sxm", "b200"}
    wanted |= {"gb200", "mi250x_gcd", "mi300x", "quadro_gp100", "rtx_2080_ti"}
    assert wanted <= set(hw.table().gpus)


def test_peaks_are_ordered_sensibly() -> None:
    order = ["fp32", "tf32", "bf16", "fp8"]
    for gpu in hw.table().gpus.values():
        peaks = dict(gpu.peak_dense_flops)
        present = [peaks[dtype] for dtype in order if dtype in peaks]
        assert present == sorted(present), gpu.key
        assert 1e12 < peaks["fp32"] < 1e15, gpu.key


def _minimal_document() -> dict[str, Any]:
    return {
        "meta": {"alpha_source": "assumption"},
        "links": {},
        "gpus": {
            "x": {
                "name": "X",
                "vendor": "v",
                "memory_gb": 1,
                "peak_dense_flops": {"fp32": 1e12},
                "intra_node_alpha_s": 1e-6,
                "source": "X datasheet",
            }
        },
        "match": [{"all": ["x"], "gpu": "x"}],
    }


def test_parse_table_rejects_malformed_rows() -> None:
    assert hw.parse_table(_minimal_document()).gpus["x"].name == "X"
    no_source = _minimal_document()
    del no_source["gpus"]["x"]["source"]
    with pytest.raises(hw.HardwareTableError, match=r"\[gpus.x\] has no 'source'"):
        hw.parse_table(no_source)
    bad_rule = _minimal_document()
    bad_rule["match"][0]["gpu"] = "y"
    with pytest.raises(hw.HardwareTableError, match="unknown gpu 'y'"):
        hw.parse_table(bad_rule)
    bad_dtype = _minimal_document()
    bad_dtype["gpus"]["x"]["peak_dense_flops"]["int8"] = 1e12
    with pytest.raises(hw.HardwareTableError, match="unknown dtypes"):
        hw.parse_table(bad_dtype)
    bad_base = _minimal_document()
    bad_base["gpus"]["x"]["base"] = "z"
    with pytest.raises(hw.HardwareTableError, match="unknown base 'z'"):
        hw.parse_table(bad_base)


def test_device_tokens() -> None:
    assert hw.device_tokens("NVIDIA A100-SXM4-80GB") == {"a100", "sxm4", "sxm", "80gb"}
    assert hw.device_tokens("Tesla V100-PCIE-32 GB") == {"v100", "pcie", "32gb"}
