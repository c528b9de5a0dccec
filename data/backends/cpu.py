"""Real CPU measurements: torch kernels timed with ``torch.utils.benchmark``.

Per workload: build real tensors, run a warm-up, then ``Timer.blocked_autorange`` (which picks the
number of calls per block so a block outlasts timer resolution, and repeats blocks for at least
``min_run_time`` seconds). Recorded: the median and IQR over blocks, and the number of blocks.
The thread count is pinned (``torch.set_num_threads``) and recorded. FLOPs and bytes come from the
same workload definition (``data.workloads.count_cost``). A workload that fails becomes an error row.
"""
from __future__ import annotations

import torch
from torch.utils import benchmark

from data.backends import base_row, environment
from data.hardware import HardwareSpec, detect_cpu
from data.workloads import build, count_cost


class CpuBackend:
    name = "cpu"

    def __init__(self, num_threads: int = 1, min_run_time: float = 0.05, warmup: int = 2,
                 source: str = "cpu-sweep", hardware: HardwareSpec | None = None):
        self.num_threads = int(num_threads)
        self.min_run_time = float(min_run_time)
        self.warmup = int(warmup)
        self.source = source
        self._hardware = hardware

    @property
    def hardware(self) -> HardwareSpec:
        if self._hardware is None:
            self._hardware = detect_cpu(self.num_threads)
        return self._hardware

    def measure(self, workload: dict) -> dict:
        env = environment(num_threads=self.num_threads, timer="torch.utils.benchmark.blocked_autorange",
                          min_run_time_s=self.min_run_time)
        row = base_row(workload, self.hardware.id, self.name, self.source, env)
        op, params, dtype = workload["op"], workload["params"], workload["dtype"]
        try:
            row["flops"], row["bytes"] = count_cost(op, params, dtype)
            torch.set_num_threads(self.num_threads)
            with torch.no_grad():
                fn, inputs, _ = build(op, params, dtype, device="cpu")
                for _ in range(self.warmup):
                    fn(*inputs)
                timer = benchmark.Timer(stmt="fn(*inputs)", globals={"fn": fn, "inputs": inputs},
                                        num_threads=self.num_threads)
                m = timer.blocked_autorange(min_run_time=self.min_run_time)
            row.update(status="ok", error=None, runtime_ms=m.median * 1e3, runtime_iqr_ms=m.iqr * 1e3,
                       runtime_repeats=len(m.times), timing_method="blocked_autorange")
        except Exception as exc:  # a config that fails is recorded, not fatal
            row.update(status="error", error=f"{type(exc).__name__}: {exc}"[:500], runtime_ms=None)
            row.setdefault("flops", 0.0)
            row.setdefault("bytes", 1.0)
        return row
