"""Real NVIDIA GPU measurements: CUDA-event timing (CUDA graphs for short kernels), NVML power/energy.

Per workload (``measure``), on the GPU the backend was made for:

1. **Build** real tensors on the device (``data.workloads.build``); dtype ``tf32`` runs float32 tensors
   with TF32 math (``torch.backends.cuda.matmul`` / ``cudnn.conv`` ``fp32_precision = "tf32"``), dtype
   ``float32`` with IEEE float32 math (TF32 off, also for cuDNN convolutions, whose default is on).
2. **Peak device memory**: ``torch.cuda.reset_peak_memory_stats()`` before building, one call, then
   ``torch.cuda.max_memory_allocated()`` (inputs + weights + output + workspace of one call).
3. **Timing** (:func:`time_calls`): CUDA events around windows of back-to-back calls, each window at
   least ``min_window_ms``; runtime = median over ``windows`` windows of (window time / calls), with
   the min, max and IQR over windows recorded. A kernel whose eager estimate is under
   ``graph_threshold_us`` (default 30 us) is captured into a ``torch.cuda.CUDAGraph`` enough times for
   one replay to last ``graph_min_ms`` of device time (sized from a first capture's replay, since the
   eager estimate of a short kernel is the host's launch time) and timed by replaying it: back-to-back
   eager launches of short kernels time the host launch path, not the GPU (repeat runs differ by ~7%
   there versus < 1% above, see ``../shared/data/README.md``). ``timing_method`` = ``cuda_events`` or
   ``cuda_graph`` per row. Each window is preceded, outside its events, by ~1 ms of the same work, so
   a host thread that is late (preempted, collecting garbage) does not leave the device idle inside it.
4. **Power** (:mod:`data.nvml`): a worker thread replays the same launch unit (graph or eager batch)
   back to back, 10-15 ms of work queued at all times (CUDA-event fences), while this thread polls NVML's
   total-energy counter and averages power between two counter ticks ``power_ticks`` apart
   (``nvml_energy_counter``), or samples ``nvmlDeviceGetPowerUsage`` where the counter is missing
   (``nvml_power_sampled``), after ``sample_settle_s`` (1.2 s: NVML averages that reading over the last second on
   Ampere and newer boards, so earlier samples still hold the time before the work started). SM/memory clocks
   and temperature are sampled inside that window.
5. **Energy per call** = ``power_w`` (NVML, step 4) x ``runtime_ms`` (CUDA events, step 3): the two
   measured quantities; energy is derived, never measured separately.

Rows carry ``sm_clock_mhz`` (median in the power window), ``mem_clock_mhz``, ``temperature_c`` (end of
the window), ``throttled`` (SM clock below its maximum anywhere in the window); ``env`` carries the
driver, torch and CUDA versions, power limit, ``over_power_limit`` (kept, flagged, never clipped), the
timing windows (min/max) and the power window. Without a GPU, ``hardware`` and ``measure`` raise one
clear ``NoCudaDevice`` line; a workload that fails on the GPU (OOM, invalid shape) becomes an error row.
"""

from __future__ import annotations

import contextlib
import json
import math
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch

from data.backends import base_row, environment
from data.hardware import HardwareRegistry, HardwareSpec, UnknownHardwareError
from data.nvml import NvmlPower, PowerReading, keep_busy
from data.workloads import build, count_cost


class NoCudaDevice(RuntimeError):
    """The cuda backend needs a CUDA device and this machine has none."""


def require_cuda(index: int = 0) -> None:
    if not torch.cuda.is_available():
        raise NoCudaDevice("no CUDA device (torch.cuda.is_available() is False): the cuda backend needs an NVIDIA GPU")
    if index >= torch.cuda.device_count():
        raise NoCudaDevice(f"no CUDA device {index}: this machine has {torch.cuda.device_count()}")


@contextlib.contextmanager
def fp32_math(dtype: str):
    """TF32 on for dtype ``tf32``, off (IEEE) otherwise, for cuBLAS and cuDNN convolutions; restored after.

    Uses only the ``fp32_precision`` API: torch refuses a mix of it and the legacy ``allow_tf32`` flags.
    """
    want = "tf32" if dtype == "tf32" else "ieee"
    knobs = [torch.backends.cuda.matmul, torch.backends.cudnn.conv]
    old = [k.fp32_precision for k in knobs]
    try:
        for k in knobs:
            k.fp32_precision = want
        yield
    finally:
        for k, v in zip(knobs, old):
            k.fp32_precision = v


