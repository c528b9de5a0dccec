"""Power and energy surrogates: predict runtime and power, DERIVE energy.

Two quantities are predicted, each in log space, and the third is derived from the same prediction:

    runtime_ms (predicted),   power_w (predicted, average board power while the kernel runs back to back),
    energy_j   = power_w * runtime_ms / 1000                        (derived, per call: exact by construction)

A network (a list of layers run one after another) costs

    runtime = sum of layer runtimes,   energy = sum of layer energies,   power = energy / runtime

i.e. the runtime-weighted mean of the layer powers, never their sum (:func:`network_totals`).

Models (all read the columns of ``features.tabular.PowerFeaturizer``):

* :class:`AnalyticalModel`: no learning; the spec-driven ``sim-roofline`` formulas (idle power +
  utilisation-driven dynamic power capped at TDP; tile/wave-quantised roofline runtime), read from the
  ``analytical_power_w`` / ``analytical_runtime_ms`` feature columns.
* ``xgb``: XGBoost on the tabular features (log target). Runtime: :class:`models.tree.XGBoostModel` on
  ``log(runtime_ms)``. Power: on ``log(power_w / tdp_w)`` (``XGBoostModel(base_columns="hw_tdp_w")``, a
  residual over the spec's board limit), prediction = TDP x exp(.): with one measured GPU every spec column is constant in training, so
  trees on absolute watts would give a 72 W L4 the H200's 600 W; a fraction of the board limit transfers.
* ``residual``: XGBoost on ``log(actual / analytical)`` (``XGBoostModel(base_columns=<analytical column>)``);
  prediction = analytical x exp(.).

:class:`PowerSurrogate` pairs one runtime model with one power model (per-target), or holds ONE multi-target model
that predicts both (``joint``: :func:`make_joint_model`, ``models.tree`` with ``targets=[runtime_ms, power_w]``
and the same per-target base columns as the per-target kinds: log(runtime), log(power / TDP) for ``xgb``,
log(y / analytical y) for ``residual``); either way it bounds the predicted power to
``[idle_power_w, power_cap * tdp_w]`` of the row's spec (``power_cap`` = 1.12: the highest average in the
H200 file, 778 W, over its 700 W limit, seen under throttling). Board power management holds the average
near the limit, so a multiplicative correction learned on one GPU must not carry another GPU past it; the
number of predictions the bound changed is in ``PowerSurrogate.last_bounded``. Hardware enters the learned
models only through spec columns (no hardware id), so a GPU with a spec sheet and no measured rows
gets predictions from its specs alone.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from models.base import CostModel, load_model
from models.roofline import RooflineModel
from models.tree import XGBoostModel

TARGETS = ("runtime_ms", "power_w")  # predicted; energy_j is derived
DERIVED = "energy_j"
ANALYTICAL_COLUMN = {"runtime_ms": "analytical_runtime_ms", "power_w": "analytical_power_w"}


class AnalyticalModel(RooflineModel):
    """The analytical (spec-driven) baseline: returns a feature column computed from spec sheets."""
    name = "analytical"


def make_model(kind: str, target: str, **params) -> CostModel:
    """``analytical`` | ``xgb`` | ``residual`` for ``target`` (runtime_ms or power_w)."""
    if kind == "analytical":
        return AnalyticalModel(column=ANALYTICAL_COLUMN[target])
    if kind == "xgb":
        return XGBoostModel(base_columns="hw_tdp_w", **params) if target == "power_w" else XGBoostModel(**params)
    if kind == "residual":
        return XGBoostModel(base_columns=ANALYTICAL_COLUMN[target], **params)
    raise ValueError(f"unknown power model kind {kind!r} (analytical, xgb, residual)")


JOINT_BASES = {"xgb": (None, "hw_tdp_w"), "residual": (ANALYTICAL_COLUMN["runtime_ms"], ANALYTICAL_COLUMN["power_w"]),
               "hybrid": (ANALYTICAL_COLUMN["runtime_ms"], "hw_tdp_w")}  # kind -> (runtime base, power base)


def make_joint_model(kind: str, **params) -> CostModel:
    """ONE XGBoost model for runtime_ms and power_w (native multi-output), with ``kind``'s per-target base columns."""
    if kind not in JOINT_BASES:
        raise ValueError(f"no joint model for power model kind {kind!r} ({', '.join(JOINT_BASES)})")
    return XGBoostModel(targets=list(TARGETS), base_columns=list(JOINT_BASES[kind]), **params)


class PowerSurrogate:
    """Runtime + power models (or one ``joint`` model of both); ``predict`` returns runtime_ms, power_w, energy_j."""

    def __init__(self, name: str, runtime_model: CostModel | None = None, power_model: CostModel | None = None,
                 power_cap: float = 1.12, joint: CostModel | None = None):
        if (joint is None) == (runtime_model is None or power_model is None):
            raise ValueError("PowerSurrogate needs either runtime_model and power_model, or one joint model")
        self.name = name
        self.models = {"joint": joint} if joint is not None else {"runtime_ms": runtime_model, "power_w": power_model}
        self.power_cap = float(power_cap)
        self.last_bounded = 0

    @property
    def joint(self) -> bool:
        return "joint" in self.models

    def fit(self, X: pd.DataFrame, rows: pd.DataFrame) -> "PowerSurrogate":
        if self.joint:
            self.models["joint"].fit(X, rows[list(TARGETS)].to_numpy(float))
        else:
            for target, model in self.models.items():
                model.fit(X, rows[target].to_numpy(float))
        return self

    def predict(self, X: pd.DataFrame) -> pd.DataFrame:
        if self.joint:
            both = np.asarray(self.models["joint"].predict(X), float)
            runtime, raw = both[:, 0], both[:, 1]
        else:
            runtime = np.asarray(self.models["runtime_ms"].predict(X), float)
            raw = np.asarray(self.models["power_w"].predict(X), float)
        power = np.clip(raw, X["hw_idle_power_w"].to_numpy(float), self.power_cap * X["hw_tdp_w"].to_numpy(float))
        self.last_bounded = int(np.sum(power != raw))
        return pd.DataFrame({"runtime_ms": runtime, "power_w": power, DERIVED: derive_energy_j(power, runtime)})

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        for key, model in self.models.items():
            model.save(path / key)
        (path / "surrogate.json").write_text(json.dumps({"name": self.name, "targets": list(TARGETS), "power_cap": self.power_cap,
                                                         "joint": self.joint,
                                                         "derived": {DERIVED: "power_w * runtime_ms / 1000"}}))
        return path

    @classmethod
    def load(cls, path: str | Path) -> "PowerSurrogate":
        path = Path(path)
        meta = json.loads((path / "surrogate.json").read_text())
        if meta.get("joint"):
            return cls(meta["name"], power_cap=meta["power_cap"], joint=load_model(path / "joint"))
        return cls(meta["name"], load_model(path / "runtime_ms"), load_model(path / "power_w"), meta["power_cap"])


def derive_energy_j(power_w, runtime_ms):
    """Energy per call (J) = average power (W) x runtime (s)."""
    return np.asarray(power_w, float) * np.asarray(runtime_ms, float) / 1e3


def network_totals(runtime_ms, energy_j) -> dict[str, float]:
    """A network's runtime (sum), energy (sum) and power = energy / runtime (never a sum of powers)."""
    t, e = float(np.sum(runtime_ms)), float(np.sum(energy_j))
    return {"runtime_ms": t, "energy_j": e, "power_w": e / (t / 1e3)}
