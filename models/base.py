"""The one model interface every surrogate implements (scikit-learn / TVM cost-model style).

* ``__init__`` stores hyper-parameters verbatim and does nothing else;
* ``fit(X, y)`` learns from a tabular feature frame ``X`` and positive targets ``y`` and returns self;
* ``predict(X)`` returns positive predictions in the target's own unit, without side effects;
* ``save(dir)`` / ``load(dir)`` round-trip the fitted model through a directory holding ``model.json``
  (class, hyper-parameters, target) plus whatever payload the model needs.

Optional capabilities are protocols (:class:`Calibratable`, :class:`HasDomain`, :class:`HasIntervals`): a caller asks
``isinstance(model, Calibratable)`` rather than probing attribute names, and ``tests/test_conformance.py`` checks that
every model of ``conf/model/`` honours the ones it declares.

Runtimes span orders of magnitude, so learned models fit ``log(y)`` and predict ``exp(.)``.
"""

from __future__ import annotations

import importlib
import inspect
import json
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
import pandas as pd

META = "model.json"


class CostModel(ABC):
    name: str = "base"

    def get_params(self) -> dict:
        """The hyper-parameters: the named parameters of ``__init__`` (none for a model without one)."""
        sig = inspect.signature(type(self).__init__)
        named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        return {p: getattr(self, p) for p, v in sig.parameters.items() if p != "self" and v.kind in named}

    @abstractmethod
    def fit(self, X: pd.DataFrame, y: np.ndarray) -> CostModel: ...

    @abstractmethod
    def predict(self, X: pd.DataFrame) -> np.ndarray: ...

    def _save_payload(self, path: Path) -> None:  # models with learned state override these two
        pass

    def _load_payload(self, path: Path) -> None:
        pass

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        meta = {"class": f"{type(self).__module__}.{type(self).__qualname__}", "params": self.get_params()}
        (path / META).write_text(json.dumps(meta, indent=1, default=str))
        self._save_payload(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> CostModel:
        path = Path(path)
        meta = json.loads((path / META).read_text())
        model = cls(**meta["params"])
        model._load_payload(path)
        return model


@runtime_checkable
class Calibratable(Protocol):
    """A model that learns a new hardware from a few of its measured rows: ``calibrate`` returns a new fitted model
    (``self`` unchanged) that also predicts that hardware; ``method`` names how (the model's own choices)."""

    def calibrate(self, X_new: pd.DataFrame, y_new, hardware: str | None = None, method: str = "auto") -> CostModel: ...


PREDICT_DOMAIN_COLUMNS = ("in_domain", "domain_distance", "domain_reason", "hardware_seen")


@runtime_checkable
class HasDomain(Protocol):
    """A model that says where each prediction stands: ``predict_domain(X)`` is a frame with one row per row of ``X``
    and at least the columns :data:`PREDICT_DOMAIN_COLUMNS` (``models.domain``), beside its prediction and interval."""

    def predict_domain(self, X: pd.DataFrame) -> pd.DataFrame: ...


@runtime_checkable
class HasIntervals(Protocol):
    """A model that gives its own prediction interval: ``predict_interval(X)`` is ``(pred, lo, hi)``, arrays of one
    value per row with ``lo <= pred <= hi``; served and scored instead of the split-conformal half-widths of
    ``models.conformal.fit_calibrated`` (which give an interval to any model)."""

    def predict_interval(self, X: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...


class ArtifactError(ValueError):
    """A saved model this code cannot load (e.g. fitted against other physics laws); the message is one line that says
    what to do."""


def load_model(path: str | Path) -> CostModel:
    """Load any saved :class:`CostModel`, dispatching on the class recorded in ``model.json``."""
    meta = json.loads((Path(path) / META).read_text())
    module, _, qualname = meta["class"].rpartition(".")
    cls = getattr(importlib.import_module(module), qualname)
    if not (isinstance(cls, type) and issubclass(cls, CostModel)):
        raise TypeError(f"{meta['class']} is not a CostModel")
    return cls.load(path)


TRANSFORMS = ("log", "log1p")


def check_targets(y, n: int, n_targets: int | None = None, transforms=None) -> np.ndarray:
    """Targets as a float array of ``n`` finite values: shape ``(n,)``, or ``(n, n_targets)`` for multi-target models.

    A ``log`` target (the default; every model fits log(y)) must be > 0; a ``log1p`` target (zero-heavy counts such
    as FPGA DSP / BRAM) must be >= 0. ``transforms`` is one name per target column (a scalar name applies to all).
    """
    y = np.asarray(y, dtype=float)
    want = (n,) if n_targets is None else (n, n_targets)
    if y.shape != want:
        raise ValueError(f"y has shape {y.shape}, expected {want}")
    if not np.all(np.isfinite(y)):
        raise ValueError("targets must be finite")
    cols = y.reshape(len(y), -1)
    names = (
        [transforms or "log"] * cols.shape[1] if transforms is None or isinstance(transforms, str) else list(transforms)
    )
    for j, t in enumerate(names):
        if t not in TRANSFORMS:
            raise ValueError(f"unknown target transform {t!r} (log, log1p)")
        if t == "log" and np.any(cols[:, j] <= 0):
            raise ValueError("targets must be finite and > 0 (they are fitted in log space)")
        if t == "log1p" and np.any(cols[:, j] < 0):
            raise ValueError("log1p targets must be finite and >= 0")
    return y


def check_xy(X: pd.DataFrame, y: np.ndarray | None = None) -> tuple[pd.DataFrame, np.ndarray | None]:
    if not isinstance(X, pd.DataFrame):
        raise TypeError(f"X must be a feature DataFrame, got {type(X).__name__}")
    return X, (None if y is None else check_targets(y, len(X)))