# --------------------------------------------------------------------------- timing
@dataclass
class Timing:
    runtime_ms: float  # median over windows of the per-call time
    min_ms: float
    max_ms: float
    iqr_ms: float
    windows: int
    calls_per_window: int
    method: str  # cuda_events | cuda_graph
    launch: Callable[[], None]  # enqueues one unit of work (graph replay or eager batch)
    calls_per_launch: int
    eager_estimate_us: float
    note: str | None = None  # e.g. why a graph was wanted but not used

    def summary(self) -> dict:
        return {
            "timing_method": self.method,
            "timing_note": self.note,
            "runtime_min_ms": self.min_ms,
            "runtime_max_ms": self.max_ms,
            "timing_windows": self.windows,
            "calls_per_window": self.calls_per_window,
            "calls_per_launch": self.calls_per_launch,
            "eager_estimate_us": round(self.eager_estimate_us, 3),
        }


def _elapsed_ms(run: Callable[[], None], lead: Callable[[], None] | None = None) -> float:
    """Device time of the work ``run`` enqueues. ``lead`` is enqueued first, outside the two events: the device has
    work while the host records the start and launches ``run``, so a host that is late by less than the lead's
    device time (a preempted thread, a GC pause) does not add idle time to the window."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if lead is not None:
        lead()
    start.record()
    run()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def _capture(fn: Callable[[], object], calls: int) -> torch.cuda.CUDAGraph:
    """``calls`` back-to-back calls of ``fn`` as one CUDA graph (warmed up on a side stream first, as the
    torch docs require)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    torch.cuda.synchronize()
    return graph


def _capture_timed(fn: Callable[[], object], calls: int) -> tuple[torch.cuda.CUDAGraph, float]:
    """:func:`_capture` and the device time of one warm replay (ms: the least of three, as a late host only adds)."""
    g = _capture(fn, calls)
    g.replay()
    torch.cuda.synchronize()
    return g, min(_elapsed_ms(g.replay, lead=g.replay) for _ in range(3))


def time_calls(
    fn: Callable[[], object],
    *,
    windows: int = 7,
    min_window_ms: float = 20.0,
    graph: str | bool = "auto",
    graph_threshold_us: float = 30.0,
    graph_min_ms: float = 1.0,
    max_calls_per_graph: int = 1000,
    warmup: int = 3,
) -> Timing:
    """Per-call runtime of ``fn`` on the current CUDA device (see the module docstring).

    ``graph``: ``"auto"`` (graph when the eager estimate is under ``graph_threshold_us``), ``True``
    (always: whole networks) or ``False``. A graph holds enough calls to last ``graph_min_ms`` (at most
    ``max_calls_per_graph``); each window replays it enough times to last ``min_window_ms``.
    """
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    probe = 10
    est_ms = _elapsed_ms(lambda: [fn() for _ in range(probe)]) / probe
    if est_ms > 0:  # refine with two ~min_window_ms/4 windows; the faster one (a stall only adds time)
        n = max(1, min(10000, math.ceil(min_window_ms / 4 / est_ms)))
        est_ms = min(_elapsed_ms(lambda: [fn() for _ in range(n)]) / n for _ in range(2))
    use_graph = graph is True or (graph == "auto" and est_ms * 1e3 < graph_threshold_us)

    unit_ms, per_launch, method, launch, note = est_ms, 1, "cuda_events", fn, None
    if use_graph:
        per_graph = max(1, min(max_calls_per_graph, math.ceil(graph_min_ms / max(est_ms, 1e-6))))
        try:
            g, unit_ms = _capture_timed(fn, per_graph)
            # The eager estimate of a short kernel is the host's launch time, not the kernel's: a graph sized from
            # it replays in a fraction of graph_min_ms, and the host may not keep ahead of its replays. Resize it
            # from its own device time (a tiny graph's replay time still holds some launch overhead: <= 3 tries).
            for _ in range(3):
                grown = min(max_calls_per_graph, math.ceil(per_graph * graph_min_ms / max(unit_ms, 1e-6)))
                if grown <= 1.5 * per_graph:
                    break
                del g
                per_graph = grown
                g, unit_ms = _capture_timed(fn, per_graph)
        except RuntimeError as exc:  # an op that cannot be captured: time it eagerly and say so
            torch.cuda.synchronize()
            unit_ms, note = est_ms, f"graph capture failed, timed eagerly: {type(exc).__name__}: {exc}"[:300]
        else:
            launch, per_launch, method = g.replay, per_graph, "cuda_graph"
    reps = max(1, math.ceil(min_window_ms / max(unit_ms, 1e-6)))
    lead = max(1, math.ceil(min(1.0, min_window_ms / 4) / max(unit_ms, 1e-6)))  # ~1 ms of work ahead of each window

    def window() -> None:
        for _ in range(reps):
            launch()

    def ahead() -> None:
        for _ in range(lead):
            launch()

    per_call = sorted(_elapsed_ms(window, lead=ahead) / (reps * per_launch) for _ in range(windows))
    q1, q3 = (statistics.quantiles(per_call, n=4, method="inclusive") if len(per_call) > 1 else (per_call[0],) * 3)[::2]
    return Timing(
        runtime_ms=float(statistics.median(per_call)),
        min_ms=per_call[0],
        max_ms=per_call[-1],
        iqr_ms=float(q3 - q1),
        windows=windows,
        calls_per_window=reps * per_launch,
        method=method,
        launch=launch,
        calls_per_launch=per_launch,
        eager_estimate_us=est_ms * 1e3,
        note=note,
    )


