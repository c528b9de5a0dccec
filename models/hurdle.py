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

Some targets follow a different cost law in different design regimes: a fully parallel hls4ml layer pays LUTs and
FFs per weight, a stored-weight one per output and per input (``features.fpga``). For those, ``regime_models``
names a :class:`RegimeModel` per target: one tree model per value of ``regime_column``, each on its own features
and over its own base, plus an optional linear term in an offset column (y = alpha x d_in + d_out x exp(f)).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import xgboost as xgb

from models.base import CostModel, check_targets, check_xy, load_model
from models.tree import XGBoostModel, per_target


def _key(value) -> str:
    """A regime's name: the regime column's value as text, ``1.0`` -> ``"1"`` (keys of JSON-saved settings)."""
    v = float(value)
    return str(int(v)) if v.is_integer() else str(v)


def _xgboost(owner, **options) -> XGBoostModel:
    """An XGBoostModel with ``owner``'s tree hyper-parameters (both models here take the same ones) and ``options``."""
    return XGBoostModel(
        n_estimators=owner.n_estimators,
        learning_rate=owner.learning_rate,
        max_depth=owner.max_depth,
        subsample=owner.subsample,
        colsample_bytree=owner.colsample_bytree,
        random_state=owner.random_state,
        n_jobs=owner.n_jobs,
        **options,
    )


class RegimeModel(CostModel):
    """One log-target XGBoost per regime (value of ``regime_column``), each on its own ``features`` over its own
    base column, plus an optional linear term in an offset column:

        y = alpha_r x offset_r + base_r x exp(f_r(X[features_r]))

    ``features``, ``base_columns``, ``offset_columns``: dicts keyed by the regime's value as text (``"0"``,
    ``"1"``; a missing key: every feature / no base / no offset). ``alpha_r`` is the within-group least-squares
    slope of y in the offset column, a group being the training rows with equal values of every feature of the
    regime: rows the trees cannot tell apart differ only through the offset, so the slope is identified without
    the trees absorbing it. It is kept >= 0 (a resource does not shrink as the layer grows), and 0 where no group
    holds two offset values. A regime never seen in training cannot be predicted (ValueError).
    """

    name = "regime"

    def __init__(
        self,
        regime_column: str,
        features: dict | None = None,
        base_columns: dict | None = None,
        offset_columns: dict | None = None,
        n_estimators: int = 800,
        learning_rate: float = 0.05,
        max_depth: int = 3,
        subsample: float = 0.8,
        colsample_bytree: float = 0.8,
        random_state: int = 0,
        n_jobs: int = 1,
    ):
        self.regime_column = regime_column
        self.features = features
        self.base_columns = base_columns
        self.offset_columns = offset_columns
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.max_depth = max_depth
        self.subsample = subsample
        self.colsample_bytree = colsample_bytree
        self.random_state = random_state
        self.n_jobs = n_jobs

    def _setting(self, which: dict | None, regime: str):
        return {_key(k) if not isinstance(k, str) else k: v for k, v in (which or {}).items()}.get(regime)

    def _columns(self, X: pd.DataFrame, regime: str) -> list[str]:
        cols = self._setting(self.features, regime) or [c for c in X.columns if c != self.regime_column]
        base = self._setting(self.base_columns, regime)
        missing = [
            c
            for c in [*cols, base, self._setting(self.offset_columns, regime), self.regime_column]
            if c is not None and c not in X.columns
        ]
        if missing:
            raise ValueError(f"features missing: {', '.join(missing)}")
        return list(dict.fromkeys([*cols, *([base] if base else [])]))

    def _regimes(self, X: pd.DataFrame) -> np.ndarray:
        if self.regime_column not in X.columns:
            raise ValueError(f"features missing: {self.regime_column}")
        return np.array([_key(v) for v in X[self.regime_column].to_numpy(float)])

    @staticmethod
    def _slope(X: pd.DataFrame, y: np.ndarray, offset: np.ndarray, group_columns: list[str]) -> float:
        groups = (
            X.groupby(group_columns, dropna=False, sort=False).ngroup().to_numpy()
            if group_columns
            else np.zeros(len(X), int)
        )
        o_dev = offset - pd.Series(offset).groupby(groups).transform("mean").to_numpy()
        y_dev = y - pd.Series(y).groupby(groups).transform("mean").to_numpy()
        denom = float(np.sum(o_dev * o_dev))
        return max(float(np.sum(o_dev * y_dev)) / denom, 0.0) if denom > 0 else 0.0

    def fit(self, X: pd.DataFrame, y) -> RegimeModel:
        X, y = check_xy(X, y)
        regimes = self._regimes(X)
        self.parts_: dict[str, dict] = {}
        for r in sorted(set(regimes)):
            rows = regimes == r
            cols, base = self._columns(X, r), self._setting(self.base_columns, r)
            offset_col = self._setting(self.offset_columns, r)
            Xr, yr = X.loc[rows], y[rows]
            alpha = 0.0
            if offset_col is not None:
                group_columns = [c for c in cols if c not in (base, offset_col)]
                alpha = self._slope(Xr, yr, Xr[offset_col].to_numpy(float), group_columns)
                yr = np.maximum(yr - alpha * Xr[offset_col].to_numpy(float), 0.05 * yr)  # the remainder stays > 0
            model = _xgboost(self, base_columns=base)
            self.parts_[r] = {"model": model.fit(Xr[cols], yr), "alpha": alpha, "offset": offset_col, "columns": cols}
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        X, _ = check_xy(X)
        regimes = self._regimes(X)
        unseen = sorted(set(regimes) - set(self.parts_))
        if unseen:
            raise ValueError(f"{self.regime_column} = {', '.join(unseen)}: a regime never seen in training")
        out = np.zeros(len(X))
        for r, part in self.parts_.items():
            rows = regimes == r
            if rows.any():
                Xr = X.loc[rows]
                out[rows] = part["model"].predict(Xr[part["columns"]]) + (
                    part["alpha"] * Xr[part["offset"]].to_numpy(float) if part["offset"] else 0.0
                )
        return out

    def _save_payload(self, path: Path) -> None:
        meta = {}
        for r, part in self.parts_.items():
            part["model"].save(path / f"regime_{r}")
            meta[r] = {k: part[k] for k in ("alpha", "offset", "columns")}
        (path / "regimes.json").write_text(json.dumps(meta))

    def _load_payload(self, path: Path) -> None:
        meta = json.loads((path / "regimes.json").read_text())
        self.parts_ = {r: {**m, "model": XGBoostModel.load(path / f"regime_{r}")} for r, m in meta.items()}


