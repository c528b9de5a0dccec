"""``PhysicsModel``: the launch floor plus the physics time over a learned, bounded efficiency, with per-GPU
corrections, a domain of validity and intervals (the package docstring, ``models/physics/__init__.py``)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from features.physics import FEATURES, HARDWARE, HARDWARE_IDENTITY, PHYSICS_VERSION, SIZE
from models.base import CostModel, check_targets
from models.domain import Domain
from models.physics.corrections import HardwareCorrections
from models.physics.floors import estimate_floors, floor_ms
from models.physics.frame import physics_frame
from models.physics.intervals import DomainIntervals
from models.physics.io import Artifact
from models.physics.learner import LEARNERS, EfficiencyLearner


class PhysicsModel(EfficiencyLearner, HardwareCorrections, DomainIntervals, Artifact, CostModel):
    """``runtime_ms = floor + physics_ms / efficiency(x)``, then a GPU's correction.

    Parameters: the learner (``learner``: ``xgb`` or ``mlp``, with its hyper-parameters), the efficiency bounds
    (``e_max``, ``e_max_gemm``), the interval (``level``, ``interval_*``), and switches for the parts: launch floors
    per timing harness (``harness_floors``), a CPU learner of its own (``device_learners``), per-GPU corrections and
    borrowing (``hardware_corrections``, ``borrow_corrections``), bytes over L2 on GEMM rows
    (``gemm_bytes_over_l2``), the per-group weight cap (``group_rows``) and the training rows kept for calibrate's
    refit (``keep_rows``). Accepts a physics frame (``features.physics.PhysicsFeaturizer``) or workload descriptions.
    """

    name = "physics"

    def __init__(
        self,
        learner: str = "xgb",
        e_max: float = 4.0,
        e_max_gemm: float = 1.25,
        n_estimators: int = 300,
        learning_rate: float = 0.05,
        max_depth: int = 6,
        subsample: float = 0.8,
        colsample_bytree: float = 0.8,
        min_child_weight: float = 5.0,
        monotone: bool = True,
        hidden: int = 64,
        epochs: int = 30,
        batch_size: int = 2048,
        mlp_learning_rate: float = 3e-3,
        level: float = 0.9,
        interval_folds: bool = True,
        interval_max_rows: int = 40000,
        interval_hardware_folds: int = 8,
        harness_floors: bool = True,
        device_learners: bool = True,
        hardware_corrections: bool = True,
        borrow_corrections: bool = True,
        keep_rows: int = 50000,
        gemm_bytes_over_l2: bool = False,
        group_rows: int = 1500,
        random_state: int = 0,
        n_jobs: int = 1,
    ):
        self.learner = learner
        self.e_max = e_max
        self.e_max_gemm = e_max_gemm
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.max_depth = max_depth
        self.subsample = subsample
        self.colsample_bytree = colsample_bytree
        self.min_child_weight = min_child_weight
        self.monotone = monotone
        self.hidden = hidden
        self.epochs = epochs
        self.batch_size = batch_size
        self.mlp_learning_rate = mlp_learning_rate
        self.level = level
        self.interval_folds = interval_folds
        self.interval_max_rows = interval_max_rows
        self.interval_hardware_folds = interval_hardware_folds
        self.harness_floors = harness_floors
        self.device_learners = device_learners
        self.hardware_corrections = hardware_corrections
        self.borrow_corrections = borrow_corrections
        self.keep_rows = keep_rows
        self.gemm_bytes_over_l2 = gemm_bytes_over_l2
        self.group_rows = group_rows
        self.random_state = random_state
        self.n_jobs = n_jobs

    def fit(self, X: pd.DataFrame, y) -> PhysicsModel:
        if self.learner not in LEARNERS:
            raise ValueError(f"PhysicsModel: unknown learner {self.learner!r} ({', '.join(LEARNERS)})")
        if not (self.e_max > 0 and self.e_max_gemm > 0):
            raise ValueError(f"PhysicsModel: e_max and e_max_gemm must be > 0, got {self.e_max}, {self.e_max_gemm}")
        X = physics_frame(X)
        y = check_targets(y, len(X))
        self.physics_version_ = PHYSICS_VERSION  # the time laws it learns against (saved; a load by other laws refuses)
        # masked only where GEMMs were learned: a model that never saw one predicts them as the implicit GEMMs it knows
        # (convolutions), which read the ratio
        self.gemm_l2_masked_ = not self.gemm_bytes_over_l2 and bool((X["family_gemm"].to_numpy(float) > 0).any())
        self.inputs_ = FEATURES
        # a repeated row (calibrate's refit weights a new GPU's rows so) is one kernel to the floors, not several
        row_keys = pd.util.hash_pandas_object(X, index=False).to_numpy() ^ pd.util.hash_array(y)
        once = ~pd.Series(row_keys).duplicated().to_numpy()
        self.floors_ = estimate_floors(X[once].reset_index(drop=True), y[once], self.harness_floors)
        self._fit_learners(X, y)
        self.domain_ = Domain(FEATURES, HARDWARE, HARDWARE_IDENTITY, SIZE).fit(X)
        self.corrections_: list[dict] = self._fit_hardware_corrections(X, y) if self.hardware_corrections else []
        self.widening_ = self._calibrate_intervals(X, y) if self.interval_folds else None
        self._keep(X, y)
        return self

    def _keep(self, X: pd.DataFrame, y: np.ndarray) -> None:
        """The rows ``calibrate`` refits on (at most ``keep_rows``, a seeded sample; saved with the model)."""
        self.rows_ = None
        if self.keep_rows <= 0:
            return
        idx = np.arange(len(X))
        if len(X) > self.keep_rows:
            idx = np.sort(np.random.default_rng(self.random_state).choice(len(X), self.keep_rows, replace=False))
        self.rows_ = {"X": X.iloc[idx].reset_index(drop=True), "y": y[idx]}

    def _floor(self, X: pd.DataFrame) -> np.ndarray:
        return floor_ms(self.floors_, X)

    def efficiency(self, X: pd.DataFrame) -> np.ndarray:
        """The learned efficiency physics_ms / kernel_ms in (0, e_max] (before any per-GPU correction)."""
        return self._efficiency(physics_frame(X))

    def _parts(self, X: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(floor_ms, kernel_ms, correction index or -1)`` per row, the per-GPU corrections (fit-time per GPU and
        math mode, few-shot per GPU) applied; a row-wise kernel is never faster than one row's serial walk
        (``latency_ms``)."""
        floor = self._floor(X)
        kernel = X["physics_ms"].to_numpy(float) / self._efficiency(X)
        which = self._correct(X, floor, kernel)
        kernel = np.maximum(kernel, X["latency_ms"].to_numpy(float))
        return floor, kernel, which

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        X = physics_frame(X)
        floor, kernel, _ = self._parts(X)
        return floor + kernel
