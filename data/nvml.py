"""GPU power and energy from NVML while a kernel runs, and the device state around it.

Two parts, both usable without a GPU (tests inject a fake ``nvml`` module and a CPU-side workload):

* :func:`keep_busy` runs a ``launch`` callable back to back in a worker thread, so the device never
  idles while the host reads sensors (reading the counter between synchronised batches from the same
  thread left the GPU idle during each read and read power a median 31% low on an H200, see
  ``../shared/data/README.md``). With a ``fence`` factory (a CUDA event) it keeps at most ``depth``
  batches in flight: the launch queue always holds at least one batch while the thread waits.
* :class:`NvmlPower` reads one device through an ``nvml`` module-like object (``pynvml`` from
  ``nvidia-ml-py``, or a fake with the same functions).

How power is measured (:meth:`NvmlPower.measure`), method recorded per row as ``power_method``:

``nvml_energy_counter``
    ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since driver load, Volta and later) moves in steps:
    about every 100 ms on Hopper. Energy over an arbitrary window is off by up to one step (a 0.5 s
    window can read 20% high or low: a naive loop read 919 W on a 700 W board). So the window is
    aligned to counter ticks: poll the counter every ``poll_interval_s`` and note the host time of
    each change (midpoint of the last poll that saw the old value and the first that saw the new
    one); skip ``settle_ticks`` edges (power ramps up when the work starts), then

        power_w = (E[edge settle + ticks] - E[edge settle]) / (t[edge settle + ticks] - t[edge settle])

    The window closes on the first edge that is at least ``ticks`` steps and ``min_window_s`` after the
    opening edge (a GPU whose counter moves every few ms still gets a ~0.3 s window).
    The energy is exactly what the device accumulated between two updates; the only errors left are
    the edge-time uncertainty (~ the poll interval, 0.5 ms over a ~400 ms window: ~0.1%) and jitter in
    the driver's update instants.
``nvml_power_sampled``
    Only where the counter raises ``NVMLError_NotSupported`` (older GPUs): the mean of
    ``nvmlDeviceGetPowerUsage`` (mW) sampled every ``sample_interval_s`` over ``sample_window_s``
    after a settle time. The sensor itself averages over a driver-defined window (often ~1 s), so this
    is coarser; it is the fallback, never the first choice.

Device state (:meth:`NvmlPower.state`): SM and memory clocks, temperature, enforced power limit;
sampled at every counter edge inside the window. ``throttled`` = the lowest SM clock seen in the window
is below the maximum SM clock (``nvmlDeviceGetMaxClockInfo``). A power average above the board limit
(seen up to 778 W on a 700 W H200 under throttling) is kept and flagged ``over_power_limit``, never
clipped.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field


class PowerMeasurementError(RuntimeError):
    """The sensor gave no usable reading (no counter movement, worker died, ...)."""


# --------------------------------------------------------------------------- keeping the device busy
class BusyWorker:
    """Calls ``launch()`` back to back in a daemon thread until :meth:`stop` (use :func:`keep_busy`).

    ``fence()`` (optional) is called after each launch and returns an object with ``synchronize()``
    (a recorded ``torch.cuda.Event``); the worker waits on the fence of the batch ``depth`` launches
    back, so the device queue never runs dry and never grows without bound. ``setup()`` runs once in
    the thread first (e.g. ``torch.cuda.set_device``: the current device is per thread).
    """

    def __init__(
        self,
        launch: Callable[[], object],
        fence: Callable[[], object] | None = None,
        depth: int = 2,
        setup: Callable[[], object] | None = None,
    ):
        self.launch, self.fence, self.depth, self.setup = launch, fence, max(1, int(depth)), setup
        self.launches = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="busy-worker", daemon=True)

    def _run(self) -> None:
        try:
            if self.setup is not None:
                self.setup()
            pending: deque = deque()
            self._started.set()
            while not self._stop.is_set():
                self.launch()
                self.launches += 1
                if self.fence is not None:
                    pending.append(self.fence())
                    while len(pending) > self.depth:
                        pending.popleft().synchronize()
            for f in pending:
                f.synchronize()
        except BaseException as exc:  # reported by the measuring thread
            self.error = exc
            self._started.set()

    def start(self) -> BusyWorker:
        self._thread.start()
        self._started.wait()
        self.check()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.check()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and self.error is None

    def check(self) -> None:
        if self.error is not None:
            raise PowerMeasurementError(
                f"busy worker failed: {type(self.error).__name__}: {self.error}"
            ) from self.error

    def __enter__(self) -> BusyWorker:
        return self.start()

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        if exc[0] is None:
            self.check()


def keep_busy(
    launch: Callable[[], object],
    fence: Callable[[], object] | None = None,
    depth: int = 2,
    setup: Callable[[], object] | None = None,
) -> BusyWorker:
    """Context manager: ``with keep_busy(launch): reading = nvml_power.measure()``."""
    return BusyWorker(launch, fence=fence, depth=depth, setup=setup)


# --------------------------------------------------------------------------- NVML reads
@dataclass
class DeviceState:
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    temperature_c: float | None = None
    power_limit_w: float | None = None


@dataclass
class PowerReading:
    power_w: float
    method: str  # nvml_energy_counter | nvml_power_sampled
    window_s: float  # host seconds between the two tick edges (or sampled span)
    energy_j: float | None = None  # device energy between the edges (counter method)
    ticks: int | None = None  # counter steps inside the window
    samples: int = 0  # counter polls or power samples taken
    states: list[DeviceState] = field(default_factory=list)  # sampled inside the window
    max_sm_clock_mhz: float | None = None
    worker_launches: int | None = None  # launches the busy worker issued inside the window
    edge_gap_s: float | None = None  # the larger poll gap at the two window edges (edge-time uncertainty)

    @property
    def sm_clock_mhz(self) -> float | None:
        vals = [s.sm_clock_mhz for s in self.states if s.sm_clock_mhz is not None]
        return float(statistics.median(vals)) if vals else None

    @property
    def min_sm_clock_mhz(self) -> float | None:
        vals = [s.sm_clock_mhz for s in self.states if s.sm_clock_mhz is not None]
        return float(min(vals)) if vals else None

    @property
    def mem_clock_mhz(self) -> float | None:
        vals = [s.mem_clock_mhz for s in self.states if s.mem_clock_mhz is not None]
        return float(statistics.median(vals)) if vals else None

    @property
    def temperature_c(self) -> float | None:
        """The temperature at the end of the window (the hottest the kernel made it)."""
        vals = [s.temperature_c for s in self.states if s.temperature_c is not None]
        return float(vals[-1]) if vals else None

    @property
    def power_limit_w(self) -> float | None:
        vals = [s.power_limit_w for s in self.states if s.power_limit_w is not None]
        return float(vals[-1]) if vals else None

    @property
    def throttled(self) -> bool | None:
        """True when the SM clock fell below its maximum anywhere in the window."""
        low = self.min_sm_clock_mhz
        if low is None or not self.max_sm_clock_mhz:
            return None
        return bool(low < self.max_sm_clock_mhz)

    @property
    def over_power_limit(self) -> bool | None:
        limit = self.power_limit_w
        return None if limit is None else bool(self.power_w > limit)

    def summary(self) -> dict:
        """JSON-ready details for a row's ``env`` (the schema columns carry the headline numbers)."""
        return {
            "power_method": self.method,
            "power_window_s": round(self.window_s, 6),
            "energy_window_j": None if self.energy_j is None else round(self.energy_j, 6),
            "counter_ticks": self.ticks,
            "power_samples": self.samples,
            "sm_clock_min_mhz": self.min_sm_clock_mhz,
            "sm_clock_max_mhz": self.max_sm_clock_mhz,
            "power_limit_w": self.power_limit_w,
            "over_power_limit": self.over_power_limit,
            "throttled": self.throttled,
            "worker_launches_in_window": self.worker_launches,
            "edge_gap_ms": None if self.edge_gap_s is None else round(self.edge_gap_s * 1e3, 3),
        }


