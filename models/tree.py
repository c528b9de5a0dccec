"""Tree-ensemble surrogates on the tabular encoding: random forest (scikit-learn) and XGBoost.

Both fit log(target). Feature columns seen in ``fit`` are remembered and enforced in ``predict``.
"""
from __future__ import annotations

import json
from pathlib import Path

import joblib
import numpy as np
import pandas as pd
import xgboost as xgb
from sklearn.ensemble import RandomForestRegressor

from models.base import CostModel, check_xy


class _LogTargetModel(CostModel):
    feature_names_: list[str]

    def _matrix(self, X: pd.DataFrame) -> np.ndarray:
        missing = [c for c in self.feature_names_ if c not in X.columns]
        if missing:
            raise ValueError(f"features missing: {', '.join(missing)}")
        return X[self.feature_names_].to_numpy(np.float32)

    def fit(self, X, y):
        X, y = check_xy(X, y)
        self.feature_names_ = list(X.columns)
        self._fit(X[self.feature_names_].to_numpy(np.float32), np.log(y))
        return self

    def predict(self, X):
        X, _ = check_xy(X)
        return np.exp(np.asarray(self._predict(self._matrix(X)), dtype=np.float64))


class RandomForestModel(_LogTargetModel):
    name = "rf"

    def __init__(self, n_estimators: int = 300, max_features: float | str = 0.5, min_samples_leaf: int = 1,
                 random_state: int = 0, n_jobs: int = -1):
        self.n_estimators = n_estimators
        self.max_features = max_features
        self.min_samples_leaf = min_samples_leaf
        self.random_state = random_state
        self.n_jobs = n_jobs

    def _fit(self, X, y):
        self.model_ = RandomForestRegressor(
            n_estimators=self.n_estimators, max_features=self.max_features,
            min_samples_leaf=self.min_samples_leaf, random_state=self.random_state, n_jobs=self.n_jobs)
        self.model_.fit(X, y)

    def _predict(self, X):
        return self.model_.predict(X)

    def _save_payload(self, path: Path) -> None:
        joblib.dump({"model": self.model_, "features": self.feature_names_}, path / "rf.joblib")

    def _load_payload(self, path: Path) -> None:
        state = joblib.load(path / "rf.joblib")
        self.model_, self.feature_names_ = state["model"], state["features"]


class XGBoostModel(_LogTargetModel):
    name = "xgb"

    def __init__(self, n_estimators: int = 600, learning_rate: float = 0.05, max_depth: int = 8,
                 subsample: float = 0.8, colsample_bytree: float = 0.8, min_child_weight: float = 1.0,
                 random_state: int = 0, n_jobs: int = -1):
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.max_depth = max_depth
        self.subsample = subsample
        self.colsample_bytree = colsample_bytree
        self.min_child_weight = min_child_weight
        self.random_state = random_state
        self.n_jobs = n_jobs

    def _fit(self, X, y):
        self.model_ = xgb.XGBRegressor(
            n_estimators=self.n_estimators, learning_rate=self.learning_rate, max_depth=self.max_depth,
            subsample=self.subsample, colsample_bytree=self.colsample_bytree,
            min_child_weight=self.min_child_weight, random_state=self.random_state, n_jobs=self.n_jobs,
            tree_method="hist")
        self.model_.fit(X, y)

    def _predict(self, X):
        return self.model_.predict(X)

    def _save_payload(self, path: Path) -> None:
        self.model_.save_model(path / "xgb.ubj")
        (path / "features.json").write_text(json.dumps(self.feature_names_))

    def _load_payload(self, path: Path) -> None:
        self.model_ = xgb.XGBRegressor()
        self.model_.load_model(path / "xgb.ubj")
        self.feature_names_ = json.loads((path / "features.json").read_text())
