"""A fake NVML module (the one place a fake is right: no GPU exists in CI).

It behaves like ``pynvml`` for the calls ``data.nvml.NvmlPower`` makes, with the physics that make power hard to
read on a real board (all in real ``time.monotonic()`` seconds):

* **work queue**: the device is busy while it has queued work (:meth:`FakeGpu.enqueue`, like a CUDA stream);
* **power ramp**: board power follows the work through a first-order lag of time constant ``ramp_s`` (30 ms:
  ~95% of the way in ~100 ms after a kernel starts, and the same decay after it ends), from ``idle_power_w``
  to ``busy_power_w``: ``P(t) = idle + (busy - idle) * a(t)``, ``da/dt = (busy(t) - a) / ramp_s``;
* **energy counter** (``nvmlDeviceGetTotalEnergyConsumption``): the exact integral of ``P``, but, like Hopper's,
  it only moves about every ``tick_s`` (each update a few ms early or late, offset by a phase so ticks do not
  line up with anything the host does), reporting the energy accumulated up to that update;
* **power sensor** (``nvmlDeviceGetPowerUsage``): the mean of ``P`` over the last ``sensor_window_s`` (1 s: NVML
  documents a 1-second average on Ampere and newer; 0 gives the instantaneous power of older boards).

:meth:`FakeGpu.true_power_w` and :meth:`FakeGpu.energy_j_at` are the ground truth the tests compare readings to.
"""

from __future__ import annotations

import bisect
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
    def __init__(
        self,
        busy_power_w: float = 700.0,
        idle_power_w: float = 70.0,
        tick_s: float = 0.1,
        has_counter: bool = True,
        sm_clock_mhz: float = 1980,
        max_sm_clock_mhz: float = 1980,
        mem_clock_mhz: float = 3201,
        temperature_c: float = 55,
        power_limit_w: float = 700.0,
        phase_s: float = 0.037,
        tick_jitter_s: float = 0.004,
        seed: int = 0,
        name: str = "NVIDIA H200",
        ramp_s: float = 0.03,
        sensor_window_s: float = 1.0,
    ):
        self.busy_power_w, self.idle_power_w, self.tick_s = busy_power_w, idle_power_w, tick_s
        self.has_counter = has_counter
        self.sm_clock_mhz, self.max_sm_clock_mhz, self.mem_clock_mhz = sm_clock_mhz, max_sm_clock_mhz, mem_clock_mhz
        self.temperature_c, self.power_limit_w, self.name = temperature_c, power_limit_w, name
        self.ramp_s, self.sensor_window_s = ramp_s, sensor_window_s
        self.t0 = time.monotonic() - phase_s
        self._busy: list[list[float]] = []  # merged [start, end] intervals of device work
        self._lock = threading.Lock()
        self._ticks: dict[int, int] = {}  # the counter's value per tick, fixed when first read
        self._rng = random.Random(seed)
        self.tick_jitter_s = tick_jitter_s
        self._jitter: dict[int, float] = {}
        # activity a(t) and its integral at the end of each closed busy interval (times ascending)
        self._ckpt_t, self._ckpt = [self.t0], [(0, 0.0, 0.0)]  # (intervals before, a, integral of a)

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

    def _activity(self, t: float) -> tuple[float, float]:
        """``(a(t), integral of a from t0 to t)``: the first-order lag over the busy intervals, in closed form."""
        tau = self.ramp_s

        def step(a, area, u, d):  # constant input u for d seconds
            if d <= 0:
                return a, area
            if tau <= 0:
                return u, area + u * d
            decay = math.exp(-d / tau)
            return u + (a - u) * decay, area + u * d + (a - u) * tau * (1 - decay)

        if t <= self.t0:  # idle before the fake existed
            return 0.0, 0.0
        with self._lock:  # the poller, the worker and the sensor read it from several threads
            busy = self._busy
            j = bisect.bisect_right(self._ckpt_t, t) - 1
            i, a, area = self._ckpt[j]
            now = self._ckpt_t[j]
            while i < len(busy) and now < t:
                s, e = busy[i]
                a, area = step(a, area, 0.0, min(s, t) - now)
                now = max(now, min(s, t))
                a, area = step(a, area, 1.0, min(e, t) - now)
                now = max(now, min(e, t))
                if now >= e:
                    i += 1
                    if i < len(busy) and e > self._ckpt_t[-1]:  # a closed interval (only the last grows): keep
                        self._ckpt_t.append(e)
                        self._ckpt.append((i, a, area))
            return step(a, area, 0.0, t - now)

    def mean_power_between_updates(self, energy_j: float) -> float:
        """The true mean power between the two counter updates read so far whose values differ by ``energy_j``
        (a tick-aligned reading's energy): what that reading measures, up to the host's timing of the two edges."""
        ticks = sorted(self._ticks.items())
        pairs = [
            (k1, k2)
            for i, (k1, e1) in enumerate(ticks)
            for k2, e2 in ticks[i + 1 :]
            if abs((e2 - e1) / 1e3 - energy_j) < 5e-4
        ]
        assert len(pairs) == 1, f"{len(pairs)} pairs of counter updates differ by {energy_j} J"
        ((k1, k2),) = pairs
        return energy_j / (self.tick_time(k2) - self.tick_time(k1))

    def energy_j_at(self, t: float) -> float:
        """True energy since t0 (what the counter would say with infinite resolution; idle power before t0)."""
        return self.idle_power_w * (t - self.t0) + (self.busy_power_w - self.idle_power_w) * self._activity(t)[1]

    def true_power_w(self, t: float) -> float:
        """Instantaneous board power at ``t`` (the ramped activity)."""
        return self.idle_power_w + (self.busy_power_w - self.idle_power_w) * self._activity(t)[0]

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
        """What the power sensor reports now: the mean power over the last ``sensor_window_s``."""
        now = time.monotonic()
        if self.sensor_window_s <= 0:
            return self.true_power_w(now)
        start = now - self.sensor_window_s  # the board idled before t0
        return (self.energy_j_at(now) - self.energy_j_at(start)) / self.sensor_window_s


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
