"""Hurdle model for zero-heavy counts (FPGA DSP and BRAM): first "is it zero?", then "how much, if not?".

A design uses no DSP at all when its products are narrow enough for LUTs, and no BRAM when its weights sit in
registers; those are decisions of the tools, not small amounts. One regressor in log1p space spreads its error over
the zeros as small non-zero predictions (a true 0 predicted as 0.3 counts 200 % in SMAPE). A hurdle model (Cragg,
Econometrica 1971; Mullahy 1986) splits the two:

* a classifier (XGBoost, logistic loss) for P(y > 0);
* a regressor (``models.tree.XGBoostModel``, log target) fitted on the non-zero rows only, optionally as a factor
  over an analytical estimate (``base_columns``, e.g. the DSPs hls4ml's multipliers would use);
* prediction = the amount where P(y > 0) >= ``threshold``, else exactly 0.

:class:`HurdleModel` is multi-target like ``models.tree``: ``targets`` names the columns of ``y`` (shape (n, T));
targets in ``hurdle_targets`` get the two parts, the others one ``XGBoostModel`` each with their ``transform``
(log / log1p) and base column. ``lower`` / ``upper`` clip every target to its physical range (the part's totals).
``transform`` is also what ``models.conformal.fit_calibrated`` reads to score intervals per target, so hurdle
targets must be ``log1p`` there (their zeros have no log).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import xgboost as xgb

from models.base import CostModel, check_targets, check_xy
from models.tree import XGBoostModel, per_target


class HurdleModel(CostModel):
    name = "hurdle"

    def __init__(self, targets: list[str], hurdle_targets=("dsp", "bram_18k"), transform="log1p",
                 base_columns=None, lower=None, upper=None, n_estimators: int = 400, learning_rate: float = 0.05,
                 max_depth: int = 6, subsample: float = 0.8, colsample_bytree: float = 0.8,
                 classifier_estimators: int = 200, threshold: float = 0.5, random_state: int = 0, n_jobs: int = 1):
        self.targets = targets
        self.hurdle_targets = hurdle_targets
        self.transform = transform
        self.base_columns = base_columns
        self.lower = lower
        self.upper = upper
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.max_depth = max_depth
        self.subsample = subsample
        self.colsample_bytree = colsample_bytree
        self.classifier_estimators = classifier_estimators
        self.threshold = threshold
        self.random_state = random_state
        self.n_jobs = n_jobs

    def _spec(self):
        n = len(self.targets)
        transforms = per_target(self.transform, n, "transform")
        for t, tr in zip(self.targets, transforms):
            if t in self.hurdle_targets and tr != "log1p":
                raise ValueError(f"hurdle target {t!r} needs transform log1p (it has zeros), got {tr!r}")
        return (transforms, per_target(self.base_columns, n, "base_columns"), per_target(self.lower, n, "lower"),
                per_target(self.upper, n, "upper"))

    def _regressor(self, transform: str, base) -> XGBoostModel:
        return XGBoostModel(n_estimators=self.n_estimators, learning_rate=self.learning_rate, max_depth=self.max_depth,
                            subsample=self.subsample, colsample_bytree=self.colsample_bytree,
                            random_state=self.random_state, n_jobs=self.n_jobs, transform=transform,
                            base_columns=base)

    def fit(self, X: pd.DataFrame, y) -> "HurdleModel":
        X, _ = check_xy(X)
        transforms, bases, _, _ = self._spec()
        unknown = [t for t in self.hurdle_targets if t not in self.targets]
        if unknown:
            raise ValueError(f"hurdle targets {unknown} are not among the targets {self.targets}")
        Y = check_targets(y, len(X), len(self.targets), transforms)
        self.feature_names_ = list(X.columns)
        self.parts_: dict[str, dict] = {}
        for j, (t, tr, b) in enumerate(zip(self.targets, transforms, bases)):
            if t not in self.hurdle_targets:
                self.parts_[t] = {"amount": self._regressor(tr, b).fit(X, Y[:, j])}
                continue
            nonzero = Y[:, j] > 0
            part: dict = {"constant": None, "classifier": None, "amount": None}
            if nonzero.all() or not nonzero.any():  # one class: no classifier to learn
                part["constant"] = float(nonzero.all())
            else:
                part["classifier"] = xgb.XGBClassifier(
                    n_estimators=self.classifier_estimators, learning_rate=0.1, max_depth=4,
                    random_state=self.random_state, n_jobs=self.n_jobs, tree_method="hist").fit(
                    X[self.feature_names_].to_numpy(np.float32), nonzero.astype(int))
            if nonzero.any():
                part["amount"] = self._regressor("log", b).fit(X[nonzero], Y[nonzero, j])
            self.parts_[t] = part
        return self

    def _check(self, X: pd.DataFrame) -> pd.DataFrame:
        X, _ = check_xy(X)
        missing = [c for c in self.feature_names_ if c not in X.columns]
        if missing:
            raise ValueError(f"features missing: {', '.join(missing)}")
        return X

    def nonzero_probability(self, X: pd.DataFrame) -> pd.DataFrame:
        """P(y > 0) per hurdle target (columns), per row."""
        X = self._check(X)
        out = {}
        for t in self.hurdle_targets:
            part = self.parts_[t]
            if part["classifier"] is None:
                out[t] = np.full(len(X), part["constant"])
            else:
                out[t] = part["classifier"].predict_proba(X[self.feature_names_].to_numpy(np.float32))[:, 1]
        return pd.DataFrame(out, index=X.index)

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        X = self._check(X)
        _, _, lower, upper = self._spec()
        prob = self.nonzero_probability(X) if self.hurdle_targets else None
        cols = []
        for t, lo, hi in zip(self.targets, lower, upper):
            part = self.parts_[t]
            if t in self.hurdle_targets:
                amount = part["amount"].predict(X) if part["amount"] is not None else np.zeros(len(X))
                value = np.where(prob[t].to_numpy() >= self.threshold, amount, 0.0)
            else:
                value = part["amount"].predict(X)
            cols.append(np.clip(value, -np.inf if lo is None else lo, np.inf if hi is None else hi))
        return np.column_stack(cols)

    def _save_payload(self, path: Path) -> None:
        (path / "features.json").write_text(json.dumps(self.feature_names_))
        consts = {}
        for t, part in self.parts_.items():
            if part.get("amount") is not None:
                part["amount"].save(path / f"{t}_amount")
            if part.get("classifier") is not None:
                part["classifier"].save_model(path / f"{t}_nonzero.ubj")
            consts[t] = part.get("constant")
        (path / "hurdle.json").write_text(json.dumps(consts))

    def _load_payload(self, path: Path) -> None:
        self.feature_names_ = json.loads((path / "features.json").read_text())
        consts = json.loads((path / "hurdle.json").read_text())
        self.parts_ = {}
        for t in self.targets:
            part = {"constant": consts.get(t), "classifier": None, "amount": None}
            if (path / f"{t}_amount").exists():
                part["amount"] = XGBoostModel.load(path / f"{t}_amount")
            if (path / f"{t}_nonzero.ubj").exists():
                part["classifier"] = xgb.XGBClassifier()
                part["classifier"].load_model(path / f"{t}_nonzero.ubj")
            self.parts_[t] = part
