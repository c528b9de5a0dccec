"""Tree-ensemble surrogates on the tabular encoding: random forest (scikit-learn) and XGBoost.

Feature columns seen in ``fit`` are remembered and enforced in ``predict``.

**One target** (the default, ``targets=None``): ``y`` has shape ``(n,)``, the model fits log(y) and predicts
exp(.), shape ``(n,)``.

**Several targets** (``targets=["lut", "ff", ...]``): ``y`` has shape ``(n, T)`` in that column order and
``predict`` returns ``(n, T)``. Random forest: scikit-learn's native multi-output trees (one tree predicts every
target; splits minimise the summed squared error, so each transformed target is standardised to unit variance
first and no target dominates by scale). XGBoost: native multi-output (``multi_strategy``:
``one_output_per_tree``, one tree per target per round inside one booster, the default; ``multi_output_tree``
grows vector-leaf trees); ``benchmarks/multi_target.py`` measures the choice.

Per target ``j`` (lists, one entry per target; a scalar applies to every target):

* ``transform``: ``log`` fits z = log(y) (positive targets: runtime, power, latency), ``log1p`` fits
  z = log(1 + y) (zero-heavy counts: FPGA DSP = 0 or BRAM = 0 designs are ordinary points, no hurdle model);
* ``base_columns``: a feature column b, or None: the model fits z = transform(y / b) and predicts b * inverse(.)
  (a multiplicative correction over an analytical estimate or a board limit; ``models.power``);
* ``lower`` / ``upper``: predictions are clipped to [lower, upper] (physical ranges: never negative, never above
  the device's totals, e.g. the FPGA part's DSP count). None = unbounded.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import joblib
import numpy as np
import pandas as pd
import xgboost as xgb
from sklearn.ensemble import RandomForestRegressor

from models.base import CostModel, check_targets, check_xy

FORWARD = {"log": np.log, "log1p": np.log1p}
INVERSE = {"log": np.exp, "log1p": np.expm1}


def per_target(value, n: int, what: str) -> list:
    """A per-target setting as a list of ``n`` entries (a scalar or None repeats)."""
    if isinstance(value, Sequence) and not isinstance(value, str):  # list, tuple, an OmegaConf ListConfig
        if len(value) != n:
            raise ValueError(f"{what} has {len(value)} entries for {n} targets")
        return list(value)
    return [value] * n


ROWS_PER_PREDICT_THREAD = 50_000  # benchmarks/predict_throughput.py: fewer rows per thread lose to one thread


def predict_threads(rows: int, n_jobs: int | None) -> int:
    """Threads for predicting ``rows`` rows: one per ``ROWS_PER_PREDICT_THREAD`` rows, at most ``n_jobs`` (<= 0 or
    None: the CPUs this process may use, capped by ``OMP_NUM_THREADS`` when set)."""
    cap = (
        n_jobs
        if n_jobs and n_jobs > 0
        else len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else (os.cpu_count() or 1)
    )
    if os.environ.get("OMP_NUM_THREADS", "").isdigit():
        cap = min(cap, int(os.environ["OMP_NUM_THREADS"]) or cap)
    return max(1, min(cap, rows // ROWS_PER_PREDICT_THREAD))


class _LogTargetModel(CostModel):
    feature_names_: list[str]
    scale_: tuple[list[float], list[float]] | None = None  # (mean, std) of each transformed target, multi-target

    def _multi(self) -> bool:
        return self.targets is not None

    def _spec(self) -> tuple[list[str], list, list, list]:
        n = len(self.targets) if self._multi() else 1
        return (
            per_target(self.transform, n, "transform"),
            per_target(self.base_columns, n, "base_columns"),
            per_target(self.lower, n, "lower"),
            per_target(self.upper, n, "upper"),
        )

    def _matrix(self, X: pd.DataFrame) -> np.ndarray:
        missing = [c for c in self.feature_names_ if c not in X.columns]
        if missing:
            raise ValueError(f"features missing: {', '.join(missing)}")
        return X[self.feature_names_].to_numpy(np.float32)

    def _bases(self, X: pd.DataFrame, bases: list) -> np.ndarray:
        missing = [b for b in bases if b is not None and b not in X.columns]
        if missing:
            raise ValueError(f"base columns missing: {', '.join(missing)}")
        return np.column_stack([np.ones(len(X)) if b is None else X[b].to_numpy(float) for b in bases])

    def fit(self, X, y):
        X, _ = check_xy(X)
        transforms, bases, _, _ = self._spec()
        if self._multi() and len(set(self.targets)) != len(self.targets):
            raise ValueError(f"duplicate target names: {self.targets}")
        y = check_targets(y, len(X), len(self.targets) if self._multi() else None, transforms)
        self.feature_names_ = list(X.columns)
        ratio = y.reshape(len(y), -1) / self._bases(X, bases)
        z = np.column_stack([FORWARD[t](ratio[:, j]) for j, t in enumerate(transforms)])
        if self._multi():
            mean, std = z.mean(axis=0), z.std(axis=0)
            std = np.where(std > 0, std, 1.0)
            self.scale_ = (mean.tolist(), std.tolist())
            self._fit(X[self.feature_names_].to_numpy(np.float32), (z - mean) / std)
        else:
            self._fit(X[self.feature_names_].to_numpy(np.float32), z[:, 0])
        return self

    def predict(self, X):
        X, _ = check_xy(X)
        transforms, bases, lower, upper = self._spec()
        z = np.asarray(self._predict(self._matrix(X)), dtype=np.float64).reshape(len(X), -1)
        if self._multi():
            z = z * np.asarray(self.scale_[1]) + np.asarray(self.scale_[0])
        out = np.column_stack([INVERSE[t](z[:, j]) for j, t in enumerate(transforms)])
        if any(b is not None for b in bases):
            out = out * self._bases(X, bases)
        for j, (lo, hi) in enumerate(zip(lower, upper)):
            if lo is not None or hi is not None:
                out[:, j] = np.clip(out[:, j], -np.inf if lo is None else lo, np.inf if hi is None else hi)
        return out if self._multi() else out[:, 0]


class RandomForestModel(_LogTargetModel):
    name = "rf"

    def __init__(
        self,
        n_estimators: int = 300,
        max_features: float | str = 0.5,
        min_samples_leaf: int = 1,
        random_state: int = 0,
        n_jobs: int = -1,
        targets: list[str] | None = None,
        transform: str | list[str] = "log",
        lower=None,
        upper=None,
        base_columns=None,
    ):
        self.n_estimators = n_estimators
        self.max_features = max_features
        self.min_samples_leaf = min_samples_leaf
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.targets, self.transform, self.lower, self.upper = targets, transform, lower, upper
        self.base_columns = base_columns

    def _fit(self, X, y):
        self.model_ = RandomForestRegressor(
            n_estimators=self.n_estimators,
            max_features=self.max_features,
            min_samples_leaf=self.min_samples_leaf,
            random_state=self.random_state,
            n_jobs=self.n_jobs,
        )
        self.model_.fit(X, y)

    def _predict(self, X):
        return self.model_.predict(X)

    def _save_payload(self, path: Path) -> None:
        joblib.dump({"model": self.model_, "features": self.feature_names_, "scale": self.scale_}, path / "rf.joblib")

    def _load_payload(self, path: Path) -> None:
        state = joblib.load(path / "rf.joblib")
        self.model_, self.feature_names_ = state["model"], state["features"]
        self.scale_ = state.get("scale")  # absent in files saved before multi-target models


class XGBoostModel(_LogTargetModel):
    name = "xgb"

    def __init__(
        self,
        n_estimators: int = 600,
        learning_rate: float = 0.05,
        max_depth: int = 8,
        subsample: float = 0.8,
        colsample_bytree: float = 0.8,
        min_child_weight: float = 1.0,
        random_state: int = 0,
        n_jobs: int = -1,
        targets: list[str] | None = None,
        transform: str | list[str] = "log",
        lower=None,
        upper=None,
        base_columns=None,
        multi_strategy: str = "one_output_per_tree",
    ):
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.max_depth = max_depth
        self.subsample = subsample
        self.colsample_bytree = colsample_bytree
        self.min_child_weight = min_child_weight
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.targets, self.transform, self.lower, self.upper = targets, transform, lower, upper
        self.base_columns, self.multi_strategy = base_columns, multi_strategy

    def _fit(self, X, y):
        multi = {"multi_strategy": self.multi_strategy} if self._multi() else {}
        self.model_ = xgb.XGBRegressor(
            n_estimators=self.n_estimators,
            learning_rate=self.learning_rate,
            max_depth=self.max_depth,
            subsample=self.subsample,
            colsample_bytree=self.colsample_bytree,
            min_child_weight=self.min_child_weight,
            random_state=self.random_state,
            n_jobs=self.n_jobs,
            tree_method="hist",
            **multi,
        )
        self.model_.fit(X, y)

    def _predict(self, X):
        # predict threads are set per call, apart from fit's n_jobs: a small batch on one thread (waking OpenMP
        # workers costs more than they save), a large one on more (predict_threads)
        self.model_.get_booster().set_param({"nthread": predict_threads(len(X), self.n_jobs)})
        return self.model_.predict(X)

    def _save_payload(self, path: Path) -> None:
        self.model_.save_model(path / "xgb.ubj")
        (path / "features.json").write_text(json.dumps(self.feature_names_))
        if self.scale_ is not None:
            (path / "target_scale.json").write_text(json.dumps(self.scale_))

    def _load_payload(self, path: Path) -> None:
        self.model_ = xgb.XGBRegressor()
        self.model_.load_model(path / "xgb.ubj")
        self.feature_names_ = json.loads((path / "features.json").read_text())
        scale = path / "target_scale.json"
        self.scale_ = json.loads(scale.read_text()) if scale.exists() else None
