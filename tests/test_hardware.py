import json

import pytest

from data.hardware import HardwareRegistry, HardwareSpec, UnknownHardwareError, detect_cpu
from tests.conftest import SHARED

REQUIRED = ["A100-PCIe-40GB", "H100-SXM", "L4", "T4", "V100-PCIe-32GB"]


def test_registry_has_the_required_gpus(registry):
    for hw in REQUIRED:
        spec = registry.get(hw)
        assert spec.kind == "gpu" and spec.sm_count > 0 and spec.memory_bandwidth_gbs > 0
        assert spec.peak_flops("float32") > 0 and spec.sources


def test_lookup_is_by_id_or_alias_case_insensitive(registry):
    assert registry.resolve("h100-sxm") == "H100-SXM"
    assert registry.resolve("NVIDIA_H100_80GB_HBM3") == "H100-SXM"
    with pytest.raises(UnknownHardwareError, match="unknown hardware 'H1000'; known: .*T4"):
        registry.get("H1000")


def test_dtype_peaks_fall_back_to_float32(registry):
    t4 = registry.get("T4")
    assert t4.peak_flops("float16") > 4 * t4.peak_flops("float32")  # tensor cores
    assert t4.peak_flops("bfloat16") == t4.peak_flops("float32")  # no bf16 on Turing: fallback


def test_registry_json_roundtrip(registry):
    again = HardwareRegistry.from_json(registry.to_json())
    assert again.ids == registry.ids
    assert again.get("L4") == registry.get("L4")


@pytest.mark.shared_data
def test_specs_agree_with_neusight_device_configs(registry):
    """Every NeuSight device config maps onto a registry GPU whose bandwidth and memory agree within 10%."""
    files = sorted((SHARED / "neusight" / "device_configs").glob("*.json"))
    assert len(files) == 9
    for f in files:
        cfg = {k.lower(): v for k, v in json.loads(f.read_text()).items()}
        spec = registry.get(f.stem)
        assert abs(spec.memory_bandwidth_gbs - cfg["mem_bw"]) / cfg["mem_bw"] < 0.10, (f.stem, spec, cfg)
        assert abs(spec.l2_cache_mb - cfg["l2cache"]) / cfg["l2cache"] < 0.10, (f.stem, spec, cfg)
        assert abs(spec.peak_flops("float32") / 1e9 - cfg["singleflops"]) / cfg["singleflops"] < 0.10, (
            f.stem,
            spec,
            cfg,
        )


def test_detect_cpu_measures_its_roofline():
    spec = detect_cpu(1)
    assert spec.kind == "cpu" and spec.id.startswith("cpu-") and spec.id.endswith("-1t")
    assert 1e-4 < spec.peak_tflops["float32"] < 50  # a measured sgemm rate, TFLOP/s
    assert 0.1 < spec.memory_bandwidth_gbs < 5000


def test_aiconfigurator_names_resolve_and_fp8_only_where_units_exist(registry):
    """aiconfigurator's system folders and device strings are aliases; fp8 rates exist only on Ada, Hopper and
    Blackwell, fp4 only on Blackwell; dense rates double from bfloat16 to fp8 to fp4 (a sparse figure would be 2x)."""
    names = {
        "a100_sxm": "A100-SXM4-80GB",
        "NVIDIA A100-SXM4-80GB": "A100-SXM4-80GB",
        "h100_sxm": "H100-SXM",
        "NVIDIA H100 80GB HBM3": "H100-SXM",
        "h200_sxm": "H200-SXM",
        "NVIDIA H200": "H200-SXM",
        "l40s": "L40S",
        "NVIDIA L40S": "L40S",
        "b200_sxm": "B200",
        "NVIDIA B200": "B200",
        "NVIDIA RTX PRO 6000 Blackwell Server Edition": "RTX-PRO-6000",
    }
    assert {name: registry.resolve(name) for name in names} == names
    for spec in registry:
        rates = spec.peak_tflops
        if "fp8" in rates:
            assert spec.architecture in ("ada", "hopper", "blackwell")
            assert rates["fp8"] == pytest.approx(2 * rates["bfloat16"], rel=0.02)
        if "fp4" in rates:
            assert spec.architecture == "blackwell" and rates["fp4"] == pytest.approx(2 * rates["fp8"], rel=0.02)
    assert "fp8" not in registry.get("A100-SXM4-80GB").peak_tflops and "fp4" in registry.get("B200").peak_tflops


def test_interconnect_accessors_and_checks(registry):
    h200, l40s, t4 = registry.get("H200-SXM"), registry.get("L40S"), registry.get("T4")
    assert h200.link_bandwidth_bytes_s == 450e9 and h200.gpus_per_node == 8 and h200.interconnect["kind"] == "nvlink4"
    assert l40s.interconnect["kind"] == "pcie4" and l40s.link_bandwidth_bytes_s < h200.link_bandwidth_bytes_s / 10
    assert 0 < h200.link_latency_s < l40s.link_latency_s < 1e-5
    assert (t4.link_bandwidth_bytes_s, t4.link_latency_s, t4.gpus_per_node) == (0.0, None, 0)  # none given
    for spec in registry:
        if spec.interconnect:
            assert spec.interconnect["source"] and spec.link_bandwidth_bytes_s > 0
    base = registry.get("L40S").to_dict()
    for bad, match in (
        ({"kind": "infiniband", "bandwidth_gbs": 50}, "interconnect kind must be one of nvlink2"),
        ({"kind": "pcie4"}, "bandwidth_gbs must be a number > 0, got None"),
        ({"kind": "pcie4", "bandwidth_gbs": 32, "gpus_per_node": 2.5}, "gpus_per_node must be a whole number"),
        ({"kind": "pcie4", "bandwidth_gbs": 32, "latency_us": -1}, "latency_us must be a number >= 0"),
    ):
        with pytest.raises(ValueError, match=match) as err:
            HardwareSpec.from_dict({**base, "interconnect": bad})
        assert "'L40S'" in str(err.value) and "\n" not in str(err.value)
