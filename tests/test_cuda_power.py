"""The cuda backend's power logic against a fake NVML device that ticks every 100 ms (no GPU here), and
the real backend on a GPU where one exists (skipped otherwise)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from data.backends.cuda import CudaBackend, NoCudaDevice, fp32_math, power_fields
from data.nvml import NvmlPower, PowerMeasurementError, keep_busy
from tests.fake_nvml import FakeGpu, FakeNvml

ROOT = Path(__file__).resolve().parent.parent
TRUE_W, IDLE_W = 650.0, 70.0  # a busy kernel on a 700 W board


def busy_launch(gpu: FakeGpu):
    """Queue 5 ms "kernels" and keep ~50 ms of work queued, so a late host thread never idles the device (with 15 ms,
    a worker thread descheduled under the test suite's load on 2 cores left gaps: 244 W read for 250 in CI)."""

    def launch():
        end = gpu.enqueue(0.005)
        time.sleep(max(0.0, end - 0.05 - time.monotonic()))

    return launch


def naive_power(nvml_power: NvmlPower, window_s: float) -> float:
    """The pitfall: energy over an arbitrary host window, not aligned to counter ticks."""
    t0, e0 = time.monotonic(), nvml_power.energy_mj()
    time.sleep(window_s)
    t1, e1 = time.monotonic(), nvml_power.energy_mj()
    return (e1 - e0) / 1000.0 / (t1 - t0)


@pytest.fixture(scope="module")
def h200():
    """A busy fake H200 (650 W true power, counter updates every 100 ms +- 4 ms) measured once tick-aligned over ~1 s
    (10 ticks), and once naively over 0.45 s."""
    gpu = FakeGpu(busy_power_w=TRUE_W, idle_power_w=IDLE_W, tick_s=0.1)
    power = NvmlPower(FakeNvml(gpu), ticks=10, settle_ticks=1)
    with keep_busy(busy_launch(gpu)) as worker:
        aligned = power.measure(worker)
        naive = naive_power(power, 0.45)
    return {"gpu": gpu, "aligned": aligned, "naive": naive}


def test_tick_aligned_power_matches_the_true_power(h200):
    r = h200["aligned"]
    err = abs(r.power_w - TRUE_W) / TRUE_W
    print(f"tick-aligned: {r.power_w:.1f} W over {r.window_s:.3f} s ({r.ticks} ticks), error {err:.2%}")
    assert r.method == "nvml_energy_counter" and r.ticks == 10
    assert 0.95 < r.window_s < 1.05  # ten ~100 ms ticks
    assert err < 0.02
    assert r.energy_j == pytest.approx(r.power_w * r.window_s)
    assert 0 < r.edge_gap_s < 0.02  # each edge is known to within one poll gap
    assert r.worker_launches > 150  # the worker kept queueing 5 ms kernels through the window
    assert r.throttled is False and r.over_power_limit is False
    assert r.sm_clock_mhz == 1980 and r.mem_clock_mhz == 3201 and r.temperature_c == 55 and r.power_limit_w == 700


def test_naive_unaligned_window_reads_worse(h200):
    """A 0.45 s window holds 4 or 5 counter steps of 100 ms: 11% low or high, whatever the phase."""
    naive_err = abs(h200["naive"] - TRUE_W) / TRUE_W
    aligned_err = abs(h200["aligned"].power_w - TRUE_W) / TRUE_W
    print(f"naive 0.45 s window: {h200['naive']:.1f} W (error {naive_err:.1%}); aligned error {aligned_err:.2%}")
    assert naive_err > 0.08
    assert naive_err > 4 * aligned_err


def test_a_fast_counter_still_gets_a_long_enough_window():
    """A counter that moves every 10 ms: the window still lasts >= 0.3 s. Its settle must cover the ~100 ms power
    ramp (10 ticks here): one 10 ms tick opens the window while the board is still ramping up, and reads low."""
    gpu = FakeGpu(busy_power_w=300.0, idle_power_w=30.0, tick_s=0.01, tick_jitter_s=0.001)
    with keep_busy(busy_launch(gpu)) as worker:
        r = NvmlPower(FakeNvml(gpu), ticks=4, settle_ticks=10, min_window_s=0.3).measure(worker)
    assert r.window_s >= 0.3 and r.ticks >= 29
    assert r.power_w == pytest.approx(300.0, rel=0.02)
    gpu = FakeGpu(busy_power_w=300.0, idle_power_w=30.0, tick_s=0.01, tick_jitter_s=0.001)
    with keep_busy(busy_launch(gpu)) as worker:
        early = NvmlPower(FakeNvml(gpu), ticks=4, settle_ticks=1, min_window_s=0.3).measure(worker)
    assert early.power_w < 0.97 * 300.0  # the ramp's missing energy (~30 ms x 270 W) over a 0.3 s window


def test_an_idle_device_reads_idle_power():
    """Without a busy worker the same reading gives idle power: the worker is what makes it the kernel's."""
    gpu = FakeGpu(busy_power_w=TRUE_W, idle_power_w=IDLE_W)
    r = NvmlPower(FakeNvml(gpu), ticks=3, settle_ticks=0).measure()
    assert r.power_w == pytest.approx(IDLE_W, rel=0.03)


def test_sampled_power_fallback_where_the_counter_is_missing():
    """Without the energy counter, nvmlDeviceGetPowerUsage is sampled. Where that sensor averages over the last
    second (NVML: Ampere and newer), samples taken in the first second of the work still hold idle time: the
    sampling must settle for the sensor's window first (CudaBackend: sample_settle_s = 1.2 s)."""

    def sampled(settle_s, sensor_window_s):
        gpu = FakeGpu(
            busy_power_w=250.0,
            idle_power_w=25.0,
            has_counter=False,
            power_limit_w=250.0,
            sensor_window_s=sensor_window_s,
        )
        power = NvmlPower(FakeNvml(gpu), sample_window_s=0.3, sample_interval_s=0.01, sample_settle_s=settle_s)
        assert power.has_energy_counter is False
        with keep_busy(busy_launch(gpu)) as worker:
            return power.measure(worker)

    r = sampled(1.2, 1.0)
    assert r.method == "nvml_power_sampled" and r.ticks is None and r.energy_j is None
    assert r.samples >= 15 and r.window_s >= 0.3
    assert r.power_w == pytest.approx(250.0, rel=0.02)
    assert sampled(0.05, 1.0).power_w < 0.5 * 250.0  # the 1 s average still holds mostly idle time
    assert sampled(0.2, 0.0).power_w == pytest.approx(250.0, rel=0.02)  # an instantaneous sensor (older boards)


def test_throttled_and_over_limit_values_are_kept_and_flagged():
    """A 700 W board that averages 778 W with its SM clock pulled to 1755 MHz: kept as measured, flagged."""
    gpu = FakeGpu(busy_power_w=778.0, idle_power_w=IDLE_W, sm_clock_mhz=1755, power_limit_w=700.0)
    power = NvmlPower(FakeNvml(gpu), ticks=3, settle_ticks=1)
    with keep_busy(busy_launch(gpu)) as worker:
        r = power.measure(worker)
    cols = power_fields(r, runtime_ms=0.5)
    assert cols["power_w"] == pytest.approx(778.0, rel=0.03) and cols["power_w"] > 700  # not clipped
    assert cols["energy_j"] == pytest.approx(cols["power_w"] * 0.5e-3)  # power x runtime of the same row
    assert cols["throttled"] is True and cols["sm_clock_mhz"] == 1755
    assert cols["power_method"] == "nvml_energy_counter"
    assert r.summary()["over_power_limit"] is True and r.summary()["sm_clock_max_mhz"] == 1980


def test_a_counter_that_never_moves_is_an_error_not_a_number():
    gpu = FakeGpu(tick_s=100.0)
    power = NvmlPower(FakeNvml(gpu), ticks=2, tick_timeout_s=0.2)
    with pytest.raises(PowerMeasurementError, match="did not move for 0.20 s"):
        power.measure()


def test_a_failing_workload_stops_the_measurement():
    def launch():
        raise RuntimeError("CUDA error: out of memory")

    with pytest.raises(PowerMeasurementError, match="busy worker failed: RuntimeError: CUDA error: out of memory"):
        with keep_busy(launch):
            pass


def test_no_power_reading_leaves_power_columns_empty():
    assert all(v is None for v in power_fields(None, 1.0).values())


def test_fp32_math_switches_tf32_and_restores():
    knobs = (torch.backends.cuda.matmul, torch.backends.cudnn.conv)
    before = [k.fp32_precision for k in knobs]
    with fp32_math("tf32"):
        assert [k.fp32_precision for k in knobs] == ["tf32", "tf32"]
    with fp32_math("float32"):
        assert [k.fp32_precision for k in knobs] == ["ieee", "ieee"]
    assert [k.fp32_precision for k in knobs] == before


def test_hydra_config_builds_the_backend_without_touching_a_gpu():
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    backend = instantiate(OmegaConf.load(ROOT / "conf" / "collect" / "backend" / "cuda.yaml"))
    assert isinstance(backend, CudaBackend) and backend.name == "cuda"
    assert backend.timing_kw["windows"] == 7 and backend.timing_kw["min_window_ms"] == 20.0
    if not torch.cuda.is_available():
        with pytest.raises(NoCudaDevice, match=r"^no CUDA device \(torch.cuda.is_available\(\) is False\)"):
            backend.measure({"op": "matmul", "params": {"m": 64, "n": 64, "k": 64}, "dtype": "float32"})


# --------------------------------------------------------------------------- real GPU (skipped here)
needs_gpu = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs an NVIDIA GPU with NVML (torch.cuda.is_available() is False here)"
)


