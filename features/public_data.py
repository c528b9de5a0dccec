"""Features of the public datasets (NeuSight, Kernel Tuner, wa-hls4ml) beyond the plain tabular encoding.

* :func:`spec_features`: ``TabularFeaturizer`` features (shape + hardware spec), computed once per distinct
  description row (the public files repeat a shape on many rows);
* :func:`config_frame`: a row's ``config`` JSON (Kernel Tuner tunables, hls4ml settings) as numeric columns;
* :func:`fpga_features`: a dense layer on an FPGA (d_in, d_out, precision, reuse factor, strategy + log2 products).
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from data.hardware import HardwareRegistry
from data.workloads import SHAPE_PARAMS
from features.tabular import TabularFeaturizer

DESCRIBE = ["op", "hardware", "dtype", *SHAPE_PARAMS]


def spec_features(rows: pd.DataFrame, registry: HardwareRegistry) -> pd.DataFrame:
    """``TabularFeaturizer`` features (shape + hardware spec), computed once per distinct description row."""
    desc = rows[[c for c in DESCRIBE if c in rows.columns]].copy()
    key = pd.util.hash_pandas_object(desc, index=False)  # 64-bit row hash (NaN-safe)
    first = ~key.duplicated()
    X_unique = TabularFeaturizer(registry).transform(desc[first.to_numpy()].reset_index(drop=True))
    X_unique.index = key[first.to_numpy()].to_numpy()
    return X_unique.loc[key.to_numpy()].reset_index(drop=True)


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


def fpga_features(rows: pd.DataFrame) -> pd.DataFrame:
    """Layer (d_in = k, d_out = n), precision bits, reuse factor, strategy and derived products (log2)."""
    cfg = config_frame(rows)
    k, n = rows["k"].to_numpy(float), rows["n"].to_numpy(float)
    bits, rf = cfg["cfg_precision_bits"].to_numpy(float), cfg["cfg_reuse_factor"].to_numpy(float)
    strategy = np.array([json.loads(c)["strategy"] == "resource" for c in rows["config"]], float)
    return pd.DataFrame({"d_in": k, "d_out": n, "precision_bits": bits, "reuse_factor": rf,
                         "strategy_resource": strategy, "log2_weights": np.log2(k * n),
                         "log2_weight_bits": np.log2(k * n * bits), "log2_mults_per_cycle": np.log2(k * n / rf),
                         "log2_reuse_factor": np.log2(rf)})
