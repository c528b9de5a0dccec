"""Features of the public datasets (NeuSight, Kernel Tuner, wa-hls4ml) beyond the plain tabular encoding.

* :func:`spec_features`: ``TabularFeaturizer`` features (shape + hardware spec), computed once per distinct
  description row (the public files repeat a shape on many rows);
* :func:`config_frame`: a row's ``config`` JSON (Kernel Tuner tunables, hls4ml settings) as numeric columns;
* :func:`fpga_features`: a dense layer on an FPGA (d_in, d_out, precision, reuse factor, strategy + log2 products).
"""

from __future__ import annotations

import pandas as pd

from data.hardware import HardwareRegistry
from data.workloads import SHAPE_PARAMS
from features.config import config_frame  # noqa: F401  (re-exported: Kernel Tuner tunables)
from features.fpga import fpga_features  # noqa: F401  (re-exported: hls4ml dense layers)
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
