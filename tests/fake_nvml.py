"""A fake NVML module (the one place a fake is right: no GPU exists in CI).

It behaves like ``pynvml`` for the calls ``data.nvml.NvmlPower`` makes. Energy follows real
``time.monotonic()``: the device draws ``busy_power_w`` while it has queued work (:meth:`FakeGpu.enqueue`, like a
CUDA stream) and ``idle_power_w`` otherwise; like Hopper's counter, the reported total energy
only moves about every ``tick_s`` (each update a few ms early or late; it reports the energy accumulated up to that update, offset by a
phase so ticks do not line up with anything the host does).
"""
from __future__ import annotations

import math
import random
import threading
import time


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
NVML_TEMPERATURE_GPU = 0


class FakeGpu:
    def __init__(self, busy_power_w: float = 700.0, idle_power_w: float = 70.0, tick_s: float = 0.1,
                 has_counter: bool = True, sm_clock_mhz: float = 1980, max_sm_clock_mhz: float = 1980,
                 mem_clock_mhz: float = 3201, temperature_c: float = 55, power_limit_w: float = 700.0,
                 phase_s: float = 0.037, tick_jitter_s: float = 0.004, seed: int = 0,
                 name: str = "NVIDIA H200"):
        self.busy_power_w, self.idle_power_w, self.tick_s = busy_power_w, idle_power_w, tick_s
        self.has_counter = has_counter
        self.sm_clock_mhz, self.max_sm_clock_mhz, self.mem_clock_mhz = sm_clock_mhz, max_sm_clock_mhz, mem_clock_mhz
        self.temperature_c, self.power_limit_w, self.name = temperature_c, power_limit_w, name
        self.t0 = time.monotonic() - phase_s
        self._busy: list[list[float]] = []  # merged [start, end] intervals of device work
        self._lock = threading.Lock()
        self._ticks: dict[int, int] = {}  # the counter's value per tick, fixed when first read
        self._rng = random.Random(seed)
        self.tick_jitter_s = tick_jitter_s
        self._jitter: dict[int, float] = {}

    def tick_time(self, k: int) -> float:
        """Instant of the k-th counter update: every tick_s, each off by up to +-tick_jitter_s."""
        if k not in self._jitter:
            self._jitter[k] = self._rng.uniform(-self.tick_jitter_s, self.tick_jitter_s) if k > 0 else 0.0
        return self.t0 + k * self.tick_s + self._jitter[k]

    # ---- the "device"
    def enqueue(self, seconds: float) -> float:
        """Queue ``seconds`` of work like a CUDA stream: it starts when the device is free (or now) and the
        host does not wait. Returns when it will finish (time.monotonic)."""
        now = time.monotonic()
        with self._lock:
            start = max(now, self._busy[-1][1]) if self._busy else now
            if self._busy and start <= self._busy[-1][1] + 1e-9:
                self._busy[-1][1] = start + seconds
            else:
                self._busy.append([start, start + seconds])
            return start + seconds

    @property
    def free_at(self) -> float:
        with self._lock:
            return self._busy[-1][1] if self._busy else 0.0

    def _busy_time(self, until: float) -> float:
        with self._lock:
            return sum(max(0.0, min(e, until) - s) for s, e in self._busy if s < until)

    def energy_j_at(self, t: float) -> float:
        """True energy since t0 (what the counter would say with infinite resolution)."""
        busy = self._busy_time(t)
        return self.idle_power_w * (t - self.t0) + (self.busy_power_w - self.idle_power_w) * busy

    def counter_mj(self) -> int:
        now = time.monotonic()
        k = math.floor((now - self.t0) / self.tick_s)
        if self.tick_time(k + 1) <= now:
            k += 1
        elif self.tick_time(k) > now:
            k -= 1
        if k not in self._ticks:  # like the driver: one value per update, never revised
            self._ticks[k] = int(self.energy_j_at(self.tick_time(k)) * 1000)
        return self._ticks[k]

    def power_now_w(self) -> float:
        now = time.monotonic()
        with self._lock:
            busy = bool(self._busy) and self._busy[-1][0] <= now <= self._busy[-1][1]
        return self.busy_power_w if busy else self.idle_power_w


class FakeNvml:
    """Module-like object: ``NvmlPower(FakeNvml(gpu))``."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU

    def __init__(self, gpu: FakeGpu):
        self.gpu = gpu
        self.initialised = 0

    def nvmlInit(self):
        self.initialised += 1

    def nvmlShutdown(self):
        self.initialised -= 1

    def nvmlDeviceGetHandleByIndex(self, index):
        if index != 0:
            raise NVMLError(f"no device {index}")
        return self.gpu

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        if not h.has_counter:
            raise NVMLError_NotSupported("Not Supported")
        return h.counter_mj()

    def nvmlDeviceGetPowerUsage(self, h):
        return int(h.power_now_w() * 1000)

    def nvmlDeviceGetClockInfo(self, h, which):
        return h.sm_clock_mhz if which == NVML_CLOCK_SM else h.mem_clock_mhz

    def nvmlDeviceGetMaxClockInfo(self, h, which):
        return h.max_sm_clock_mhz if which == NVML_CLOCK_SM else h.mem_clock_mhz

    def nvmlDeviceGetTemperature(self, h, sensor):
        return h.temperature_c

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return int(h.power_limit_w * 1000)

    def nvmlSystemGetDriverVersion(self):
        return "580.159.04"

    def nvmlDeviceGetName(self, h):
        return h.name