@pytest.fixture(scope="module")
def gpu_backend():
    return CudaBackend(windows=5, min_window_ms=10.0, power_ticks=3)


@needs_gpu
def test_cuda_measures_a_matmul_with_power(gpu_backend):
    row = gpu_backend.measure({"op": "matmul", "params": {"m": 4096, "n": 4096, "k": 4096}, "dtype": "float16"})
    assert row["status"] == "ok", row["error"]
    env = json.loads(row["env"])
    spec = gpu_backend.hardware
    idle = spec.idle_power_w or 0.05 * spec.tdp_w
    assert row["runtime_ms"] > 0 and row["runtime_repeats"] == 5 and row["peak_mem_bytes"] >= 3 * 4096**2 * 2
    assert idle * 0.5 < row["power_w"] < 1.2 * env["power_limit_w"]
    assert row["energy_j"] == pytest.approx(row["power_w"] * row["runtime_ms"] * 1e-3)
    assert row["timing_method"] == "cuda_events"  # ~100 us or more on any GPU: no graph needed
    assert row["power_method"] in ("nvml_energy_counter", "nvml_power_sampled")
    assert row["sm_clock_mhz"] > 0 and row["mem_clock_mhz"] > 0 and row["throttled"] in (True, False)
    assert env["driver"] and env["cuda"] and env["torch"]


