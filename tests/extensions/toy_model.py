"""A toy cost model (one file + ``conf/model/toy_scaled_baseline.yaml``): the baseline column times one factor, the
geometric mean of y / baseline over the training rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from models.base import CostModel, check_xy


class ScaledBaseline(CostModel):
    name = "scaled_baseline"

    def __init__(self, column: str = "roofline_ms"):
        self.column = column

    def fit(self, X, y):
        X, y = check_xy(X, y)
        self.factor_ = float(np.exp(np.mean(np.log(y / X[self.column].to_numpy(float)))))
        return self

    def predict(self, X):
        X, _ = check_xy(X)
        return self.factor_ * X[self.column].to_numpy(float)

    def _save_payload(self, path: Path) -> None:
        (path / "factor.json").write_text(json.dumps(self.factor_))

    def _load_payload(self, path: Path) -> None:
        self.factor_ = json.loads((path / "factor.json").read_text())
