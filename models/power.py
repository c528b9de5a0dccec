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
  residual over the spec's board limit), prediction = TDP x exp(.): with one measured GPU every spec column is constant
  in training, so
  trees on absolute watts would give a 72 W L4 the H200's 600 W; a fraction of the board limit transfers.
* ``residual``: XGBoost on ``log(actual / analytical)`` (``XGBoostModel(base_columns=<analytical column>)``);
  prediction = analytical x exp(.);
* ``hybrid``: the residual runtime model with the xgb power model.

:class:`PowerSurrogate` (a :class:`~models.base.CostModel`; ``conf/model/power_<kind>.yaml``) pairs one runtime model
with one power model (per-target), or holds ONE multi-target model
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


JOINT_BASES = {
    "xgb": (None, "hw_tdp_w"),
    "residual": (ANALYTICAL_COLUMN["runtime_ms"], ANALYTICAL_COLUMN["power_w"]),
    "hybrid": (ANALYTICAL_COLUMN["runtime_ms"], "hw_tdp_w"),
}  # kind -> (runtime base, power base)


def make_joint_model(kind: str, **params) -> CostModel:
    """ONE XGBoost model for runtime_ms and power_w (native multi-output), with ``kind``'s per-target base columns."""
    if kind not in JOINT_BASES:
        raise ValueError(f"no joint model for power model kind {kind!r} ({', '.join(JOINT_BASES)})")
    return XGBoostModel(targets=list(TARGETS), base_columns=list(JOINT_BASES[kind]), **params)


HYBRID = {"hybrid": ("residual", "xgb")}  # kind -> (runtime model kind, power model kind)


class PowerSurrogate(CostModel):
    """Runtime + power models (or one ``joint`` model of both) of one ``kind``; predicts runtime_ms, power_w and
    the derived energy_j.

    ``kind``: ``analytical`` | ``xgb`` | ``residual`` | ``hybrid`` (= residual runtime + xgb power); ``xgb``: the
    hyper-parameters of the learned models (``XGBoostModel``); ``multi_target``: ONE multi-target model of both
    targets per learned kind (:func:`make_joint_model`) instead of one per target; ``power_cap``: predicted power
    is bounded to ``[idle_power_w, power_cap * tdp_w]`` of the row's spec.

    ``fit(X, y)``: ``y`` is ``[n, 2]`` (runtime_ms, power_w) or ``[n, 3]`` with energy_j third, which is not fitted
    (it is derived). ``predict(X)``: a frame of runtime_ms, power_w, energy_j (``np.asarray`` gives ``[n, 3]``).
    """

    name = "power"
    targets = ("runtime_ms", "power_w", DERIVED)

    def __init__(self, kind: str = "xgb", xgb: dict | None = None, multi_target: bool = True, power_cap: float = 1.12):
        self.kind = kind
        self.xgb = xgb
        self.multi_target = multi_target
        self.power_cap = power_cap

    @property
    def joint(self) -> bool:
        return "joint" in self.models

    def _build(self) -> dict[str, CostModel]:
        rt_kind, pw_kind = HYBRID.get(self.kind, (self.kind, self.kind))
        xgb = dict(self.xgb or {})
        if self.multi_target and self.kind != "analytical":
            return {"joint": make_joint_model(self.kind, **xgb)}
        return {
            "runtime_ms": make_model(rt_kind, "runtime_ms", **({} if rt_kind == "analytical" else xgb)),
            "power_w": make_model(pw_kind, "power_w", **({} if pw_kind == "analytical" else xgb)),
        }

    def fit(self, X: pd.DataFrame, y) -> PowerSurrogate:
        if self.kind not in ("analytical", "xgb", "residual", *HYBRID):
            raise ValueError(f"unknown power model kind {self.kind!r} (analytical, xgb, residual, hybrid)")
        y = np.asarray(y.to_numpy() if isinstance(y, pd.DataFrame) else y, float)
        if y.ndim != 2 or y.shape[1] not in (2, 3):
            raise ValueError(
                f"PowerSurrogate.fit: y has shape {y.shape}; expected [n, 2] (runtime_ms, power_w) "
                "or [n, 3] (+ energy_j, derived)"
            )
        self.models = self._build()
        if self.joint:
            self.models["joint"].fit(X, y[:, :2])
        else:
            self.models["runtime_ms"].fit(X, y[:, 0])
            self.models["power_w"].fit(X, y[:, 1])
        return self

    def predict(self, X: pd.DataFrame) -> pd.DataFrame:
        return self._predict(X)[0]

    def _predict(self, X: pd.DataFrame) -> tuple[pd.DataFrame, int]:
        """The predictions and how many of their powers the [idle, power_cap x TDP] bound changed."""
        if not hasattr(self, "models"):
            raise RuntimeError("PowerSurrogate is not fitted")
        if self.joint:
            both = np.asarray(self.models["joint"].predict(X), float)
            runtime, raw = both[:, 0], both[:, 1]
        else:
            runtime = np.asarray(self.models["runtime_ms"].predict(X), float)
            raw = np.asarray(self.models["power_w"].predict(X), float)
        power = np.clip(raw, X["hw_idle_power_w"].to_numpy(float), self.power_cap * X["hw_tdp_w"].to_numpy(float))
        frame = pd.DataFrame({"runtime_ms": runtime, "power_w": power, DERIVED: derive_energy_j(power, runtime)})
        return frame, int(np.sum(power != raw))

    def _save_payload(self, path: Path) -> None:
        for key, model in self.models.items():
            model.save(path / key)
        (path / "surrogate.json").write_text(
            json.dumps({"members": list(self.models), "derived": {DERIVED: "power_w * runtime_ms / 1000"}})
        )

    def _load_payload(self, path: Path) -> None:
        members = json.loads((path / "surrogate.json").read_text())["members"]
        self.models = {key: load_model(path / key) for key in members}

    @classmethod
    def load_legacy(cls, path: str | Path) -> PowerSurrogate:
        """A surrogate saved before it was a CostModel (``surrogate.json`` with name, power_cap, joint)."""
        path = Path(path)
        meta = json.loads((path / "surrogate.json").read_text())
        model = cls(meta["name"], multi_target=bool(meta.get("joint")), power_cap=meta["power_cap"])
        model.models = {k: load_model(path / k) for k in (["joint"] if meta.get("joint") else TARGETS)}
        return model