@needs_gpu
def test_cuda_short_kernels_use_graphs_and_bad_shapes_become_error_rows(gpu_backend):
    small = gpu_backend.measure({"op": "add", "params": {"m": 8, "n": 64}, "dtype": "float32"})
    assert small["status"] == "ok" and small["timing_method"] == "cuda_graph" and small["runtime_ms"] < 0.03
    bad = gpu_backend.measure({"op": "matmul", "params": {"m": 8, "n": 8}, "dtype": "float32"})
    assert bad["status"] == "error" and "needs shape parameter 'k'" in bad["error"]


# --------------------------------------------------------------------------- timing + worker, fake CUDA
def test_time_calls_uses_events_for_long_kernels_and_graphs_for_short_ones(monkeypatch):
    from data.backends.cuda import time_calls
    from tests import fake_cuda

    fake_cuda.patch(monkeypatch, FakeGpu())
    long = time_calls(fake_cuda.kernel(200e-6, launch_s=10e-6), windows=5, min_window_ms=5)
    assert long.method == "cuda_events" and long.calls_per_launch == 1 and long.windows == 5
    assert long.runtime_ms == pytest.approx(0.2, rel=0.05)  # device time; launches overlap the kernels
    assert long.min_ms <= long.runtime_ms <= long.max_ms and long.iqr_ms >= 0
    # 10 us kernels launched eagerly at ~10+ us each starve the device: events would time the launches
    short = time_calls(fake_cuda.kernel(10e-6, launch_s=15e-6), windows=5, min_window_ms=5)
    assert short.eager_estimate_us > 14  # what back-to-back eager launches measure
    assert short.method == "cuda_graph" and short.calls_per_launch > 1
    assert short.runtime_ms == pytest.approx(0.010, rel=0.05)  # the graph times the kernel itself
    forced = time_calls(fake_cuda.kernel(200e-6), windows=3, min_window_ms=2, graph=True)
    assert forced.method == "cuda_graph" and forced.runtime_ms == pytest.approx(0.2, rel=0.05)


