"""A toy measurement backend (one file + ``conf/collect/backend/toy.yaml``): a made-up accelerator whose runtime
and energy per call follow a closed form of FLOPs and bytes, with its own hardware spec (not in conf/hardware)."""

from __future__ import annotations

from data.backends import base_row, environment
from data.hardware import HardwareSpec
from data.workloads import count_cost


class ToyBackend:
    name = "toy"

    def __init__(
        self,
        peak_tflops: float = 2.0,
        bandwidth_gbs: float = 200.0,
        launch_us: float = 3.0,
        joules_per_gflop: float = 0.3,
        source: str = "toy",
    ):
        self.peak_tflops, self.bandwidth_gbs, self.launch_us = peak_tflops, bandwidth_gbs, launch_us
        self.joules_per_gflop, self.source = joules_per_gflop, source
        self.hardware = HardwareSpec(
            id="toy-accel",
            name="Toy accelerator",
            kind="gpu",
            vendor="toy",
            sm_count=16,
            boost_clock_mhz=1000.0,
            memory_gb=8.0,
            memory_bandwidth_gbs=bandwidth_gbs,
            l2_cache_mb=4.0,
            peak_tflops={"float32": peak_tflops},
            tdp_w=60.0,
            idle_power_w=6.0,
        )

    def measure(self, workload: dict) -> dict:
        row = base_row(workload, self.hardware.id, self.name, self.source, environment(model="toy"))
        flops, nbytes = count_cost(workload["op"], workload["params"], workload["dtype"])
        runtime_s = max(flops / (self.peak_tflops * 1e12), nbytes / (self.bandwidth_gbs * 1e9)) + self.launch_us * 1e-6
        energy_j = 6.0 * runtime_s + self.joules_per_gflop * flops / 1e9  # idle draw + work
        row.update(
            status="ok",
            error=None,
            flops=flops,
            bytes=nbytes,
            runtime_ms=runtime_s * 1e3,
            timing_method="simulated",
            energy_j=energy_j,
            power_w=energy_j / runtime_s,
            power_method="simulated",
        )
        return row
