"""Tunable-configuration features: what a kernel's tuning parameters do on the GPU that runs it.

An auto-tuner ranks configurations of ONE kernel on ONE problem size; FLOPs and bytes are the same for every
configuration, so the shape features of ``features.tabular`` cannot tell them apart. What differs is how the
work is cut into thread blocks and how those blocks fit on the GPU. Three layers of features:

* :func:`config_frame`: the raw tunables of the ``config`` JSON column as numeric ``cfg_<name>`` columns
  (:func:`tunable_features`: the same of a space's configurations, what ``costmodel tune`` learns from);
* kernel structure, per known kernel (:data:`KERNELS`), from the tunables and the problem shape only:
  threads per block, outputs per thread, accumulator registers, local (shared) memory bytes, blocks in the grid,
  global-memory traffic implied by the tile sizes (CLBlast ``Xgemm``: Nugteren, "CLBlast", IWOCL'18; the
  Kernel Tuner 2-D convolution: van Werkhoven et al., FGCS 2014);
* spec-relative features (:func:`spec_relative`): the same quantities divided by the limits of the GPU that runs
  the kernel (:func:`device_limits`: threads, blocks, registers and shared memory per SM by architecture, from the
  CUDA programming guide's compute-capability table and AMD's CDNA/RDNA ISA guides), giving the occupancy
  (blocks per SM, the CUDA occupancy-calculator rule), waves of blocks over the SMs and the tail-wave
  efficiency, the fraction of the SIMD width a block fills, and the traffic time relative to the compute time
  (machine balance). These are dimensionless, so what is learned on some GPUs carries to a GPU with other
  limits and SM counts; the raw spec numbers (``hw_*``) only name a GPU.

A kernel that is not in :data:`KERNELS` gets the raw tunables only. A GPU whose architecture is not in
:data:`LIMITS` gets the generic limits and ``limits_known = 0``, so a model can tell that it is guessing.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd

from data.hardware import HardwareRegistry, HardwareSpec

FLOAT_BYTES = 4

# Per-SM (NVIDIA) / per-CU (AMD) limits: SIMD width (warp / wavefront), resident threads, resident blocks,
# 32-bit registers, shared (local) memory bytes, and the largest static shared memory one block may use.
# NVIDIA: CUDA C++ Programming Guide, "Features and Technical Specifications", per compute capability.
# AMD: CDNA2 ISA guide (wave64, 4 SIMD x 512 VGPRs x 64 lanes, 64 KiB LDS per CU), RDNA2/3 ISA guides (wave32,
# 2 SIMD32 per CU, 64 KiB LDS per CU of a WGP's 128 KiB).
LIMITS = {
    "6.0": dict(simd=32, threads=2048, blocks=32, regs=65536, smem=65536, smem_block=49152),
    "6.1": dict(simd=32, threads=2048, blocks=32, regs=65536, smem=98304, smem_block=49152),
    "7.0": dict(simd=32, threads=2048, blocks=32, regs=65536, smem=98304, smem_block=49152),
    "7.5": dict(simd=32, threads=1024, blocks=16, regs=65536, smem=65536, smem_block=49152),
    "8.0": dict(simd=32, threads=2048, blocks=32, regs=65536, smem=167936, smem_block=49152),
    "8.6": dict(simd=32, threads=1536, blocks=16, regs=65536, smem=102400, smem_block=49152),
    "8.9": dict(simd=32, threads=1536, blocks=24, regs=65536, smem=102400, smem_block=49152),
    "9.0": dict(simd=32, threads=2048, blocks=32, regs=65536, smem=233472, smem_block=49152),
    "cdna2": dict(simd=64, threads=2048, blocks=32, regs=131072, smem=65536, smem_block=65536),
    "cdna3": dict(simd=64, threads=2048, blocks=32, regs=131072, smem=65536, smem_block=65536),
    "rdna2": dict(simd=32, threads=1024, blocks=32, regs=65536, smem=65536, smem_block=65536),
    "rdna3": dict(simd=32, threads=1024, blocks=32, regs=98304, smem=65536, smem_block=65536),
}
GENERIC = dict(simd=32, threads=1536, blocks=16, regs=65536, smem=65536, smem_block=49152)
ARCH_CC = {"pascal": "6.1", "volta": "7.0", "turing": "7.5", "ampere": "8.6", "ada": "8.9", "hopper": "9.0"}


def device_limits(spec: HardwareSpec) -> dict:
    """The per-SM limits of ``spec`` (:data:`LIMITS` by compute capability, else by architecture) and
    ``limits_known`` (1 if found, 0 if the generic limits stand in)."""
    cc = spec.extra.get("compute_capability")
    arch = (spec.architecture or "").lower()
    key = str(cc) if cc is not None and str(cc) in LIMITS else (arch if arch in LIMITS else ARCH_CC.get(arch))
    if key in LIMITS:
        return {**LIMITS[key], "limits_known": 1}
    return {**GENERIC, "limits_known": 0}


def tunable_features(configs: pd.DataFrame) -> pd.DataFrame:
    """A space's configurations (one column per tunable, ``data.tuning.Space``) as model features ``cfg_<name>`` in
    the space's column order: numeric columns as numbers, any other as a stable category code of its text."""
    out = pd.DataFrame(index=configs.index)
    for col in configs.columns:
        values = pd.to_numeric(configs[col], errors="coerce")
        if values.isna().any():
            values = configs[col].astype(str).astype("category").cat.codes.astype(float)
        out[f"cfg_{col}"] = values.to_numpy(float)
    return out.reset_index(drop=True)