def test_measure_power_keeps_the_fake_gpu_busy_from_a_worker(monkeypatch):
    from data.backends.cuda import measure_power, time_calls
    from tests import fake_cuda

    gpu = FakeGpu(busy_power_w=400.0, idle_power_w=IDLE_W, power_limit_w=450.0)
    fake_cuda.patch(monkeypatch, gpu)
    timing = time_calls(fake_cuda.kernel(100e-6, launch_s=5e-6), windows=3, min_window_ms=2)
    reading = measure_power(NvmlPower(FakeNvml(gpu), ticks=3, settle_ticks=1), timing)
    assert reading.power_w == pytest.approx(400.0, rel=0.02)  # the device never idled in the window
    # the worker's count is in calls (not batches): ~window / 100 us, give or take the queued batches
    assert reading.worker_launches * 100e-6 == pytest.approx(reading.window_s, rel=0.1)


def test_a_kernel_that_cannot_be_captured_is_timed_eagerly_and_says_so(monkeypatch):
    from data.backends.cuda import time_calls
    from tests import fake_cuda

    fake_cuda.patch(monkeypatch, FakeGpu())

    def refuse(g, **kw):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(torch.cuda, "graph", refuse)
    t = time_calls(fake_cuda.kernel(10e-6), windows=3, min_window_ms=2)
    assert t.method == "cuda_events" and "graph capture failed" in t.note and t.runtime_ms > 0


# --------------------------------------------------------------------------- CudaBackend.measure end to end, fake GPU
@pytest.fixture
def fake_h100(monkeypatch, registry):
    """A fake H100 (tests/fake_cuda.py: tensors on cuda, roofline kernel times, 80 GiB allocator; the power ramp,
    1 s sensor and 100 ms energy counter of tests/fake_nvml.py) installed as CUDA device 0."""
    from tests import fake_cuda

    gpu = FakeGpu(busy_power_w=TRUE_W, idle_power_w=IDLE_W, name="NVIDIA H100 80GB HBM3", power_limit_w=700.0)
    with fake_cuda.installed(monkeypatch, fake_cuda.FakeCudaDevice.from_spec(registry.get("H100-SXM"), gpu)) as cuda:
        yield cuda


def fake_backend(cuda, registry, **kw):
    # graph_threshold_us: a Python-dispatched fake launch costs ~0.05-0.5 ms of host time (with the machine's load)
    # where a real one costs ~5 us, so the eager-vs-graph decision takes a threshold scaled up from the GPU's 30 us
    # min_window_ms: long windows average out the Python dispatch of this fake's launches
    return CudaBackend(
        windows=5,
        min_window_ms=50.0,
        graph_threshold_us=2000.0,
        registry=registry,
        nvml_power=NvmlPower(FakeNvml(cuda.gpu), ticks=3, settle_ticks=1),
        **kw,
    )


