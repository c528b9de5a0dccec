"""Roofline baseline: no learning. runtime = max(FLOPs / peak[dtype], bytes / bandwidth).

The formula lives in ``features.tabular.roofline_s``; the featurizer puts its value in the
``roofline_ms`` column, so this model reads it. It is the floor every learned model is reported against.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from models.base import CostModel, check_xy


class RooflineModel(CostModel):
    name = "roofline"

    def __init__(self, column: str = "roofline_ms"):
        self.column = column

    def fit(self, X: pd.DataFrame, y: np.ndarray) -> "RooflineModel":
        check_xy(X, y)
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        check_xy(X)
        return X[self.column].to_numpy(float)