def config_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """The ``config`` JSON column expanded to numeric ``cfg_<name>`` columns (strings -> category codes)."""
    cfg = pd.DataFrame([json.loads(c) if isinstance(c, str) else {} for c in rows["config"]])
    out = pd.DataFrame(index=range(len(rows)))
    for col in sorted(cfg.columns):
        values = pd.to_numeric(cfg[col], errors="coerce")
        if values.isna().any():  # non-numeric tunable or strategy name: a stable category code
            values = cfg[col].astype("category").cat.codes.astype(float)
        out[f"cfg_{col}"] = values.to_numpy(float)
    return out


def _col(cfg: pd.DataFrame, name: str, default: float | None = None) -> np.ndarray:
    if name in cfg.columns:
        return cfg[name].to_numpy(float)
    if default is None:
        raise ValueError(f"tunable {name!r} missing from the configurations")
    return np.full(len(cfg), float(default))


def gemm_structure(cfg: pd.DataFrame, m: float, n: float, k: float) -> dict[str, np.ndarray]:
    """CLBlast ``Xgemm`` (C[m,n] = A[m,k] B[k,n]) from its tunables (``MWG`` ... ``SB``, without ``cfg_``).

    A block (work-group) of ``MDIMC x NDIMC`` threads computes an ``MWG x NWG`` tile of C, ``MWI x NWI`` =
    ``MWG/MDIMC x NWG/NDIMC`` outputs per thread held in registers; A (B) tiles of ``KWG x MWG`` (``x NWG``) go
    through local memory when ``SA`` (``SB``) is 1, otherwise each thread reads its own A (B) values from
    global memory (through the caches). Global traffic: A is read once per block column (``n / NWG`` times, or
    ``n / NWI`` times without local memory), B once per block row.
    """
    mwg, nwg, kwg = _col(cfg, "MWG"), _col(cfg, "NWG"), _col(cfg, "KWG", 32)
    mdimc, ndimc = _col(cfg, "MDIMC"), _col(cfg, "NDIMC")
    mdima, ndimb = _col(cfg, "MDIMA", 8), _col(cfg, "NDIMB", 8)
    vwm, vwn, kwi = _col(cfg, "VWM", 1), _col(cfg, "VWN", 1), _col(cfg, "KWI", 1)
    sa, sb = _col(cfg, "SA", 0), _col(cfg, "SB", 0)
    strm, strn = _col(cfg, "STRM", 0), _col(cfg, "STRN", 0)
    threads = mdimc * ndimc
    mwi, nwi = mwg / mdimc, nwg / ndimc
    blocks = np.ceil(m / mwg) * np.ceil(n / nwg)
    a_reads = m * k * n / np.where(sa > 0, nwg, nwi)  # floats read from global memory
    b_reads = k * n * m / np.where(sb > 0, mwg, mwi)
    traffic = FLOAT_BYTES * (a_reads + b_reads + m * n)
    return {
        "threads": threads,
        "outputs_per_thread": mwi * nwi,
        "mwi": mwi,
        "nwi": nwi,
        "regs_per_thread": mwi * nwi + mwi + nwi + 16.0,  # accumulators + A/B fragments + addressing
        "smem_bytes": FLOAT_BYTES * kwg * (sa * mwg + sb * nwg),
        "blocks": blocks,
        "traffic_bytes": traffic,
        "flops_per_byte": 2 * m * n * k / traffic,
        "tile_aspect": np.log2(mwg / nwg),
        "vector_m_ops": mwi / vwm,
        "vector_n_ops": nwi / vwn,
        "a_load_rows_per_thread": mwg / mdima,
        "b_load_cols_per_thread": nwg / ndimb,
        "a_load_k_per_thread": kwg * mdima / threads,
        "b_load_k_per_thread": kwg * ndimb / threads,
        "unroll": kwi,
        "strided": strm + strn,
        "local_ab": sa + sb,
    }