def derive_energy_j(power_w, runtime_ms):
    """Energy per call (J) = average power (W) x runtime (s)."""
    return np.asarray(power_w, float) * np.asarray(runtime_ms, float) / 1e3


def network_totals(runtime_ms, energy_j) -> dict[str, float]:
    """A network's runtime (sum), energy (sum) and power = energy / runtime (never a sum of powers)."""
    t, e = float(np.sum(runtime_ms)), float(np.sum(energy_j))
    return {"runtime_ms": t, "energy_j": e, "power_w": e / (t / 1e3)}


def spec_only(model: PowerSurrogate, registry, hardware: list[str], q: dict[str, float]) -> pd.DataFrame:
    """Predictions on GPUs with a spec sheet and no measured rows (from specs alone), with the global log-space
    half-widths ``q[column]``. No labels exist for them: a demonstration that the specs move the predictions."""
    from features.tabular import PowerFeaturizer

    shapes = [
        dict(op="matmul", m=4096, n=4096, k=4096, dtype="float16"),
        dict(op="matmul", m=1024, n=1024, k=1024, dtype="float32"),
        dict(op="add", m=8192, n=8192, dtype="float16"),
        dict(op="layernorm", m=4096, n=4096, dtype="bfloat16"),
    ]
    frame = pd.DataFrame([{**s, "hardware": h} for h in hardware for s in shapes])
    pred, bounded = model._predict(PowerFeaturizer(registry).transform(frame))
    pred["bounded"] = bounded  # predictions the [idle, cap x TDP] bound changed (whole table)
    for t in (*TARGETS, DERIVED):
        pred[f"{t}_lo"], pred[f"{t}_hi"] = pred[t] * np.exp(-q[t]), pred[t] * np.exp(q[t])
    specs = [registry.get(h) for h in frame["hardware"]]
    return pd.concat(
        [frame[["hardware", "op", "dtype"]].assign(shape=[_shape(s) for s in shapes] * len(hardware)), pred], axis=1
    ).assign(idle_w=[s.idle_power_w for s in specs], tdp_w=[s.tdp_w for s in specs])


def _shape(s: dict) -> str:
    return "x".join(str(s[k]) for k in ("m", "n", "k") if k in s)
