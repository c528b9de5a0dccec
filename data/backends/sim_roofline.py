"""Simulated GPU measurements: a spec-driven analytical (roofline-style) model. No GPU is touched.

Formulas (every constant is a config value; the hardware numbers come from ``conf/hardware/*.yaml``):

* Roofline (Williams, Waterman, Patterson, "Roofline: an insightful visual performance model",
  CACM 2009): a kernel takes at least ``max(FLOPs / peak_flops, bytes / bandwidth)``.
* GEMM-like ops (matmul, bmm, linear, and conv2d as implicit GEMM with ``M = batch*h_out*w_out``,
  ``N = c_out / groups``, ``K = c_in / groups * kernel^2``, one GEMM per group) are computed in output
  tiles of ``tile_m x tile_n``; tiles are spread over the SMs in waves. Tile and wave quantization (NVIDIA,
  "Matrix Multiplication Background User's Guide", Deep Learning Performance docs) make the compute time

      t_compute = ceil(batch * ceil(M/tile_m) * ceil(N/tile_n) / SMs) * (2 * tile_m * tile_n * K)
                  / (peak_flops[dtype] * compute_efficiency / SMs)

  i.e. each wave costs one full tile per SM even when the last wave is partly empty.
* Memory time ``t_memory = bytes / (bandwidth * memory_efficiency)``; elementwise, normalisation and
  softmax ops are memory-bound (FlopCounterMode counts no FLOPs for them).
* ``runtime = max(t_compute, t_memory) + launch_overhead``.

* Tile efficiency for small dimensions is part of the tile term above: a GEMM with ``M = 8`` still
  pays for a full 128-row tile (efficiency ``M / (tile_m * ceil(M / tile_m))`` = 1/16), as does the
  last partial tile of any dimension (NVIDIA guide above, "Tile Quantization").
* Launch overhead: the constant ``launch_overhead`` added to every kernel.

Power (an analytical model in the spirit of Hong & Kim, "An integrated GPU power and performance
model", ISCA 2010, where runtime power = idle power + sum over units of max unit power x the unit's
access rate; here two units, the compute pipes and DRAM, each scaled to the board's dynamic range):

      u_compute = FLOPs / (runtime * peak_flops[dtype])        (achieved fraction of compute peak)
      u_memory  = bytes / (runtime * bandwidth)                  (achieved fraction of DRAM bandwidth)
      u         = min(1, compute_power_weight * u_compute + memory_power_weight * u_memory)
      power_w   = idle_power_w + (tdp_w - idle_power_w) * u     (so never above tdp_w)
      energy_j  = power_w * runtime                               (per call)

``runtime`` is this simulator's own runtime (so a launch-bound tiny kernel has low utilisation and sits
near idle power). ``tdp_w`` is the board power limit from the spec sheet in ``conf/hardware/``;
``idle_power_w`` comes from the same file (where no measurement exists it is an assumption marked as
such there: 10% of TDP); a spec without ``idle_power_w`` uses ``idle_fraction * tdp_w``. The weights
default to 1.0: a unit running at its datasheet peak alone can draw the whole dynamic range (NVIDIA
sizes the board limit for dense tensor-core GEMMs; on the H200 in ``../shared/data/hopper`` large GEMMs
and bandwidth-bound elementwise kernels both average 550-780 W of 700 W). These weights are
assumptions, not fits. A spec without ``tdp_w`` (the local CPU) gets no power. Rows carry
``power_method = "simulated"``.

Defaults: ``compute_efficiency = 0.8`` and ``memory_efficiency = 0.85`` (large cuBLAS GEMMs and
STREAM-like copies reach roughly these fractions of datasheet peaks), ``launch_overhead_us = 5``
(order of a CUDA launch plus framework dispatch), 128x128 tiles (a common cuBLAS/CUTLASS tile).
This is a first simulator; it is deterministic and it is *not* a measurement (backend ``sim-roofline``).
"""

from __future__ import annotations

import numpy as np

from data import costs
from data.backends import base_row, environment
from data.hardware import HardwareSpec
from data.ops import DTYPE_INFO, OPS
from data.workloads import count_cost, validate


def gemm_dims(op: str, p: dict) -> tuple[float, float, float, float] | None:
    """``(batch, M, N, K)`` of the GEMM a matmul, bmm, linear or (implicit-GEMM) conv lowers to, None for other ops
    (the simulator costs those by their bytes): the op registry's ``gemm`` (``data.costs.gemm_dims``)."""
    return costs.gemm_dims(op, p) if OPS[op].family in ("gemm", "conv") else None


def utilisation(
    flops,
    nbytes,
    runtime_s,
    peak_flops,
    bandwidth_bytes_s,
    compute_power_weight: float = 1.0,
    memory_power_weight: float = 1.0,
):
    """``u = min(1, w_c * FLOPs / (runtime * peak) + w_m * bytes / (runtime * bandwidth))`` (module docstring).

    Element-wise over numpy arrays (or scalars); the one place the power model's utilisation is defined.
    """
    runtime_s = np.asarray(runtime_s, dtype=float)
    u_compute = np.asarray(flops, dtype=float) / (runtime_s * np.asarray(peak_flops, dtype=float))
    u_memory = np.asarray(nbytes, dtype=float) / (runtime_s * np.asarray(bandwidth_bytes_s, dtype=float))
    return np.minimum(1.0, compute_power_weight * u_compute + memory_power_weight * u_memory)


