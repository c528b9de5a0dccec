"""Speed of light: the time under which no kernel can run on a spec, and the floor it puts under served times.

A kernel of ``F`` FLOPs that moves ``B`` bytes (inputs, weights and outputs once: ``data.costs.costs``, the closed
forms the features use) cannot finish before

    sol = max(F / peak, max(0, B - cache) / bandwidth)

on a GPU whose spec sheet gives ``peak`` (dense FLOP/s) and ``bandwidth`` (DRAM bytes/s):

* ``peak`` is the fastest rate the row's math can use, so the bound holds whatever the library picks: float16 /
  bfloat16 the larger of the dtype's rate and the float32 rate (a GPU without matrix units runs 16-bit GEMMs with
  fp32 accumulate on its float32 units, faster than its native half rate); ``tf32`` the larger of the TF32 and
  float32 rates; float32 the float32 rate, and the TF32 rate too for a convolution run under cuDNN's default math
  (``conv_fp32_math`` / the row's ``source``, ``features.physics.conv_tf32_of``);
* ``cache`` is the L2 (``l2_cache_mb``): a kernel timed back to back finds up to that much of its operands still
  on chip, so only the rest must cross the DRAM bus.

Where the closed forms count more work than the fastest algorithm does, the term is left out or scaled:

* a convolution with a kernel wider than 1 at stride 1 has no compute term: Winograd (F(4x4, 3x3) does a quarter of
  the direct multiplies) and FFT convolutions do fewer FLOPs than the direct count, and cuDNN picks them;
* a convolution whose stride is larger than its kernel has no memory term: it never reads the input pixels between
  its windows, which the byte count includes;
* a MoE layer has no memory term: its bytes are the weights of the experts its tokens are routed to, an average over
  random routing (``data.ops.experts_touched``) that a concentrated routing reads less of;
* a causal ``sdpa`` counts the keys its queries see (``kv_len - seq_len / 2`` of ``kv_len``: half of a square one):
  a fused attention kernel skips the masked part of the score matrix.

Rows on a CPU (its peak and bandwidth are this machine's measurements of one shape, not a limit), an FPGA or an
accelerator get no floor (NaN).

:func:`apply_floor` raises a served interval's low end to the floor, and the point prediction too: a time under the
speed of light is physically impossible on that spec, so a model that predicts one is wrong there, and the floor is
the nearest possible answer. The high end is kept at least at the point. Only a spec that is wrong (a peak or
bandwidth below the device's real one) makes a measured time fall under its floor; then the spec is in question,
not the floor (``tests/test_sol.py`` checks that no measured row of the reference pack does).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from data.costs import costs
from data.hardware import HardwareRegistry
from data.ops import DTYPE_INFO, OPS, SHAPE_PARAMS

SIXTEEN_BIT = ("float16", "bfloat16")


def _peak(spec, dtype: str, conv_tf32: bool) -> float:
    """The fastest dense FLOP/s a kernel in ``dtype`` can run at on ``spec`` (module docstring)."""
    rates = {k: float(v) * 1e12 for k, v in spec.peak_tflops.items()}
    fp32 = rates.get("float32", 0.0)
    if dtype == "tf32" or (dtype == "float32" and conv_tf32):
        return max(rates.get("tf32", 0.0), fp32)
    # the rate of the dtype's math (data.ops.DTYPE_INFO: fp8 formats at the fp8 rate, weight-only int4 at bfloat16's)
    return max(rates.get(DTYPE_INFO[dtype].rate, 0.0), fp32)


def speed_of_light_ms(workloads: pd.DataFrame, registry: HardwareRegistry) -> np.ndarray:
    """Per row of a workload frame (``op``, ``hardware``, ``dtype``, shape columns) its speed of light in ms on its
    hardware's spec; NaN where the hardware is not a GPU. The frame is validated as a served one is
    (``features.tabular.TabularFeaturizer.check``: bad rows raise its ``FeatureError``)."""
    from features.physics import conv_tf32_of
    from features.tabular import TabularFeaturizer, kv_dtypes_of

    df = TabularFeaturizer(registry).check(workloads)
    n = len(df)
    if n == 0:
        return np.zeros(0)
    ops = df["op"].to_numpy(object)
    dtypes = df["dtype"].to_numpy(object)
    flops, nbytes = costs(ops, {p: df[p].to_numpy(float) for p in SHAPE_PARAMS}, dtypes, kv_dtypes=kv_dtypes_of(df))
    family = np.array([OPS[o].family for o in ops], dtype=object)
    conv = family == "conv"
    conv_tf32 = conv_tf32_of(df) & conv
    kernel, stride = df["kernel"].to_numpy(float), np.where(df["stride"].to_numpy(float) > 0, df["stride"], 1.0)
    seq, kv = df["seq_len"].to_numpy(float), df["kv_len"].to_numpy(float)
    kv = np.where(kv > 0, kv, seq)  # a causal query sees kv_len - seq_len / 2 keys on average (the last positions)
    with np.errstate(invalid="ignore"):
        causal = (ops == "sdpa") & (df["causal"].to_numpy(float) == 1)
        flops = np.where(causal, flops * (kv - seq / 2) / np.where(causal, kv, 1.0), flops)
    flops = np.where(conv & (kernel > 1) & (stride == 1), 0.0, flops)
    nbytes = np.where(conv & (stride > kernel), 0.0, nbytes)
    nbytes = np.where(family == "moe", 0.0, nbytes)  # the experts a routing reaches: the row does not say which
    keys = pd.Series(df["hardware"].astype(str) + "|" + df["dtype"].astype(str) + "|" + conv_tf32.astype(str))
    codes, uniques = pd.factorize(keys)
    peak, bandwidth, cache = (np.full(len(uniques), np.nan) for _ in range(3))
    for j, key in enumerate(uniques):
        hw, dtype, tf32 = key.split("|")
        spec = registry.get(hw)
        if spec.kind != "gpu" or not spec.memory_bandwidth_gbs:
            continue
        peak[j] = _peak(spec, dtype, tf32 == "True")
        bandwidth[j] = spec.bandwidth_bytes_s
        cache[j] = float(spec.l2_cache_mb) * 2**20
    compute = flops / peak[codes]
    memory = np.maximum(nbytes - cache[codes], 0.0) / bandwidth[codes]
    return np.maximum(compute, memory) * 1e3


def apply_floor(point, lo, hi, floor) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(point, lo, hi, raised)`` with the point and the low end at least ``floor`` (NaN: no floor) and the high end
    at least the point; ``raised`` marks the rows whose point prediction was under the floor."""
    point, lo, hi, floor = (np.asarray(a, float) for a in (point, lo, hi, floor))
    f = np.where(np.isnan(floor), -np.inf, floor)
    raised = point < f
    point = np.maximum(point, f)
    return point, np.maximum(lo, f), np.maximum(hi, point), raised
