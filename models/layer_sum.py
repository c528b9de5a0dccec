"""Whole-network costs as the sum of per-layer costs (baselines of ``pipelines.networks``).

``X`` is a list of :class:`features.layers.LayerSet` (``conf/encoder/layers.yaml``): per network, the positions of
its layers in one shared table of measured layers (their tabular features and runtimes).

* :class:`LayerSumModel`: a tabular tree model (``base``: ``kind`` rf | xgb + hyper-parameters, as
  ``models.residual``) fitted on the distinct layers of the *training* networks and their measured runtimes (not on
  the networks' runtimes ``y``); a network's prediction is the sum over its layers of the base's predictions;
* :class:`MeasuredLayerSum`: the sum of the measured layer runtimes. No model: it reads the layer measurements, so it
  shows how additive the runtime is, the floor of any layer-sum model (a reference, never a candidate to serve).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from models.base import CostModel, check_targets, load_model
from models.residual import BASES


def _check(X, y=None):
    from features.layers import LayerSet

    if not isinstance(X, (list, tuple)) or not all(isinstance(s, LayerSet) for s in X) or not X:
        raise TypeError("X must be a non-empty list of LayerSet (features.layers.LayerEncoder)")
    return X, (None if y is None else check_targets(y, len(X)))


def _sum(X, per_layer: np.ndarray) -> np.ndarray:
    return np.array([sum(per_layer[p] for p in s.positions) for s in X])


class LayerSumModel(CostModel):
    name = "layer_sum"

    def __init__(self, base: dict | None = None):
        self.base = dict(base) if base is not None else {"kind": "xgb"}

    def fit(self, X, y) -> LayerSumModel:
        X, _ = _check(X, y)
        table = X[0].table
        train = np.unique(np.concatenate([s.positions for s in X]))  # distinct layers, in table order
        params = dict(self.base)
        kind = params.pop("kind", "xgb")
        if kind not in BASES:
            raise ValueError(f"LayerSumModel: unknown base kind {kind!r} (known: {', '.join(BASES)})")
        self.base_ = BASES[kind](**params).fit(
            table.features.iloc[train].reset_index(drop=True), table.runtime_ms[train]
        )
        return self

    def predict(self, X) -> np.ndarray:
        X, _ = _check(X)
        return _sum(X, np.asarray(self.base_.predict(X[0].table.features), float))

    def _save_payload(self, path: Path) -> None:
        self.base_.save(path / "base")

    def _load_payload(self, path: Path) -> None:
        self.base_ = load_model(path / "base")


class MeasuredLayerSum(CostModel):
    name = "measured_layer_sum"

    def fit(self, X, y) -> MeasuredLayerSum:
        _check(X, y)
        return self

    def predict(self, X) -> np.ndarray:
        X, _ = _check(X)
        return _sum(X, X[0].table.runtime_ms)
