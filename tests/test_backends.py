import pytest

from data.backends.cpu import CpuBackend
from data.backends.sim_roofline import SimRooflineBackend
from data.hardware import detect_cpu


@pytest.fixture(scope="module")
def cpu():
    return CpuBackend(num_threads=1, min_run_time=0.01, warmup=1, hardware=detect_cpu(1))


def test_cpu_measures_real_kernels(cpu):
    small = cpu.measure({"op": "matmul", "params": {"m": 64, "n": 64, "k": 64}, "dtype": "float32"})
    big = cpu.measure({"op": "matmul", "params": {"m": 512, "n": 512, "k": 512}, "dtype": "float32"})
    for row in (small, big):
        assert row["status"] == "ok" and row["runtime_ms"] > 0 and row["runtime_repeats"] >= 1
        assert row["runtime_iqr_ms"] >= 0 and row["backend"] == "cpu"
    assert big["flops"] == 2 * 512**3
    assert big["runtime_ms"] > 20 * small["runtime_ms"]  # 512x the FLOPs: far slower on any CPU


def test_cpu_failure_becomes_an_error_row(cpu):
    row = cpu.measure({"op": "matmul", "params": {"m": 4, "n": 4}, "dtype": "float32"})
    assert row["status"] == "error" and "needs shape parameter 'k'" in row["error"]
    assert row["runtime_ms"] is None


@pytest.mark.parametrize("dtype", ["fixed", "tf32"])
def test_cpu_refuses_dtypes_it_cannot_compute_in(cpu, dtype):
    row = cpu.measure({"op": "matmul", "params": {"m": 4, "n": 4, "k": 4}, "dtype": dtype})
    assert row["status"] == "error" and f"dtype {dtype!r} has no CPU kernel" in row["error"]


def test_sim_compute_bound_gemm_follows_peak(registry):
    w = {"op": "matmul", "params": {"m": 8192, "n": 8192, "k": 8192}, "dtype": "float16"}
    h100 = SimRooflineBackend(registry.get("H100-SXM")).measure(w)["runtime_ms"]
    t4 = SimRooflineBackend(registry.get("T4")).measure(w)["runtime_ms"]
    ratio = registry.get("H100-SXM").peak_flops("float16") / registry.get("T4").peak_flops("float16")
    assert t4 / h100 == pytest.approx(ratio, rel=0.1)


def test_sim_memory_bound_op_follows_bandwidth(registry):
    w = {"op": "add", "params": {"m": 8192, "n": 8192}, "dtype": "float32"}
    a100 = SimRooflineBackend(registry.get("A100-PCIe-40GB"), launch_overhead_us=0).measure(w)["runtime_ms"]
    l4 = SimRooflineBackend(registry.get("L4"), launch_overhead_us=0).measure(w)["runtime_ms"]
    bw = registry.get("A100-PCIe-40GB").memory_bandwidth_gbs / registry.get("L4").memory_bandwidth_gbs
    assert l4 / a100 == pytest.approx(bw, rel=1e-6)
    expected = 3 * 8192 * 8192 * 4 / (registry.get("L4").memory_bandwidth_gbs * 1e9 * 0.85) * 1e3
    assert l4 == pytest.approx(expected, rel=1e-9)


def test_sim_wave_quantization(registry):
    """One tile more than the SMs can hold costs a whole extra wave (T4: 40 SMs = 8 x 5 tiles of 128x128)."""
    spec = registry.get("T4")
    assert spec.sm_count == 40
    sim = SimRooflineBackend(spec, launch_overhead_us=0)
    k = 4096  # compute-bound at these sizes
    full = sim.runtime_s("matmul", {"m": 128 * 8, "n": 128 * 5, "k": k}, "float16")
    spill = sim.runtime_s("matmul", {"m": 128 * 8 + 1, "n": 128 * 5, "k": k}, "float16")
    assert full == pytest.approx(2 * 128 * 128 * k / (spec.peak_flops("float16") * 0.8 / 40), rel=1e-9)
    assert spill / full == pytest.approx(2.0, rel=1e-9)


def test_sim_rows_say_they_are_simulated(registry):
    row = SimRooflineBackend(registry.get("L4")).measure({"op": "gelu", "params": {"m": 4, "n": 4}, "dtype": "float32"})
    assert row["backend"] == "sim-roofline" and row["hardware"] == "L4" and row["runtime_repeats"] is None
