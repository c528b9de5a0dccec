import json

import pandas as pd
import pytest

from data.backends.sim_systolic import SimSystolicBackend, expected_os_compute_cycles, gemm_of, simulate_gemm
from data.hardware import HardwareSpec
from data.schema import validate

SMALL = dict(rows=8, cols=8, dataflow="os", ifmap_kb=64, filter_kb=64, ofmap_kb=64)


@pytest.mark.parametrize("m,n,k", [(8, 8, 8), (8, 8, 16), (16, 8, 8), (20, 13, 5)])
def test_output_stationary_cycles_match_the_skew_and_fold_count(m, n, k):
    """One fold on an R x C array: K MAC steps + (R - 1) + (C - 1) skew; F folds pipeline back to back."""
    r = simulate_gemm(m, n, k, **SMALL)
    assert r["compute_cycles"] == expected_os_compute_cycles(m, n, k, 8, 8)
    assert r["stall_cycles"] == 0 and r["overall_cycles"] >= r["compute_cycles"]
    # each operand comes from DRAM once: A[m,k], B[k,n] read, C[m,n] written (words)
    assert (r["ifmap_dram_reads"], r["filter_dram_reads"], r["ofmap_dram_writes"]) == (m * k, n * k, m * n)


def test_backend_rows_validate_and_convert_cycles_to_time():
    hw = HardwareSpec.from_dict(
        {
            "id": "sys8",
            "name": "8x8 OS array",
            "kind": "accelerator",
            "vendor": "test",
            "boost_clock_mhz": 500,
            "systolic": {
                "array_rows": 8,
                "array_cols": 8,
                "dataflow": "os",
                "ifmap_sram_kb": 64,
                "filter_sram_kb": 64,
                "ofmap_sram_kb": 64,
                "word_bytes": 2,
            },
        }
    )
    backend = SimSystolicBackend(hw)
    work = [
        {"op": "matmul", "params": {"m": 16, "n": 8, "k": 8}, "dtype": "float16"},
        {"op": "bmm", "params": {"batch": 3, "m": 8, "n": 8, "k": 8}, "dtype": "float16"},
        {
            "op": "conv2d",
            "params": dict(batch=1, c_in=2, c_out=8, h=4, w=4, kernel=3, stride=1, padding=1),
            "dtype": "float16",
        },
        {"op": "layernorm", "params": {"m": 4, "n": 8}, "dtype": "float16"},
    ]
    rows = validate(pd.DataFrame([backend.measure(w) for w in work]))
    assert list(rows["status"]) == ["ok", "ok", "ok", "error"] and "not 'layernorm'" in rows["error"].iloc[3]
    mm = rows.iloc[0]
    assert mm["runtime_ms"] == pytest.approx(mm["latency_cycles"] / 500e6 * 1e3)
    meta = json.loads(mm["meta"])
    assert meta["compute_cycles"] == expected_os_compute_cycles(16, 8, 8, 8, 8)
    assert meta["dram_bytes"] == 2 * (16 * 8 + 8 * 8 + 16 * 8)
    single = simulate_gemm(8, 8, 8, **SMALL)["overall_cycles"]
    assert rows.iloc[1]["latency_cycles"] == 3 * single  # bmm: batch GEMMs one after another
    assert json.loads(rows.iloc[2]["meta"])["gemm_mnk"] == [16, 8, 18]  # im2col: pixels x c_out x c_in*k^2
    assert (rows["backend"] == "sim-systolic").all() and rows["energy_j"].isna().all()


def test_registry_entry_and_refusals(registry):
    spec = registry.get("TPUv1-like")
    assert spec.kind == "accelerator" and spec.extra["systolic"]["array_rows"] == 256
    SimSystolicBackend(spec)
    with pytest.raises(ValueError, match="not a systolic accelerator"):
        SimSystolicBackend(registry.get("T4"))
    with pytest.raises(ValueError, match="not 'sdpa'"):
        gemm_of("sdpa", {})
    fpga = registry.get("xcvu13p")
    assert fpga.kind == "fpga" and fpga.extra["resources"]["lut"] == 1_728_000
    with pytest.raises(ValueError, match="no peak FLOP/s"):
        fpga.peak_flops("float32")