def conv_structure(cfg: pd.DataFrame, h_out: float, w_out: float, fh: float, fw: float) -> dict[str, np.ndarray]:
    """Kernel Tuner's 2-D convolution (``convolution_milo``): a block of ``block_size_x x block_size_y`` threads,
    each computing ``tile_size_x x tile_size_y`` outputs; with ``use_shmem`` the block stages its input tile plus
    the filter halo in shared memory (``use_padding`` pads a row against bank conflicts), ``read_only`` loads
    through the read-only cache, ``use_cmem`` keeps the filter in constant memory."""
    bx, by = _col(cfg, "block_size_x"), _col(cfg, "block_size_y")
    tx, ty = _col(cfg, "tile_size_x", 1), _col(cfg, "tile_size_y", 1)
    shmem, pad = _col(cfg, "use_shmem", 0), _col(cfg, "use_padding", 0)
    tile_w, tile_h = bx * tx, by * ty
    in_w, in_h = tile_w + fw - 1, tile_h + fh - 1
    blocks = np.ceil(w_out / tile_w) * np.ceil(h_out / tile_h)
    loads = blocks * in_w * in_h  # input floats a block reads (once with shared memory, else via caches)
    traffic = FLOAT_BYTES * (loads + h_out * w_out)
    return {
        "threads": bx * by,
        "outputs_per_thread": tx * ty,
        "regs_per_thread": tx * ty + tx + ty + 16.0,
        "smem_bytes": shmem * FLOAT_BYTES * in_h * (in_w + pad),
        "blocks": blocks,
        "traffic_bytes": traffic,
        "flops_per_byte": 2 * h_out * w_out * fh * fw / traffic,
        "tile_aspect": np.log2(tile_w / tile_h),
        "halo_overhead": in_w * in_h / (tile_w * tile_h),
        "row_threads": bx,
        "read_only": _col(cfg, "read_only", 0),
        "use_shmem": shmem,
        "use_padding": pad,
        "use_cmem": _col(cfg, "use_cmem", 0),
    }


def _gemm_kernel(row) -> tuple:
    return float(row["m"]), float(row["n"]), float(row["k"])


def _conv_kernel(row) -> tuple:
    kernel = float(row["kernel"])
    return float(row["h"]) - kernel + 1, float(row["w"]) - kernel + 1, kernel, kernel


# op -> (structure function, shape arguments from a schema row, the FLOPs of the problem)
KERNELS = {
    "matmul": (gemm_structure, _gemm_kernel, lambda s: 2 * s[0] * s[1] * s[2]),
    "conv2d": (conv_structure, _conv_kernel, lambda s: 2 * s[0] * s[1] * s[2] * s[3]),
}


def spec_relative(structure: dict[str, np.ndarray], flops: float, spec: HardwareSpec) -> dict[str, np.ndarray]:
    """Occupancy, waves and balance of a kernel's blocks on ``spec`` (module docstring); all dimensionless.

    Blocks per SM = the smallest of the limits on resident blocks, threads (in whole warps), registers and shared
    memory (CUDA occupancy calculator); 0 where one block does not fit (such a configuration fails to launch).
    """
    lim = device_limits(spec)
    threads, blocks = structure["threads"], structure["blocks"]
    warps = np.ceil(threads / lim["simd"])
    smem, regs = structure["smem_bytes"], structure["regs_per_thread"] * warps * lim["simd"]
    fits = (threads <= 1024) & (smem <= lim["smem_block"]) & (regs <= lim["regs"])
    per_sm = np.minimum.reduce(
        [
            np.full(len(threads), float(lim["blocks"])),
            np.floor(lim["threads"] / (warps * lim["simd"])),
            np.floor(lim["regs"] / np.maximum(regs, 1.0)),
            np.where(smem > 0, np.floor(lim["smem"] / np.maximum(smem, 1.0)), np.inf),
        ]
    )
    per_sm = np.where(fits, np.maximum(per_sm, 0.0), 0.0)
    sms = max(float(spec.sm_count), 1.0)
    slots = np.maximum(per_sm * sms, 1.0)
    waves = blocks / slots
    peak = spec.peak_flops("float32") if spec.peak_tflops.get("float32") else np.nan
    bw = spec.bandwidth_bytes_s if spec.memory_bandwidth_gbs else np.nan
    compute_s = flops / peak
    memory_s = structure["traffic_bytes"] / bw
    return {
        "blocks_per_sm": per_sm,
        "occupancy": per_sm * warps * lim["simd"] / lim["threads"],
        "simd_fill": threads / (warps * lim["simd"]),
        "log2_waves": np.log2(np.maximum(waves, 1e-9)),
        "tail_efficiency": waves / np.maximum(np.ceil(waves), 1.0),
        "smem_fraction": smem / lim["smem"],
        "regs_fraction": regs / lim["regs"],
        "log2_memory_over_compute": np.log2(memory_s / compute_s),
        "log2_roofline_ms": np.log2(
            np.maximum(compute_s, memory_s) * 1e3 / np.maximum(waves / np.maximum(np.ceil(waves), 1.0), 1e-3)
        ),
        "limits_known": np.full(len(threads), float(lim["limits_known"])),
    }


