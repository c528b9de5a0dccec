import json

import pytest

from data.hardware import HardwareRegistry, UnknownHardwareError, detect_cpu
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
