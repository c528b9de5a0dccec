"""Analytical baselines: no learning; the prediction is one feature column, read as is.

* ``column="roofline_ms"`` (target ``runtime_ms``, the default): the roofline,
  runtime = max(FLOPs / peak[dtype], bytes / bandwidth). The formula lives in ``features.tabular.roofline_s``;
  the featurizer puts its value in the ``roofline_ms`` column. It is the floor every learned runtime model is
  reported against.
* ``column="tensor_bytes"`` (target ``peak_mem_bytes``): the bytes the workload's tensors occupy, inputs +
  weights + outputs once (``data.workloads.count_cost``, from the op builders on ``meta`` tensors, no allocation).
  A **lower bound of peak memory**: when the kernel returns, its inputs and weights are still held by the caller
  and its output has been allocated and written, so all three are resident at once; workspace (im2col buffers,
  packed GEMM panels, softmax/layernorm temporaries), allocator rounding and page granularity only add to it.
  The CPU backend measures live inputs + weights + the growth of the resident-set high-water mark during one call
  (``data/backends/cpu.py``), which can fall below the bound only by output pages the allocator already had
  resident (small outputs reusing freed heap pages): sub-page to a few KiB.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from models.base import CostModel, check_xy


class RooflineModel(CostModel):
    name = "roofline"

    def __init__(self, column: str = "roofline_ms"):
        self.column = column

    def fit(self, X: pd.DataFrame, y: np.ndarray) -> RooflineModel:
        check_xy(X, y)
        if self.column not in X.columns:
            raise ValueError(f"roofline baseline: feature column {self.column!r} is not among the features")
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        check_xy(X)
        return X[self.column].to_numpy(float)


class SpeedOfLightModel(CostModel):
    """aiconfigurator's analytical form (its system files): the spec's speed of light with an empirical bandwidth
    factor and a constant latency, ``max(FLOPs / peak, bytes / (bandwidth x bandwidth_factor), comm) + latency``.

    Reads the physics frame (``features.physics``): ``flops``, ``bytes``, the row's peak of its dtype and the
    bandwidth (``hw_log2_*``), and a collective's ring time over the interconnect (``comm_ms``). No learning: the
    baseline the LLM-kernel check sets beside the learned models."""

    name = "sol"

    def __init__(self, bandwidth_factor: float = 0.8, latency_ms: float = 0.003):
        self.bandwidth_factor = float(bandwidth_factor)
        self.latency_ms = float(latency_ms)

    def fit(self, X: pd.DataFrame, y: np.ndarray) -> SpeedOfLightModel:
        check_xy(X, y)
        missing = [c for c in ("flops", "bytes", "hw_log2_peak_flops", "hw_log2_bandwidth") if c not in X.columns]
        if missing:
            raise ValueError(f"speed-of-light baseline: needs the physics frame (lacks {', '.join(missing)})")
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        check_xy(X)
        compute = X["flops"].to_numpy(float) / np.exp2(X["hw_log2_peak_flops"].to_numpy(float))
        memory = X["bytes"].to_numpy(float) / (np.exp2(X["hw_log2_bandwidth"].to_numpy(float)) * self.bandwidth_factor)
        comm = X["comm_ms"].to_numpy(float) / 1e3 if "comm_ms" in X.columns else 0.0
        return np.maximum.reduce([compute, memory, comm + 0 * compute]) * 1e3 + self.latency_ms