def analytical_power_w(u, idle_power_w, tdp_w):
    """``power_w = idle_power_w + (tdp_w - idle_power_w) * u``: never below idle, never above the board limit."""
    idle = np.asarray(idle_power_w, dtype=float)
    return idle + (np.asarray(tdp_w, dtype=float) - idle) * np.asarray(u, dtype=float)


class SimRooflineBackend:
    name = "sim-roofline"

    def __init__(
        self,
        hardware: HardwareSpec,
        compute_efficiency: float = 0.8,
        memory_efficiency: float = 0.85,
        launch_overhead_us: float = 5.0,
        tile_m: int = 128,
        tile_n: int = 128,
        source: str = "sim-roofline",
        compute_power_weight: float = 1.0,
        memory_power_weight: float = 1.0,
        idle_fraction: float = 0.1,
    ):
        self.hardware = hardware
        self.compute_efficiency = float(compute_efficiency)
        self.memory_efficiency = float(memory_efficiency)
        self.launch_overhead_us = float(launch_overhead_us)
        self.tile_m, self.tile_n = int(tile_m), int(tile_n)
        self.source = source
        self.compute_power_weight = float(compute_power_weight)
        self.memory_power_weight = float(memory_power_weight)
        self.idle_fraction = float(idle_fraction)

    def runtime_s(self, op: str, params: dict, dtype: str) -> float:
        p = validate(op, params, dtype)
        _, nbytes = count_cost(op, p, dtype)
        dims = gemm_dims(op, p)
        peak = self.hardware.peak_flops(DTYPE_INFO[dtype].rate)
        return float(self.runtimes_s((np.nan,) * 4 if dims is None else dims, nbytes, peak))

    def runtimes_s(self, gemm, nbytes, peak_flops) -> np.ndarray:
        """``max(t_compute, t_memory) + launch_overhead`` (module docstring) on this hardware, elementwise over
        arrays: ``gemm`` = ``(batch, M, N, K)`` of each row's GEMM (NaN for a row that is no GEMM: no compute
        term), ``nbytes`` its bytes, ``peak_flops`` the peak of its dtype."""
        hw = self.hardware
        batch, m, n, k = (np.asarray(d, float) for d in gemm)
        t_memory = np.asarray(nbytes, float) / (hw.bandwidth_bytes_s * self.memory_efficiency)
        tiles = batch * np.ceil(m / self.tile_m) * np.ceil(n / self.tile_n)
        waves = np.ceil(tiles / hw.sm_count)
        per_sm = np.asarray(peak_flops, float) * self.compute_efficiency / hw.sm_count
        t_compute = np.where(np.isnan(m), 0.0, waves * (2.0 * self.tile_m * self.tile_n * k) / per_sm)
        return np.maximum(t_compute, t_memory) + self.launch_overhead_us * 1e-6

    def idle_power_w(self) -> float | None:
        hw = self.hardware
        if hw.idle_power_w is not None:
            return float(hw.idle_power_w)
        return None if hw.tdp_w is None else self.idle_fraction * float(hw.tdp_w)

    def power_w(self, flops: float, nbytes: float, runtime_s: float, dtype: str) -> float | None:
        """Average board power while the kernel runs back to back (module docstring); None without a TDP."""
        hw = self.hardware
        if hw.tdp_w is None or runtime_s <= 0:
            return None
        u = utilisation(
            flops,
            nbytes,
            runtime_s,
            hw.peak_flops(DTYPE_INFO[dtype].rate),
            hw.bandwidth_bytes_s,
            self.compute_power_weight,
            self.memory_power_weight,
        )
        return float(analytical_power_w(u, self.idle_power_w(), float(hw.tdp_w)))

    def measure(self, workload: dict) -> dict:
        env = environment(
            model="sim-roofline",
            compute_efficiency=self.compute_efficiency,
            memory_efficiency=self.memory_efficiency,
            launch_overhead_us=self.launch_overhead_us,
            tile=[self.tile_m, self.tile_n],
            compute_power_weight=self.compute_power_weight,
            memory_power_weight=self.memory_power_weight,
            idle_power_w=self.idle_power_w(),
            tdp_w=self.hardware.tdp_w,
        )
        row = base_row(workload, self.hardware.id, self.name, self.source, env)
        op, params, dtype = workload["op"], workload["params"], workload["dtype"]
        row["flops"], row["bytes"] = count_cost(op, params, dtype)
        runtime_s = self.runtime_s(op, params, dtype)
        power = self.power_w(row["flops"], row["bytes"], runtime_s, dtype)
        row.update(
            status="ok",
            error=None,
            runtime_ms=runtime_s * 1e3,
            runtime_iqr_ms=None,
            runtime_repeats=None,
            timing_method="simulated",
            power_w=power,
            energy_j=None if power is None else power * runtime_s,
            power_method=None if power is None else "simulated",
        )
        return row