class NvmlPower:
    """Power, energy and state of one GPU through an ``nvml`` module-like object.

    ``nvml`` needs the ``pynvml`` names used here: ``nvmlInit``, ``nvmlShutdown``,
    ``nvmlDeviceGetHandleByIndex``, ``nvmlDeviceGetTotalEnergyConsumption`` (mJ),
    ``nvmlDeviceGetPowerUsage`` (mW), ``nvmlDeviceGetClockInfo`` / ``nvmlDeviceGetMaxClockInfo`` with
    ``NVML_CLOCK_SM`` / ``NVML_CLOCK_MEM``, ``nvmlDeviceGetTemperature`` with ``NVML_TEMPERATURE_GPU``,
    ``nvmlDeviceGetEnforcedPowerLimit`` (mW), ``nvmlSystemGetDriverVersion``, ``nvmlDeviceGetName``,
    ``NVMLError`` and ``NVMLError_NotSupported``.
    """

    def __init__(
        self,
        nvml,
        index: int = 0,
        *,
        ticks: int = 4,
        settle_ticks: int = 1,
        min_window_s: float = 0.3,
        poll_interval_s: float = 0.0005,
        tick_timeout_s: float = 1.0,
        sample_window_s: float = 1.0,
        sample_interval_s: float = 0.02,
        sample_settle_s: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
    ):
        if ticks < 1:
            raise ValueError(f"ticks must be >= 1, got {ticks}")
        self.nvml = nvml
        self.ticks, self.settle_ticks, self.min_window_s = int(ticks), int(settle_ticks), float(min_window_s)
        self.poll_interval_s, self.tick_timeout_s = float(poll_interval_s), float(tick_timeout_s)
        self.sample_window_s, self.sample_interval_s = float(sample_window_s), float(sample_interval_s)
        self.sample_settle_s = float(sample_settle_s)
        self.clock = clock
        nvml.nvmlInit()
        self.handle = nvml.nvmlDeviceGetHandleByIndex(int(index))
        self._has_counter: bool | None = None

    @classmethod
    def open(cls, index: int = 0, **kwargs) -> NvmlPower:
        """The real device through ``pynvml`` (package ``nvidia-ml-py``)."""
        import pynvml

        return cls(pynvml, index, **kwargs)

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass

    # ---- static facts
    def _str(self, value) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    @property
    def name(self) -> str:
        return self._str(self.nvml.nvmlDeviceGetName(self.handle))

    @property
    def driver_version(self) -> str:
        return self._str(self.nvml.nvmlSystemGetDriverVersion())

    @property
    def max_sm_clock_mhz(self) -> float | None:
        return self._try(self.nvml.nvmlDeviceGetMaxClockInfo, self.handle, self.nvml.NVML_CLOCK_SM)

    @property
    def has_energy_counter(self) -> bool:
        if self._has_counter is None:
            try:
                self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
                self._has_counter = True
            except self.nvml.NVMLError_NotSupported:
                self._has_counter = False
        return self._has_counter

    def _try(self, fn, *args, scale: float = 1.0) -> float | None:
        """One optional reading; a sensor the board lacks gives None (recorded empty, never invented)."""
        try:
            return float(fn(*args)) * scale
        except self.nvml.NVMLError:
            return None

    def state(self) -> DeviceState:
        n, h = self.nvml, self.handle
        return DeviceState(
            sm_clock_mhz=self._try(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM),
            mem_clock_mhz=self._try(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_MEM),
            temperature_c=self._try(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU),
            power_limit_w=self._try(n.nvmlDeviceGetEnforcedPowerLimit, h, scale=1e-3),
        )

    def energy_mj(self) -> int:
        return int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))

    def power_usage_w(self) -> float:
        return self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0

    # ---- measurement
    def measure(self, worker: BusyWorker | None = None) -> PowerReading:
        """Average board power now (call it while ``worker`` keeps the device busy)."""
        if self.has_energy_counter:
            reading = self._tick_aligned(worker)
        else:
            reading = self._sampled(worker)
        reading.max_sm_clock_mhz = self.max_sm_clock_mhz
        return reading

    def _check(self, worker: BusyWorker | None) -> None:
        if worker is not None:
            worker.check()
            if not worker.alive:
                raise PowerMeasurementError("busy worker stopped before the power window closed")

    def _tick_aligned(self, worker: BusyWorker | None) -> PowerReading:
        first = self.settle_ticks  # index of the edge that opens the window
        edges: list[tuple[float, int, int | None, float]] = []  # (host time, mJ, worker launches, poll gap)
        states: list[DeviceState] = []
        polls = 0
        t_prev, e_prev = self.clock(), self.energy_mj()
        t_last_edge = t_prev

        def done() -> bool:  # >= ticks counter steps and >= min_window_s, closing on an edge
            return len(edges) - 1 - first >= self.ticks and edges[-1][0] - edges[first][0] >= self.min_window_s

        while not done():
            time.sleep(self.poll_interval_s)
            t_now, e_now = self.clock(), self.energy_mj()
            polls += 1
            if e_now != e_prev:
                edges.append(
                    (0.5 * (t_prev + t_now), e_now, None if worker is None else worker.launches, t_now - t_prev)
                )
                t_last_edge = t_now
                if len(edges) > first:  # inside the window: sample the device state at each edge
                    states.append(self.state())
                self._check(worker)
            elif t_now - t_last_edge > self.tick_timeout_s:
                raise PowerMeasurementError(
                    f"NVML energy counter did not move for {self.tick_timeout_s:.2f} s "
                    f"({len(edges)} of {first + self.ticks + 1} edges seen)"
                )
            t_prev, e_prev = t_now, e_now
        (t0, e0, n0, gap0), (t1, e1, n1, gap1) = edges[first], edges[-1]
        window, energy_j = t1 - t0, (e1 - e0) / 1000.0
        if window <= 0 or energy_j <= 0:
            raise PowerMeasurementError(f"NVML energy counter gave no usable window ({energy_j} J over {window} s)")
        return PowerReading(
            power_w=energy_j / window,
            method="nvml_energy_counter",
            window_s=window,
            energy_j=energy_j,
            ticks=len(edges) - 1 - first,
            samples=polls,
            states=states,
            worker_launches=None if n0 is None else n1 - n0,
            edge_gap_s=max(gap0, gap1),
        )

    def _sampled(self, worker: BusyWorker | None) -> PowerReading:
        time.sleep(self.sample_settle_s)
        self._check(worker)
        samples, states = [], []
        n0 = None if worker is None else worker.launches
        t0 = self.clock()
        while True:
            samples.append(self.power_usage_w())
            if len(samples) % 10 == 1:
                states.append(self.state())
            t = self.clock()
            if t - t0 >= self.sample_window_s:
                break
            time.sleep(self.sample_interval_s)
        self._check(worker)
        states.append(self.state())
        return PowerReading(
            power_w=float(statistics.fmean(samples)),
            method="nvml_power_sampled",
            window_s=t - t0,
            samples=len(samples),
            states=states,
            worker_launches=None if n0 is None else worker.launches - n0,
        )
