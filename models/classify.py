"""FPGA resource surrogates: zero-heavy targets in log1p space, predictions bounded to the part, and a
feasibility classifier (does HLS synthesis succeed?).

* :class:`BoundedLog1pModel` wraps any :class:`~models.base.CostModel` that fits log(y) (rf, xgb): it fits the
  inner model on ``y + 1``, so the inner model learns ``log(y + 1) = log1p(y)``, which is defined for the many
  designs with DSP = 0 or BRAM = 0 and behaves like log(y) for large counts (no hurdle model). Predictions are
  ``inner.predict - 1`` clipped to ``[0, upper]``, ``upper`` the part's total of that resource (e.g. 12 288 DSPs
  on the xcvu13p), so no prediction is negative or larger than the device.
* :class:`FeasibilityClassifier`: a random-forest classifier on the same features; label 1 = synthesis
  succeeded. Failed rows have no targets, so they only ever train this classifier.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.ensemble import RandomForestClassifier

from models.base import CostModel, check_xy


class BoundedLog1pModel(CostModel):
    name = "bounded_log1p"

    def __init__(self, inner: CostModel, upper: float = float("inf")):
        if not upper > 0:
            raise ValueError(f"upper bound must be > 0, got {upper}")
        self.inner = inner
        self.upper = upper

    def fit(self, X: pd.DataFrame, y) -> "BoundedLog1pModel":
        y = np.asarray(y, dtype=float)
        if not np.all(np.isfinite(y)) or np.any(y < 0):
            raise ValueError("resource targets must be finite and >= 0")
        self.inner.fit(X, y + 1.0)
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        return np.clip(self.inner.predict(X) - 1.0, 0.0, self.upper)


class FeasibilityClassifier:
    """Random forest on the tabular features; ``predict`` returns 1 where synthesis is predicted to succeed."""

    def __init__(self, n_estimators: int = 300, random_state: int = 0, n_jobs: int = -1):
        self.n_estimators, self.random_state, self.n_jobs = n_estimators, random_state, n_jobs

    def fit(self, X: pd.DataFrame, ok) -> "FeasibilityClassifier":
        X, _ = check_xy(X)
        self.feature_names_ = list(X.columns)
        self.model_ = RandomForestClassifier(n_estimators=self.n_estimators, random_state=self.random_state,
                                             n_jobs=self.n_jobs, class_weight="balanced")
        self.model_.fit(X.to_numpy(np.float32), np.asarray(ok, dtype=int))
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        return self.model_.predict(X[self.feature_names_].to_numpy(np.float32))