def tuning_features(
    rows: pd.DataFrame, registry: HardwareRegistry, spec_relative_features: bool = True, hardware_ids: bool = False
) -> pd.DataFrame:
    """Features of tuning configurations: schema rows (``op``, shape columns, ``hardware``, ``config`` JSON) ->
    ``cfg_*`` tunables + ``k_*`` kernel structure (known ops) + ``rel_*`` spec-relative features (per GPU).

    ``hardware_ids`` adds the raw spec numbers (``hw_sm_count``, ``hw_bandwidth_gbs``, ``hw_peak_tflops``): they
    identify a GPU among the training GPUs but carry nothing a new GPU can use that ``rel_*`` does not.
    Rows are grouped by (op, shape, hardware); each group is one kernel on one GPU.
    """
    rows = rows.reset_index(drop=True)
    parts = []
    keys = ["op", "hardware", *[c for c in ("m", "n", "k", "h", "w", "kernel") if c in rows.columns]]
    for _, idx in rows.groupby(keys, dropna=False, sort=False).groups.items():
        idx = np.asarray(idx)
        first = rows.iloc[idx[0]]
        cfg = config_frame(rows.iloc[idx])  # per kernel: another kernel's tunables are absent, not a category
        out = cfg.set_axis(idx)
        if first["op"] in KERNELS:
            structure_fn, shape_fn, flops_fn = KERNELS[first["op"]]
            shape = shape_fn(first)
            s = structure_fn(cfg.rename(columns=lambda c: c[4:]), *shape)
            for name, v in s.items():
                out[f"k_{name}"] = np.asarray(v, float)
            if spec_relative_features:
                spec = registry.get(first["hardware"])
                for name, v in spec_relative(s, flops_fn(shape), spec).items():
                    out[f"rel_{name}"] = np.asarray(v, float)
        if hardware_ids:
            spec = registry.get(first["hardware"])
            out["hw_sm_count"] = float(spec.sm_count)
            out["hw_bandwidth_gbs"] = float(spec.memory_bandwidth_gbs)
            out["hw_peak_tflops"] = float(spec.peak_tflops.get("float32", np.nan))
        parts.append(out)
    return pd.concat(parts).sort_index() if parts else pd.DataFrame(index=rows.index)


def reference_runtime_features(rows: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """What other GPUs measured for the same configurations: one column per reference GPU, ``ref_<hardware>`` =
    log(its runtime of this configuration / its fastest runtime) (0 = that GPU's best configuration), plus their
    NaN-aware mean, min and max and how many GPUs measured it (``ref_count``).

    ``rows`` and ``reference`` are schema rows of one kernel (same ``op`` and shape; ``config`` JSON and, in
    ``reference``, ``hardware`` and ``runtime_ms``). Configurations a GPU did not measure are NaN. Related GPUs
    rank configurations alike (CLBlast GEMM on the Turing and Ampere GPUs here: Kendall tau 0.79-0.97), and
    a model fitted on the new GPU's few measurements learns how far to trust each of them.
    """
    ref = reference[reference["runtime_ms"].notna() & (reference["runtime_ms"] > 0)]
    rel = np.log(ref["runtime_ms"].to_numpy(float))
    rel = rel - pd.Series(rel).groupby(ref["hardware"].to_numpy()).transform("min").to_numpy()
    wide = pd.DataFrame(
        {"config": ref["config"].to_numpy(), "hardware": ref["hardware"].to_numpy(), "rel": rel}
    ).pivot_table(index="config", columns="hardware", values="rel", aggfunc="mean")
    out = wide.reindex(rows["config"].to_numpy()).reset_index(drop=True)
    out.columns = [f"ref_{h}" for h in out.columns]
    values = out.to_numpy(float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows: a configuration no GPU measured
        for name, fn in (("mean", np.nanmean), ("min", np.nanmin), ("max", np.nanmax)):
            out[f"ref_{name}"] = fn(values, axis=1) if values.shape[1] else np.nan
    out["ref_count"] = np.isfinite(values).sum(axis=1).astype(float)
    return out.set_axis(rows.index)
