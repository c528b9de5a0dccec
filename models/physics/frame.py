"""The physics frame the model reads (``features.physics.PhysicsFeaturizer``) and the keys its rows are grouped by:
op family, hardware (spec position), math mode, shape."""

from __future__ import annotations

import numpy as np
import pandas as pd

from features.physics import (
    ARCHITECTURE,
    FAMILIES,
    FEATURES,
    HARDWARE,
    HARDWARE_IDENTITY,
    MODES,
    SIZE,
    TIMES,
    PhysicsFeaturizer,
)
from models.domain import distinct_rows

# every column the model reads of a physics frame
COLUMNS = (*FEATURES, *HARDWARE, *SIZE, *TIMES, ARCHITECTURE, "harness_index", "flops", "bytes")
# the columns of one (op, dtype, shape), whatever the hardware: the grouping key of the held-out-shape folds
SHAPE_KEY = (
    "flops",
    "bytes",
    "dtype_bytes",
    "log2_k",
    "log2_m_over_n",
    "log2_batch",
    "log2_row",
    "conv_kernel",
    "conv_stride",
    "causal",
    "log2_m",
    "log2_kv_group",
    "kv_narrow",
    "log2_weight_bytes",
    "log2_gpus",
)


def physics_frame(X: pd.DataFrame, registry=None) -> pd.DataFrame:
    """``X`` if it is already a physics frame, else the physics frame of a workload description frame."""
    if not isinstance(X, pd.DataFrame):
        raise TypeError(f"X must be a DataFrame, got {type(X).__name__}")
    if "physics_ms" in X.columns:
        missing = [c for c in dict.fromkeys(COLUMNS) if c not in X.columns]
        if missing:
            raise ValueError(
                f"physics frame lacks column(s) {', '.join(missing[:5])} (build it with "
                "features.physics.PhysicsFeaturizer)"
            )
        return X.reset_index(drop=True)
    if {"op", "hardware"} <= set(X.columns):
        from data.hardware import HardwareRegistry

        return PhysicsFeaturizer(registry or HardwareRegistry.from_dir()).transform(X)
    raise ValueError(
        "X must be a physics frame (features.physics.PhysicsFeaturizer) or workload descriptions "
        "(op, hardware, dtype and shape columns)"
    )


def columns(X: pd.DataFrame, names) -> np.ndarray:
    """``X[names]`` as a float matrix, column by column (a list selection copies through pandas' indexer, twice as
    slow on the physics frame, and the fits call this thousands of times)."""
    return np.column_stack([X[c].to_numpy(float) for c in names]) if len(X) else np.empty((0, len(names)))


def families_of(X: pd.DataFrame) -> np.ndarray:
    """Per row its op family (:data:`features.physics.FAMILIES`)."""
    onehot = columns(X, [f"family_{f}" for f in FAMILIES])
    return np.asarray(FAMILIES, dtype=object)[onehot.argmax(axis=1)]


def architectures(X: pd.DataFrame) -> np.ndarray:
    """Per row ``vendor:architecture`` ('' where the spec names none)."""
    return X[ARCHITECTURE].fillna("").astype(str).to_numpy(object)


def hardware_keys(X: pd.DataFrame) -> np.ndarray:
    """One string per row naming its hardware's spec position (rows of one GPU share it; no name needed)."""
    H = np.round(columns(X, HARDWARE_IDENTITY), 6)
    if len(H) == 0:
        return np.array([], dtype=object)
    distinct, inverse = distinct_rows(H)  # a few GPUs: format each once, not every row
    names = np.array([",".join(f"{v:.6f}" for v in row) for row in distinct], dtype=object)
    return names[inverse]


def mode_keys(X: pd.DataFrame, hw: np.ndarray | None = None) -> np.ndarray:
    """``hardware_keys`` (``hw`` where already computed) and the row's math mode: a GPU's tensor cores are not learned
    from its fp32 rows."""
    modes = np.asarray(MODES, dtype=object)[columns(X, [f"mode_{m}" for m in MODES]).argmax(axis=1)]
    return (hardware_keys(X) if hw is None else hw) + "|" + modes


def shape_keys(X: pd.DataFrame) -> np.ndarray:
    """One hash per row of its (op, dtype, shape), whatever the hardware (:data:`SHAPE_KEY`)."""
    return pd.util.hash_pandas_object(X[list(SHAPE_KEY)].round(9), index=False).to_numpy()
