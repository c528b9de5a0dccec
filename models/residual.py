"""Learned residual over the roofline: a tree ensemble corrects the analytical bound multiplicatively.

    r(x)          = log(runtime / roofline(x))          (what the base model is fitted on)
    prediction(x) = roofline(x) * exp(r_hat(x))

``roofline(x)`` is a feature column (default ``roofline_ms`` = max(FLOPs / peak[dtype], bytes / bandwidth),
``features.tabular.roofline_s``), so the learned part only has to model the achieved fraction of the
bound (launch overhead, tile and wave quantisation, cache effects), a dimensionless quantity that varies far
less across GPUs and shapes than the runtime itself: a learned residual on top of the roofline.

The base model is one of the project's tree models, used only through its public 1-D interface
(``fit(X, y)`` with positive ``y``; ``predict(X)``): it fits log(target), so it is given the positive ratio
``y / roofline`` and its prediction is that ratio. ``base`` is a plain dict of the base's hyper-parameters
plus ``kind`` (``rf`` or ``xgb``), so the model's own parameters stay JSON (``model.json``) and Hydra configs
nest it (``conf/model/xgb_residual.yaml``).

``features``: ``"all"`` (the base sees every feature column) or ``"transfer"`` (only
``features.tabular.transfer_columns``: shape and dimensionless hardware-relative columns, no absolute spec
numbers; ``conf/model/xgb_residual_transfer.yaml``, meant for predicting GPUs absent from training).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from features.tabular import transfer_columns
from models.base import CostModel, check_xy, load_model
from models.tree import RandomForestModel, XGBoostModel

BASES = {"rf": RandomForestModel, "xgb": XGBoostModel}


class ResidualModel(CostModel):
    name = "residual"

    def __init__(self, base: dict | None = None, column: str = "roofline_ms", features: str = "all"):
        self.base = dict(base) if base is not None else {"kind": "xgb"}
        self.column = column
        self.features = features

    def _inputs(self, X: pd.DataFrame) -> pd.DataFrame:
        if self.features == "all":
            return X
        if self.features == "transfer":
            return X[transfer_columns(X.columns)]
        raise ValueError(f"ResidualModel: unknown features {self.features!r} (all, transfer)")

    def _make_base(self) -> CostModel:
        params = dict(self.base)
        kind = params.pop("kind", "xgb")
        if kind not in BASES:
            raise ValueError(f"ResidualModel: unknown base kind {kind!r} (known: {', '.join(BASES)})")
        return BASES[kind](**params)

    def _reference(self, X: pd.DataFrame) -> np.ndarray:
        if self.column not in X.columns:
            raise ValueError(f"ResidualModel: feature column {self.column!r} missing (the analytical reference)")
        ref = X[self.column].to_numpy(float)
        if not np.all(np.isfinite(ref)) or np.any(ref <= 0):
            raise ValueError(f"ResidualModel: column {self.column!r} must be finite and > 0")
        return ref

    def fit(self, X: pd.DataFrame, y: np.ndarray) -> ResidualModel:
        X, y = check_xy(X, y)
        self.base_ = self._make_base().fit(self._inputs(X), y / self._reference(X))
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        X, _ = check_xy(X)
        return self._reference(X) * np.asarray(self.base_.predict(self._inputs(X)), dtype=np.float64)

    def _save_payload(self, path: Path) -> None:
        self.base_.save(path / "base")

    def _load_payload(self, path: Path) -> None:
        self.base_ = load_model(path / "base")