def measure_power(
    nvml_power: NvmlPower, timing: Timing, device_index: int = 0, batch_ms: float = 5.0, depth: int = 3
) -> PowerReading:
    """Average board power while ``timing.launch`` runs back to back in a worker thread.

    The worker enqueues batches of launches lasting ~``batch_ms`` each and waits (CUDA event per batch)
    only on the batch ``depth`` back, so ``depth - 1`` to ``depth`` batches (10-15 ms) stay queued while it
    waits: the GPU does not run dry if the host thread is late, and the launch queue stays well below
    CUDA's ~1024 pending launches (eager launches are >= 30 us each; shorter kernels are graph replays).
    """
    unit_ms = timing.runtime_ms * timing.calls_per_launch
    per_batch = max(1, math.ceil(batch_ms / max(unit_ms, 1e-6)))
    launch = timing.launch

    def batch() -> None:
        for _ in range(per_batch):
            launch()

    def fence():
        ev = torch.cuda.Event()
        ev.record()
        return ev

    def setup() -> None:  # the current device and grad mode are per thread
        torch.cuda.set_device(device_index)
        torch.set_grad_enabled(False)

    # The poller must get the GIL back within ~0.1 ms of each sleep, not after Python's default 5 ms
    # switch interval while the worker launches: an edge noted late is a window measured wrong.
    old_switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    try:
        with keep_busy(batch, fence=fence, depth=depth, setup=setup) as worker:
            reading = nvml_power.measure(worker)
    finally:
        sys.setswitchinterval(old_switch)
    torch.cuda.synchronize()
    if reading.worker_launches is not None:
        reading.worker_launches *= per_batch * timing.calls_per_launch  # calls, not batches
    return reading


def power_fields(reading: PowerReading | None, runtime_ms: float | None) -> dict:
    """Schema columns from a power reading: power_w as measured (never clipped), energy_j = power x runtime."""
    if reading is None:
        return {
            "power_w": None,
            "energy_j": None,
            "power_method": None,
            "sm_clock_mhz": None,
            "mem_clock_mhz": None,
            "temperature_c": None,
            "throttled": None,
        }
    return {
        "power_w": reading.power_w,
        "energy_j": None if runtime_ms is None else reading.power_w * runtime_ms * 1e-3,
        "power_method": reading.method,
        "sm_clock_mhz": reading.sm_clock_mhz,
        "mem_clock_mhz": reading.mem_clock_mhz,
        "temperature_c": reading.temperature_c,
        "throttled": reading.throttled,
    }


