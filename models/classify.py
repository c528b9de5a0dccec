"""FPGA feasibility classifier (does HLS synthesis succeed?).

The resource regressors themselves are the multi-target tree models of ``models.tree`` (per-target ``log1p``
transform for the zero-heavy DSP / BRAM counts, predictions clipped to [0, the part's totals]); they replace the
former ``BoundedLog1pModel`` wrapper (one model per resource).

* :class:`FeasibilityClassifier`: a random-forest classifier on the same features; label 1 = synthesis
  succeeded. Failed rows have no targets, so they only ever train this classifier.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.ensemble import RandomForestClassifier

from models.base import check_xy


class FeasibilityClassifier:
    """Random forest on the tabular features; ``predict`` returns 1 where synthesis is predicted to succeed."""

    def __init__(self, n_estimators: int = 300, random_state: int = 0, n_jobs: int = -1):
        self.n_estimators, self.random_state, self.n_jobs = n_estimators, random_state, n_jobs

    def fit(self, X: pd.DataFrame, ok) -> FeasibilityClassifier:
        X, _ = check_xy(X)
        self.feature_names_ = list(X.columns)
        self.model_ = RandomForestClassifier(
            n_estimators=self.n_estimators, random_state=self.random_state, n_jobs=self.n_jobs, class_weight="balanced"
        )
        self.model_.fit(X.to_numpy(np.float32), np.asarray(ok, dtype=int))
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        return self.model_.predict(X[self.feature_names_].to_numpy(np.float32))
