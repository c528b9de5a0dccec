"""The physics model's artifact: ``physics.json`` (floors, learner inputs, domain, widening, corrections, the physics
laws' version), the boosters / MLP weights, the kept training rows (``training_rows.parquet``) and a refit
calibration's model (``calibrated_<i>/``), beside ``model.json`` (``models.base.CostModel.save``).

An artifact fitted against other physics laws (``features.physics.PHYSICS_VERSION``) is refused with one line: its
efficiencies were learned against other times, so its predictions would move silently; refit it.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pandas as pd
import xgboost as xgb

from features.physics import PHYSICS_VERSION
from models.base import ArtifactError
from models.domain import Domain
from models.physics.learner import mlp

ROWS_Y = "_runtime_ms"  # the kept rows' target column in training_rows.parquet
STATE = "physics.json"


class PhysicsVersionError(ArtifactError):
    """A saved physics model fitted against other physics laws than this code's."""


def check_version(saved: int, path) -> None:
    """Raise :class:`PhysicsVersionError` (one line) unless an artifact's physics laws are this code's."""
    if saved != PHYSICS_VERSION:
        raise PhysicsVersionError(
            f"model {path} saved with physics laws v{saved}, this code has v{PHYSICS_VERSION}: refit it (make run)"
        )


class Artifact:
    """Save / load of :class:`models.physics.PhysicsModel` (a mixin: ``CostModel.save`` / ``load`` call these)."""

    def _save_payload(self, path: Path) -> None:
        state = {
            "physics_version": self.physics_version_,
            "floors": self.floors_,
            "gemm_l2_masked": self.gemm_l2_masked_,
            "inputs": list(self.inputs_),
            "domain": self.domain_.to_dict(),
            "widening": self.widening_,
            "corrections": [{k: v for k, v in c.items() if k not in ("booster", "model")} for c in self.corrections_],
        }
        for i, c in enumerate(self.corrections_):
            if c.get("booster") is not None:
                c["booster"].save_model(path / f"correction_{i}.ubj")
            if c.get("model") is not None:  # a refit calibration's model, saved as a model of its own
                c["model"].save(path / f"calibrated_{i}")
        self._save_learner(path, "efficiency", state)
        if self.cpu_learner_ is not None:
            state["cpu_learner"] = {}
            self.cpu_learner_._save_learner(path, "efficiency_cpu", state["cpu_learner"])
        if self.rows_ is not None:  # calibrate's refit reads them (zstd parquet: tens of bytes a row)
            frame = self.rows_["X"].assign(**{ROWS_Y: self.rows_["y"]})
            frame.to_parquet(path / "training_rows.parquet", compression="zstd", index=False)
        (path / STATE).write_text(json.dumps(state, indent=1))

    def _load_payload(self, path: Path) -> None:
        state = json.loads((path / STATE).read_text())
        check_version(int(state.get("physics_version", 0)), path)
        self.physics_version_ = PHYSICS_VERSION
        self.floors_ = state["floors"]
        self.gemm_l2_masked_ = state["gemm_l2_masked"]
        self.inputs_ = tuple(state["inputs"])
        self.domain_ = Domain.from_dict(state["domain"])
        self.widening_ = state["widening"]
        self.rows_ = None  # a model fitted with keep_rows=0: calibrate corrects, it cannot refit
        if (path / "training_rows.parquet").exists():
            frame = pd.read_parquet(path / "training_rows.parquet")
            self.rows_ = {"X": frame.drop(columns=[ROWS_Y]), "y": frame[ROWS_Y].to_numpy(float)}
        self.corrections_ = []
        for i, c in enumerate(state["corrections"]):
            file = path / f"correction_{i}.ubj"
            c["booster"] = xgb.Booster(model_file=str(file)) if file.exists() else None
            if (path / f"calibrated_{i}").exists():
                c["model"] = type(self).load(path / f"calibrated_{i}")
            self.corrections_.append(c)
        self._load_learner(path, "efficiency", state)
        self.cpu_learner_ = None  # fitted on one device class: one learner
        if "cpu_learner" in state:
            self.cpu_learner_ = copy.copy(self)
            self.cpu_learner_._load_learner(path, "efficiency_cpu", state["cpu_learner"])

    def _save_learner(self, path: Path, name: str, state: dict) -> None:
        """The efficiency learner into ``path / name.*``, its base margin (and MLP scaling) into ``state``."""
        state["base_margin"] = self.base_margin_
        if self.learner == "xgb":
            self.booster_.save_model(path / f"{name}.ubj")
        else:
            import torch

            torch.save(self.net_.state_dict(), path / f"{name}.pt")
            state["mean"], state["std"] = self.mean_.tolist(), self.std_.tolist()

    def _load_learner(self, path: Path, name: str, state: dict) -> None:
        self.base_margin_ = state["base_margin"]
        if self.learner == "xgb":
            self.booster_ = xgb.Booster(model_file=str(path / f"{name}.ubj"))
        else:
            import torch

            self.mean_, self.std_ = np.asarray(state["mean"], np.float32), np.asarray(state["std"], np.float32)
            self.net_ = mlp(len(self.inputs_), self.hidden, self.base_margin_)
            self.net_.load_state_dict(torch.load(path / f"{name}.pt"))
            self.net_.eval()
