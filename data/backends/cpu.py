"""Real CPU measurements: torch kernels timed with ``torch.utils.benchmark``.

Per workload, on real tensors, with the thread count pinned (``torch.set_num_threads``) and recorded:

* **time**: a warm-up, then either
  - ``timer="adaptive"``: ``Timer.adaptive_autorange(threshold, min_run_time, max_run_time)``: blocks
    of calls (block size chosen so timer overhead is < 1e-4 of a block) repeated until the block
    times' IQR/median falls below ``threshold`` (after at least ``min_run_time`` s and 4 blocks) or
    ``max_run_time`` s have passed; or
  - ``timer="blocked"``: ``Timer.blocked_autorange(min_run_time)``: blocks for ``min_run_time`` s;
  recorded: median and IQR of the per-call time over blocks (``runtime_ms``, ``runtime_iqr_ms``), the
  coefficient of variation ``runtime_cv = std / mean`` of the block times (sample std, ddof=1; null
  with one block), and the number of blocks ``runtime_repeats`` (calls per block go to ``env``);
* **FLOPs** from ``torch.utils.flop_counter.FlopCounterMode`` and **bytes moved** = every input,
  weight and output tensor touched once (``data.workloads.count_cost``): compulsory traffic, a lower
  bound on what caches and DRAM actually move;
* **peak memory** (``peak_mem_bytes``) = bytes of the live inputs and weights + the growth of the
  process's resident-set high-water mark during one call. Before the call, glibc's free heap pages are
  returned to the OS (``malloc_trim(0)``), so the call's output and workspace must take fresh pages,
  and the high-water mark (``VmHWM`` in ``/proc/self/status``) is reset by writing ``5`` to
  ``/proc/self/clear_refs`` (Linux >= 4.0). Limits: page granularity (4 KiB); it is process-wide, so
  other threads' allocations in that window count; an allocator other than glibc's may keep freed
  memory and hide reuse. ``tracemalloc`` would miss torch's C++ allocations entirely, and
  ``torch.profiler(profile_memory=True)`` costs seconds to start. Where ``clear_refs`` cannot be
  written, ``peak_mem_bytes`` is left empty and ``env.peak_mem`` says why;
* **energy** from Linux RAPL (:class:`Rapl`, ``/sys/class/powercap/intel-rapl*/energy_uj``; AMD Zen
  exposes the same interface): package-domain energy over a separate loop of calls lasting at least
  ``energy_min_time`` s, divided by the number of calls (``energy_j``), and that energy over the loop's
  time (``power_w``). RAPL counts the whole package, idle and other processes included. When RAPL is
  not readable (no powercap, a VM, or ``energy_uj`` being root-only since CVE-2020-8694) both stay
  empty and ``env.energy`` records the reason; nothing is estimated.

A workload that fails (invalid shape, out of memory, ...) becomes an error row with the message.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import re
import statistics
import time
from pathlib import Path

import torch
from torch.utils import benchmark

from data.backends import base_row, environment
from data.hardware import HardwareSpec, detect_cpu
from data.workloads import build, count_cost

POWERCAP = Path("/sys/class/powercap")


class Rapl:
    """Package energy counters of Linux RAPL under a powercap root (``/sys/class/powercap``).

    Top-level domains ``intel-rapl:<n>`` (one per package; sub-domains ``intel-rapl:<n>:<m>`` such as
    core or dram are inside the package and are not added again). Each ``energy_uj`` is a cumulative
    microjoule counter that wraps to 0 after ``max_energy_range_uj``; :meth:`delta_j` adds the range
    back once when a counter went down (so the interval must be shorter than one wrap, minutes at
    hundreds of watts). ``available`` is False, with ``reason`` saying why, when nothing is readable.
    """

    def __init__(self, root: str | Path = POWERCAP):
        self.root = Path(root)
        self.domains: list[Path] = []
        self.reason: str | None = None
        if not self.root.is_dir():
            self.reason = f"no RAPL: {self.root} does not exist (not Linux, or no powercap driver; common in VMs)"
            return
        found = sorted(p for p in self.root.glob("intel-rapl:*") if re.fullmatch(r"intel-rapl:\d+", p.name))
        if not found:
            self.reason = f"no RAPL package domains (intel-rapl:<n>) under {self.root}"
            return
        for d in found:
            try:
                int((d / "energy_uj").read_text())
                self.domains.append(d)
            except PermissionError:
                self.reason = (
                    f"RAPL not readable: permission denied on {d / 'energy_uj'} (root-only since CVE-2020-8694)"
                )
            except (OSError, ValueError) as exc:
                self.reason = f"RAPL not readable: {d / 'energy_uj'}: {exc}"
        if self.domains:
            self.reason = None

    @property
    def available(self) -> bool:
        return bool(self.domains)

    def read_uj(self) -> dict[str, int]:
        return {d.name: int((d / "energy_uj").read_text()) for d in self.domains}

    def _range_uj(self, d: Path) -> int:
        try:
            return int((d / "max_energy_range_uj").read_text())
        except (OSError, ValueError):
            return 2**32  # the MSR counter width in uJ units is unknown; a 32-bit counter is the common case

    def delta_j(self, before: dict[str, int], after: dict[str, int]) -> float:
        """Joules between two readings, summed over packages, undoing at most one wrap per counter."""
        total = 0
        for d in self.domains:
            delta = after[d.name] - before[d.name]
            if delta < 0:
                delta += self._range_uj(d) + 1
            total += delta
        return total / 1e6


def _proc_status_kb(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _malloc_trim() -> None:
    """Return glibc's free heap pages to the OS, so the next call's allocations show up as new RSS."""
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _LIBC.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _LIBC = False
    if _LIBC:
        _LIBC.malloc_trim(0)


_LIBC = None


def _reset_peak_rss() -> str | None:
    """Reset VmHWM to the current RSS; returns None on success or the reason it cannot be done."""
    _malloc_trim()
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return None
    except OSError as exc:
        return f"cannot reset peak RSS (/proc/self/clear_refs: {exc.strerror or exc})"


class CpuBackend:
    name = "cpu"

    def __init__(
        self,
        num_threads: int = 1,
        min_run_time: float = 0.05,
        warmup: int = 2,
        source: str = "cpu-sweep",
        hardware: HardwareSpec | None = None,
        timer: str = "blocked",
        threshold: float = 0.1,
        max_run_time: float = 1.0,
        measure_memory: bool = True,
        energy: bool = True,
        energy_min_time: float = 0.05,
        powercap_root: str | Path = POWERCAP,
    ):
        if timer not in ("blocked", "adaptive"):
            raise ValueError(f"cpu backend: timer must be 'blocked' or 'adaptive', got {timer!r}")
        self.num_threads = int(num_threads)
        self.min_run_time = float(min_run_time)
        self.warmup = int(warmup)
        self.source = source
        self.timer = timer
        self.threshold = float(threshold)
        self.max_run_time = float(max_run_time)
        self.measure_memory = bool(measure_memory)
        self.energy = bool(energy)
        self.energy_min_time = float(energy_min_time)
        self.powercap_root = str(powercap_root)
        self._hardware = hardware
        self._rapl: Rapl | None = None

    @property
    def hardware(self) -> HardwareSpec:
        if self._hardware is None:
            self._hardware = detect_cpu(self.num_threads)
        return self._hardware

    @property
    def rapl(self) -> Rapl:
        if self._rapl is None:
            self._rapl = Rapl(self.powercap_root)
        return self._rapl

    def __getstate__(self):  # shipped to Ray workers: re-detect RAPL there
        return {**self.__dict__, "_rapl": None}

    def _time(self, fn, inputs) -> tuple[benchmark.Measurement, str]:
        timer = benchmark.Timer(stmt="fn(*inputs)", globals={"fn": fn, "inputs": inputs}, num_threads=self.num_threads)
        if self.timer == "adaptive":
            return (
                timer.adaptive_autorange(
                    threshold=self.threshold, min_run_time=self.min_run_time, max_run_time=self.max_run_time
                ),
                "adaptive_autorange",
            )
        return timer.blocked_autorange(min_run_time=self.min_run_time), "blocked_autorange"

    def _peak_memory(self, fn, inputs, weights) -> tuple[float | None, str]:
        reason = _reset_peak_rss()
        before = _proc_status_kb("VmRSS")
        if reason or before is None:
            return None, reason or "no /proc/self/status"
        out = fn(*inputs)
        peak = _proc_status_kb("VmHWM")
        del out
        live = sum(t.numel() * t.element_size() for t in (*inputs, *weights))
        return float(live + max(0, peak - before) * 1024), "rss_hwm_delta"

    def _energy(self, fn, inputs) -> tuple[float | None, float | None, str]:
        rapl = self.rapl
        if not rapl.available:
            return None, None, f"unavailable: {rapl.reason}"
        try:
            calls, e0, t0 = 0, rapl.read_uj(), time.perf_counter()
            while (elapsed := time.perf_counter() - t0) < self.energy_min_time or calls == 0:
                fn(*inputs)
                calls += 1
            joules = rapl.delta_j(e0, rapl.read_uj())
        except (OSError, ValueError) as exc:
            return None, None, f"unavailable: RAPL read failed: {exc}"
        if joules <= 0:
            return None, None, f"unavailable: RAPL counter did not advance over {elapsed:.3f} s"
        return joules / calls, joules / elapsed, f"rapl package energy over {calls} calls, {elapsed:.3f} s"

    def measure(self, workload: dict) -> dict:
        env = environment(num_threads=self.num_threads, timer=self.timer, min_run_time_s=self.min_run_time)
        if self.timer == "adaptive":
            env.update(threshold=self.threshold, max_run_time_s=self.max_run_time)
        row = base_row(workload, self.hardware.id, self.name, self.source, env)
        op, params, dtype = workload["op"], workload["params"], workload["dtype"]
        try:
            row["flops"], row["bytes"] = count_cost(op, params, dtype)
            if dtype in ("fixed", "tf32"):  # no CPU kernel computes in these: never time a stand-in and label it
                raise ValueError(f"dtype {dtype!r} has no CPU kernel; the cpu backend runs float32/float16/bfloat16")
            torch.set_num_threads(self.num_threads)
            with torch.no_grad():
                fn, inputs, weights = build(op, params, dtype, device="cpu")
                for _ in range(self.warmup):
                    fn(*inputs)
                m, method = self._time(fn, inputs)
                blocks = [t for t in m.times]  # seconds per call, one value per block
                cv = statistics.stdev(blocks) / statistics.fmean(blocks) if len(blocks) > 1 else None
                row.update(
                    status="ok",
                    error=None,
                    runtime_ms=m.median * 1e3,
                    runtime_iqr_ms=m.iqr * 1e3,
                    runtime_cv=cv,
                    runtime_repeats=len(blocks),
                    timing_method=method,
                )
                env.update(calls_per_block=int(m.number_per_run), num_interop_threads=torch.get_num_interop_threads())
                if self.measure_memory:
                    row["peak_mem_bytes"], env["peak_mem"] = self._peak_memory(fn, inputs, weights)
                if self.energy:
                    energy_j, power_w, env["energy"] = self._energy(fn, inputs)
                    if energy_j is not None:
                        row.update(energy_j=energy_j, power_w=power_w, power_method="rapl")
        except Exception as exc:  # a config that fails (invalid shape, out of memory) is recorded, not fatal
            row.update(status="error", error=f"{type(exc).__name__}: {exc}"[:500], runtime_ms=None)
            row.setdefault("flops", 0.0)
            row.setdefault("bytes", 1.0)
        row["env"] = json.dumps(env, sort_keys=True)
        return row