# --------------------------------------------------------------------------- backend
class CudaBackend:
    """One workload in, one measured row out, on CUDA device ``device_index``."""

    name = "cuda"

    def __init__(
        self,
        device_index: int = 0,
        windows: int = 7,
        min_window_ms: float = 20.0,
        graph: str | bool = "auto",
        graph_threshold_us: float = 30.0,
        graph_min_ms: float = 1.0,
        max_calls_per_graph: int = 1000,
        warmup: int = 3,
        power: bool = True,
        power_ticks: int = 4,
        settle_ticks: int = 1,
        min_power_window_s: float = 0.3,
        poll_interval_ms: float = 0.5,
        sample_window_s: float = 1.0,
        sample_settle_s: float = 1.2,
        source: str = "cuda-sweep",
        registry: HardwareRegistry | None = None,
        nvml_power: NvmlPower | None = None,
    ):
        self.device_index = int(device_index)
        self.timing_kw = dict(
            windows=int(windows),
            min_window_ms=float(min_window_ms),
            graph=graph,
            graph_threshold_us=float(graph_threshold_us),
            graph_min_ms=float(graph_min_ms),
            max_calls_per_graph=int(max_calls_per_graph),
            warmup=int(warmup),
        )
        self.power = bool(power)
        self.power_kw = dict(
            ticks=int(power_ticks),
            settle_ticks=int(settle_ticks),
            min_window_s=float(min_power_window_s),
            poll_interval_s=float(poll_interval_ms) * 1e-3,
            sample_window_s=float(sample_window_s),
            sample_settle_s=float(sample_settle_s),
        )
        self.source = source
        self._registry = registry
        self._nvml = nvml_power
        self._hardware: HardwareSpec | None = None

    # ---- lazily opened: constructing the backend (e.g. from Hydra) touches no GPU
    @property
    def hardware(self) -> HardwareSpec:
        if self._hardware is None:
            require_cuda(self.device_index)
            registry = self._registry or HardwareRegistry.from_dir()
            name = torch.cuda.get_device_name(self.device_index)
            if name not in registry:
                raise UnknownHardwareError(
                    f"GPU {name!r} is not in the hardware registry: add it (or this name as an alias) to conf/hardware/"
                )
            self._hardware = registry.get(name)
        return self._hardware

    @property
    def nvml_power(self) -> NvmlPower | None:
        if self._nvml is None and self.power:
            self._nvml = NvmlPower.open(self._nvml_index(), **self.power_kw)
        return self._nvml

    def _nvml_index(self) -> int:
        """NVML numbers devices without CUDA_VISIBLE_DEVICES; match by UUID where torch exposes it."""
        import pynvml

        uuid = getattr(torch.cuda.get_device_properties(self.device_index), "uuid", None)
        if uuid is not None:
            try:
                pynvml.nvmlInit()
                try:
                    return int(pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")))
                finally:
                    pynvml.nvmlShutdown()
            except pynvml.NVMLError:
                pass
        return self.device_index

    def environment(self) -> dict:
        extra = {
            "cuda": torch.version.cuda,
            "device_index": self.device_index,
            "gpu": torch.cuda.get_device_name(self.device_index),
            **{k: v for k, v in self.timing_kw.items()},
        }
        if self.nvml_power is not None:
            extra["driver"] = self.nvml_power.driver_version
        return environment(**extra)

    def measure_fn(
        self, fn: Callable[[], object], graph: str | bool | None = None
    ) -> tuple[Timing, PowerReading | None]:
        """Time (and power-measure) any callable on this backend's device: the part the benchmark reuses."""
        require_cuda(self.device_index)
        kw = dict(self.timing_kw)
        if graph is not None:
            kw["graph"] = graph
        timing = time_calls(fn, **kw)
        reading = measure_power(self.nvml_power, timing, self.device_index) if self.power else None
        return timing, reading

    def measure(self, workload: dict) -> dict:
        hw = self.hardware  # raises NoCudaDevice here, not an error row: no device is not a bad config
        torch.cuda.set_device(self.device_index)
        env = self.environment()
        row = base_row(workload, hw.id, self.name, self.source, env)
        op, params, dtype = workload["op"], workload["params"], workload["dtype"]
        graph = True if workload.get("graph") or row["family"] == "network" else None
        try:
            row["flops"], row["bytes"] = count_cost(op, params, dtype)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device_index)
            with torch.no_grad(), fp32_math(dtype):
                fn, inputs, _ = build(op, params, dtype, device=f"cuda:{self.device_index}")
                fn(*inputs)
                torch.cuda.synchronize()
                peak = torch.cuda.max_memory_allocated(self.device_index)
                timing, reading = self.measure_fn(lambda: fn(*inputs), graph=graph)
            row.update(
                status="ok",
                error=None,
                runtime_ms=timing.runtime_ms,
                runtime_iqr_ms=timing.iqr_ms,
                runtime_repeats=timing.windows,
                timing_method=timing.method,
                peak_mem_bytes=float(peak),
                **power_fields(reading, timing.runtime_ms),
            )
            env.update(timing.summary())
            if reading is not None:
                env.update(reading.summary())
                if reading.worker_launches:  # cross-check: did the GPU stay busy through the power window?
                    in_window = reading.window_s * 1e3 / reading.worker_launches
                    env["runtime_ms_in_power_window"] = in_window
                    env["power_window_busy_fraction"] = round(min(1.0, timing.runtime_ms / in_window), 4)
            row["env"] = json.dumps(env, sort_keys=True, default=str)
        except Exception as exc:  # OOM, invalid shape: an error row, not a crash
            row.update(status="error", error=f"{type(exc).__name__}: {exc}"[:500], runtime_ms=None)
            row.setdefault("flops", 0.0)
            row.setdefault("bytes", 1.0)
        finally:
            fn = inputs = timing = None  # noqa: F841 (free the graph and tensors before the next workload)
            torch.cuda.empty_cache()
        return row