class HurdleModel(CostModel):
    name = "hurdle"

    def __init__(
        self,
        targets: list[str],
        hurdle_targets=("dsp", "bram_18k"),
        transform="log1p",
        base_columns=None,
        lower=None,
        upper=None,
        n_estimators: int = 400,
        learning_rate: float = 0.05,
        max_depth: int = 6,
        subsample: float = 0.8,
        colsample_bytree: float = 0.8,
        classifier_estimators: int = 200,
        threshold: float = 0.5,
        random_state: int = 0,
        n_jobs: int = 1,
        regime_column: str | None = None,
        regime_models: dict | None = None,
    ):
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
        self.regime_column = regime_column
        self.regime_models = regime_models

    def _spec(self):
        n = len(self.targets)
        transforms = per_target(self.transform, n, "transform")
        for t, tr in zip(self.targets, transforms):
            if t in self.hurdle_targets and tr != "log1p":
                raise ValueError(f"hurdle target {t!r} needs transform log1p (it has zeros), got {tr!r}")
        return (
            transforms,
            per_target(self.base_columns, n, "base_columns"),
            per_target(self.lower, n, "lower"),
            per_target(self.upper, n, "upper"),
        )

    def _regressor(self, transform: str, base) -> XGBoostModel:
        return _xgboost(self, transform=transform, base_columns=base)

    def fit(self, X: pd.DataFrame, y) -> HurdleModel:
        X, _ = check_xy(X)
        transforms, bases, _, _ = self._spec()
        unknown = [t for t in self.hurdle_targets if t not in self.targets]
        if unknown:
            raise ValueError(f"hurdle targets {unknown} are not among the targets {self.targets}")
        Y = check_targets(y, len(X), len(self.targets), transforms)
        self.feature_names_ = list(X.columns)
        self.parts_: dict[str, dict] = {}
        regime = dict(self.regime_models or {})
        wrong = [t for t in regime if t not in self.targets or t in self.hurdle_targets]
        if wrong or (regime and not self.regime_column):
            raise ValueError(
                f"regime_models {wrong or list(regime)}: need regime_column and non-hurdle targets among {self.targets}"
            )
        for j, (t, tr, b) in enumerate(zip(self.targets, transforms, bases)):
            if t in regime:
                if tr != "log" or b is not None:
                    raise ValueError(
                        f"regime target {t!r} takes its bases from regime_models (transform log, "
                        f"base_columns null), got {tr!r} / {b!r}"
                    )
                model = RegimeModel(
                    self.regime_column,
                    **regime[t],
                    n_estimators=self.n_estimators,
                    learning_rate=self.learning_rate,
                    max_depth=self.max_depth,
                    subsample=self.subsample,
                    colsample_bytree=self.colsample_bytree,
                    random_state=self.random_state,
                    n_jobs=self.n_jobs,
                )
                self.parts_[t] = {"amount": model.fit(X, Y[:, j])}
                continue
            if t not in self.hurdle_targets:
                self.parts_[t] = {"amount": self._regressor(tr, b).fit(X, Y[:, j])}
                continue
            nonzero = Y[:, j] > 0
            part: dict = {"constant": None, "classifier": None, "amount": None}
            if nonzero.all() or not nonzero.any():  # one class: no classifier to learn
                part["constant"] = float(nonzero.all())
            else:
                part["classifier"] = xgb.XGBClassifier(
                    n_estimators=self.classifier_estimators,
                    learning_rate=0.1,
                    max_depth=4,
                    random_state=self.random_state,
                    n_jobs=self.n_jobs,
                    tree_method="hist",
                ).fit(X[self.feature_names_].to_numpy(np.float32), nonzero.astype(int))
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
                part["amount"] = load_model(path / f"{t}_amount")
            if (path / f"{t}_nonzero.ubj").exists():
                part["classifier"] = xgb.XGBClassifier()
                part["classifier"].load_model(path / f"{t}_nonzero.ubj")
            self.parts_[t] = part