def test_cuda_backend_measures_a_matmul_end_to_end_on_a_fake_gpu(fake_h100, registry):
    spec = registry.get("H100-SXM")
    row = fake_backend(fake_h100, registry).measure(
        {"op": "matmul", "params": {"m": 16384, "n": 16384, "k": 16384}, "dtype": "float16"}
    )
    assert row["status"] == "ok", row["error"]
    assert row["hardware"] == "H100-SXM" and row["flops"] == 2 * 16384**3
    # runtime: the fake's kernel (launch latency + FLOPs / fp16 peak), the worker's launches overlapping it
    truth_ms = (fake_h100.latency_s + 2 * 16384**3 / spec.peak_flops("float16")) * 1e3  # 8.9 ms
    assert row["timing_method"] == "cuda_events" and truth_ms * 0.999 < row["runtime_ms"] < truth_ms * 1.03
    assert row["peak_mem_bytes"] == 3 * 16384**2 * 2  # A, B and the output: what the allocator saw at its peak
    # power: a tick-aligned window is exact up to its two edges' poll gaps, against the board's true mean power
    # between the same two counter updates; the board draws TRUE_W while busy, and the worker kept it busy nearly all
    # the window (a loaded host can starve the worker's thread for some ms: 636 W seen with the suite beside it)
    env = json.loads(row["env"])
    truth_w = fake_h100.gpu.mean_power_between_updates(env["energy_window_j"])
    promise = env["edge_gap_ms"] * 1e-3 / env["power_window_s"] + 0.002
    assert abs(row["power_w"] - truth_w) / truth_w < promise, (row["power_w"], truth_w, promise)
    assert IDLE_W + 0.95 * (TRUE_W - IDLE_W) < truth_w < TRUE_W * 1.001  # (the counter counts whole mJ)
    assert env["power_window_busy_fraction"] > 0.95 and env["counter_ticks"] >= 3
    assert row["energy_j"] == pytest.approx(row["power_w"] * row["runtime_ms"] * 1e-3)
    assert row["power_method"] == "nvml_energy_counter" and row["throttled"] is False


def test_cuda_backend_graphs_short_kernels_on_a_fake_gpu(fake_h100, registry):
    spec = registry.get("H100-SXM")
    row = fake_backend(fake_h100, registry, power=False).measure(
        {"op": "add", "params": {"m": 8, "n": 64}, "dtype": "float32"}
    )
    truth_ms = (fake_h100.latency_s + 3 * 8 * 64 * 4 / spec.bandwidth_bytes_s) * 1e3
    assert row["status"] == "ok" and row["timing_method"] == "cuda_graph"
    assert row["runtime_ms"] == pytest.approx(truth_ms, rel=0.05) and row["power_w"] is None
    env = json.loads(row["env"])
    assert env["eager_estimate_us"] > 3 * truth_ms * 1e3  # eager launches starve the device
    # the graph is sized from its own replay (graph_min_ms = 1 ms of device time, resized until within 1.5x of it), not
    # from the host-bound eager estimate (that gave 2-10 calls here: 0.004-0.02 ms)
    assert env["calls_per_launch"] * row["runtime_ms"] > 1.0 / 1.5 * 0.95


def test_out_of_memory_on_a_fake_gpu_is_an_error_row_and_the_device_recovers(fake_h100, registry):
    backend = fake_backend(fake_h100, registry)
    row = backend.measure({"op": "matmul", "params": {"m": 200_000, "n": 200_000, "k": 8}, "dtype": "float32"})
    assert row["status"] == "error" and row["runtime_ms"] is None and row.get("power_w") is None
    assert row["error"].startswith(
        "OutOfMemoryError: CUDA out of memory. Tried to allocate 149.01 GiB. GPU 0 has a total capacity of 80.00 GiB"
    )
    assert fake_h100.allocated == 0  # the inputs were freed with the failed workload
    ok = backend.measure({"op": "gelu", "params": {"m": 1024, "n": 1024}, "dtype": "float16"})
    assert ok["status"] == "ok" and ok["peak_mem_bytes"] == 2 * 1024 * 1024 * 2


def test_sampled_power_through_the_backend_settles_for_the_sensor_average(fake_h100, registry):
    """A board without the energy counter whose sensor averages over 1 s: CudaBackend's default settle reads it."""
    fake_h100.gpu.has_counter = False
    backend = fake_backend(fake_h100, registry, sample_window_s=0.3)
    backend._nvml = NvmlPower(FakeNvml(fake_h100.gpu), **backend.power_kw)  # its own settings, the fake's NVML
    assert backend.power_kw["sample_settle_s"] == 1.2
    row = backend.measure({"op": "matmul", "params": {"m": 4096, "n": 4096, "k": 4096}, "dtype": "float16"})
    assert row["status"] == "ok" and row["power_method"] == "nvml_power_sampled"
    assert json.loads(row["env"])["power_window_busy_fraction"] > 0.95
    assert row["power_w"] == pytest.approx(TRUE_W, rel=0.03)
