"""Tabular encoding: layer-shape features + hardware-spec features, joined by hardware name.

Input is a *workload description* frame: ``op``, ``hardware``, optional ``dtype`` (default float32)
and the op's shape columns (``data.workloads.SHAPE_PARAMS``). Measured rows are such frames too, so
training and prediction go through the same code. FLOPs and bytes are derived from the description
(``data.workloads.count_cost``), never read from a measurement, so a user who gives only shapes gets the
same features. ``tensor_bytes`` (the bytes of the inputs, weights and outputs, once) is both the roofline's
memory traffic and the lower bound of a kernel's peak memory (``models.roofline.RooflineModel`` docstring). Hardware enters only through its spec numbers, which is what lets a model predict for a
GPU that has a spec but no measurements.

Hardware-normalised, dimensionless features (:func:`transfer_features`) describe a workload *relative to* the
GPU it runs on, so that what is learned on some GPUs transfers to another (NeuSight, Lee et al. ASPLOS'25,
predicts unseen GPUs from a tile/wave decomposition of the kernel the same way): wave counts and tail-wave
occupancy at a few tile sizes, arithmetic intensity relative to the ridge point, bytes relative to the L2
cache, a memory-bound flag and the wave-quantised roofline time.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from data.backends.sim_roofline import gemm_dims
from data.hardware import HardwareRegistry
from data.workloads import DTYPES, OPS, SHAPE_PARAMS, WorkloadError, count_cost, validate

DTYPE_BYTES = {"float32": 4, "tf32": 4, "float16": 2, "bfloat16": 2}
REQUIRED = ("op", "hardware")


class FeatureError(ValueError):
    """A workload description that cannot be featurized; the message names the row and the problem."""


def roofline_s(flops, nbytes, peak_flops, bandwidth):
    """Classic roofline lower bound (Williams et al. 2009): max(compute time, memory time)."""
    return np.maximum(np.asarray(flops) / np.asarray(peak_flops), np.asarray(nbytes) / np.asarray(bandwidth))


TILES = (64, 128, 256)  # square output-tile edges for the wave features (cuBLAS/CUTLASS tiles span 64..256)


def work_tiles(op: str, params: dict, nbytes: float, dtype_bytes: float, tile: int) -> float:
    """Output tiles of ``tile x tile`` a kernel is split into (the unit of work one SM takes at a time).

    GEMM-like ops (matmul, bmm, linear; conv2d as implicit GEMM: ``data.backends.sim_roofline.gemm_dims``):
    ``batch * ceil(M / tile) * ceil(N / tile)`` (NVIDIA, "Matrix Multiplication Background User's Guide",
    tile quantization). Other ops (memory-bound: elementwise, norms, softmax, reductions) have no GEMM tiles;
    their work is approximated by the elements they move, ``bytes / dtype_bytes``, in blocks of ``tile**2``
    elements: ``ceil(elements / tile**2)``.
    """
    dims = gemm_dims(op, params)
    if dims is not None:
        batch, m, n, _ = (int(v) for v in dims)
        return float(batch * -(-m // tile) * -(-n // tile))
    return float(np.ceil(nbytes / dtype_bytes / tile**2))


def transfer_features(op, params, flops, nbytes, dtype_bytes, sm_count, l2_bytes, peak, bw) -> dict[str, np.ndarray]:
    """Dimensionless, hardware-normalised features (module docstring); arrays in, arrays of columns out.

    Per tile size T (``TILES``), with ``tiles`` from :func:`work_tiles` and ``S`` = SM count:

    * ``waves_T = ceil(tiles / S)`` (log2 in the column ``log2_waves_T``): rounds of one tile per SM;
    * ``wave_eff_T = tiles / (waves_T * S)``: occupancy of the SM slots over all waves (1 = no idle SM in
      the tail wave; 1 tile on 108 SMs = 0.009);
    * ``log2_wave_ms_T``: wave-quantised compute time ``waves_T * (flops / tiles) / (peak / S)`` (each wave costs
      one full tile's FLOPs per SM), for ops with FLOPs; memory-bound ops get their memory time.

    Then ``log2_intensity_over_ridge = log2((flops / bytes) / (peak / bw))`` (> 0: compute-bound by the
    roofline), ``memory_bound`` (that flag), ``log2_bytes_over_l2 = log2(bytes / L2 bytes)``,
    ``log2_bytes_per_sm``, ``log2_flops_per_sm``, ``log2_roofline_compute_ms`` / ``log2_roofline_memory_ms`` and
    ``log2_wave_roofline_ms = log2(max(wave_ms_128, memory time))``: the roofline with 128x128 wave quantisation.
    """
    flops, nbytes = np.asarray(flops, float), np.asarray(nbytes, float)
    sms, peak, bw = np.asarray(sm_count, float), np.asarray(peak, float), np.asarray(bw, float)
    sms = np.maximum(sms, 1.0)
    dtype_bytes = np.nan_to_num(np.asarray(dtype_bytes, float), nan=4.0)  # fixed point (FPGA): no torch width
    memory_ms = nbytes / bw * 1e3
    out: dict[str, np.ndarray] = {}
    for t in TILES:
        tiles = np.array([work_tiles(o, p, b, d, t) for o, p, b, d in zip(op, params, nbytes, dtype_bytes)])
        tiles = np.maximum(tiles, 1.0)
        waves = np.ceil(tiles / sms)
        wave_ms = np.where(flops > 0, waves * (flops / tiles) / (peak / sms) * 1e3, memory_ms)
        out[f"log2_waves_{t}"] = np.log2(waves)
        out[f"wave_eff_{t}"] = tiles / (waves * sms)
        out[f"log2_wave_ms_{t}"] = np.log2(wave_ms)
    intensity_ratio = (flops / nbytes) / (peak / bw)
    out["log2_intensity_over_ridge"] = np.log2(intensity_ratio + 1e-6)
    out["memory_bound"] = (intensity_ratio < 1).astype(float)
    out["log2_bytes_over_l2"] = np.log2(nbytes / np.maximum(np.asarray(l2_bytes, float), 1.0))
    out["log2_bytes_per_sm"] = np.log2(nbytes / sms)
    out["log2_flops_per_sm"] = np.log2(flops / sms + 1)
    out["log2_roofline_compute_ms"] = np.log2(flops / peak * 1e3 + 1e-9)
    out["log2_roofline_memory_ms"] = np.log2(memory_ms)
    out["log2_wave_roofline_ms"] = np.log2(np.maximum(2 ** out["log2_wave_ms_128"], memory_ms))
    return out


# Columns on an absolute scale of one GPU (times, spec numbers, per-SM amounts): dropped by ``transfer_columns``.
ABSOLUTE_SCALE = ("hw_", "roofline_", "log2_roofline", "log2_wave_ms_", "log2_wave_roofline_ms", "log2_bytes_per_sm",
                  "log2_flops_per_sm")
TRANSFER_KEEP = ("hw_ridge_intensity", "hw_log2_bandwidth")  # the roofline's two spec numbers stay


def transfer_columns(columns) -> list[str]:
    """The subset of feature columns meant to transfer to an unseen GPU: shape, op and dtype columns, the
    dimensionless :func:`transfer_features` (waves, tail-wave occupancy, intensity / ridge, bytes / L2) and the
    ridge point and bandwidth; no absolute times, SM counts, clocks or cache sizes, which let trees recognise
    the training GPUs one by one instead of learning a rule that carries over."""
    return [c for c in columns if not str(c).startswith(ABSOLUTE_SCALE) or c in TRANSFER_KEEP]


class TabularFeaturizer:
    def __init__(self, registry: HardwareRegistry):
        self.registry = registry

    def check(self, workloads: pd.DataFrame) -> pd.DataFrame:
        """Validate a description frame at the boundary: returns a normalised copy or raises FeatureError."""
        if not isinstance(workloads, pd.DataFrame):
            raise FeatureError(f"expected a DataFrame of workloads, got {type(workloads).__name__}")
        missing = [c for c in REQUIRED if c not in workloads.columns]
        if missing:
            raise FeatureError(f"workloads lack column(s) {', '.join(missing)} (need op, hardware, dtype and shape columns)")
        df = workloads.reset_index(drop=True).copy()
        df["dtype"] = df["dtype"].fillna("float32") if "dtype" in df.columns else "float32"
        for col in SHAPE_PARAMS:
            if col not in df.columns:
                df[col] = np.nan
        hw_ids, shapes = [], []
        for i, row in enumerate(df.itertuples(index=False)):
            try:
                params = validate(str(row.op), {p: getattr(row, p) for p in SHAPE_PARAMS}, str(row.dtype))
                hw_ids.append(self.registry.resolve(str(row.hardware)))
            except (WorkloadError, KeyError) as exc:
                raise FeatureError(f"row {i}: {exc}") from None
            shapes.append(params)
        df["hardware"] = hw_ids
        df["op"], df["dtype"] = df["op"].astype(str), df["dtype"].astype(str)
        for col in SHAPE_PARAMS:
            df[col] = [float(p.get(col, 0)) for p in shapes]
        return df

    def transform(self, workloads: pd.DataFrame) -> pd.DataFrame:
        return self.features(self.check(workloads))

    def features(self, df: pd.DataFrame) -> pd.DataFrame:
        """The feature frame of a frame :meth:`check` already validated and normalised."""
        shapes = df[list(SHAPE_PARAMS)].to_numpy()  # validated by check(); unused params are 0
        costs = [count_cost(op, dict(zip(SHAPE_PARAMS, shape)), dt)
                 for op, dt, shape in zip(df["op"], df["dtype"], shapes)]
        flops = np.array([c[0] for c in costs])
        nbytes = np.array([c[1] for c in costs])
        specs = [self.registry.get(h) for h in df["hardware"]]
        peak = np.array([s.peak_flops(dt) for s, dt in zip(specs, df["dtype"].to_numpy(object))])
        bw = np.array([s.bandwidth_bytes_s for s in specs])

        X = {p: df[p].to_numpy(float) for p in SHAPE_PARAMS}  # columns collected first, one DataFrame at the end
        ops, dtypes = df["op"].to_numpy(object), df["dtype"].to_numpy(object)  # numpy compares: no per-op Series
        for op in OPS:
            X[f"op_{op}"] = (ops == op).astype(float)
        for dt in DTYPES:
            X[f"dtype_{dt}"] = (dtypes == dt).astype(float)
        X["dtype_bytes"] = np.array([DTYPE_BYTES.get(dt, np.nan) for dt in dtypes], float)
        X["log2_flops"] = np.log2(flops + 1)
        X["log2_bytes"] = np.log2(nbytes)
        X["tensor_bytes"] = nbytes  # inputs + weights + outputs once: the peak-memory lower bound (models/roofline.py)
        X["log2_intensity"] = np.log2(flops / nbytes + 1e-3)
        X["hw_is_gpu"] = np.array([s.kind == "gpu" for s in specs], float)
        X["hw_sm_count"] = np.array([float(s.sm_count) for s in specs], float)
        X["hw_clock_mhz"] = np.array([float(s.boost_clock_mhz) for s in specs], float)
        X["hw_memory_gb"] = np.array([float(s.memory_gb) for s in specs], float)
        X["hw_l2_mb"] = np.array([float(s.l2_cache_mb) for s in specs], float)
        X["hw_log2_peak_flops"] = np.log2(peak)
        X["hw_log2_peak_fp32"] = np.log2([s.peak_flops("float32") for s in specs])
        X["hw_log2_bandwidth"] = np.log2(bw)
        X["hw_ridge_intensity"] = peak / bw
        X["roofline_compute_ms"] = flops / peak * 1e3
        X["roofline_memory_ms"] = nbytes / bw * 1e3
        X["roofline_ms"] = roofline_s(flops, nbytes, peak, bw) * 1e3
        X["log2_roofline_ms"] = np.log2(X["roofline_ms"])
        params = [dict(zip(SHAPE_PARAMS, shape)) for shape in shapes]
        for col, values in transfer_features(df["op"], params, flops, nbytes, X["dtype_bytes"],
                                             X["hw_sm_count"], [s.l2_cache_mb * 2**20 for s in specs],
                                             peak, bw).items():
            X[col] = values
        return pd.DataFrame(X)


class PowerFeaturizer(TabularFeaturizer):
    """The tabular features plus the spec-driven analytical power model's terms (for power surrogates).

    Appends, per row, from the hardware's spec sheet and the ``sim-roofline`` simulator's formulas
    (``data/backends/sim_roofline.py``, reused, not copied): ``hw_tdp_w``, ``hw_idle_power_w``,
    ``analytical_runtime_ms`` (tile/wave-quantised roofline runtime), ``analytical_utilisation`` (u) and
    ``analytical_power_w`` = idle + (TDP - idle) * u. The columns of :class:`TabularFeaturizer` are kept
    unchanged and first. Hardware without ``tdp_w`` (the local CPU) cannot be featurized here.
    """

    def __init__(self, registry: HardwareRegistry, **sim_options):
        super().__init__(registry)
        self.sim_options = dict(sim_options)  # SimRooflineBackend constants; defaults = the simulator's

    def transform(self, workloads: pd.DataFrame) -> pd.DataFrame:
        from data.backends.sim_roofline import SimRooflineBackend, analytical_power_w, utilisation

        df = self.check(workloads)  # once: the tabular columns and the power terms both read the checked frame
        X = self.features(df)
        backends = {}
        runtime_s, idle, tdp = [], [], []
        for i, (op, dt, hw) in enumerate(zip(df["op"], df["dtype"], df["hardware"])):
            if hw not in backends:
                backends[hw] = SimRooflineBackend(self.registry.get(hw), **self.sim_options)
            sim = backends[hw]
            if sim.hardware.tdp_w is None:
                raise FeatureError(f"row {i}: hardware {hw!r} has no tdp_w in its spec: no power prediction")
            params = {p: df.at[i, p] for p in OPS[op].params}
            runtime_s.append(sim.runtime_s(op, params, dt))
            idle.append(sim.idle_power_w())
            tdp.append(float(sim.hardware.tdp_w))
        runtime_s = np.asarray(runtime_s, float)
        peak = np.exp2(X["hw_log2_peak_flops"].to_numpy())
        bw = np.exp2(X["hw_log2_bandwidth"].to_numpy())
        flops = np.exp2(X["log2_flops"].to_numpy()) - 1
        nbytes = np.exp2(X["log2_bytes"].to_numpy())
        u = utilisation(flops, nbytes, runtime_s, peak, bw)
        X["hw_tdp_w"] = tdp
        X["hw_idle_power_w"] = idle
        X["analytical_runtime_ms"] = runtime_s * 1e3
        X["log2_analytical_runtime_ms"] = np.log2(runtime_s * 1e3)
        X["analytical_utilisation"] = u
        X["analytical_power_w"] = analytical_power_w(u, idle, tdp)
        X["analytical_power_frac"] = (X["analytical_power_w"] - X["hw_idle_power_w"]) / (X["hw_tdp_w"] - X["hw_idle_power_w"])
        return X
