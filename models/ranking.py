"""A learning-to-rank cost model: XGBoost's pairwise / LambdaMART objectives behind the CostModel interface.

An auto-tuner needs the order of the configurations of one kernel on one GPU, not their runtimes. A ranker
learns that order directly (TVM's cost models use the same rank losses):

* ``objective="pairwise"`` (RankNet-style pairwise logistic loss over pairs drawn within a group): the label
  is the negative log runtime relative to the group's fastest (real-valued, higher = faster);
* ``objective="lambdamart"`` (``rank:ndcg``, LambdaMART: pairs weighted by the NDCG change of swapping them, so
  the top of the list counts most): the label is the normalised throughput best / runtime quantised to
  0..31 (NDCG's gains need small integer relevance levels).

``fit(X, runtime_ms, groups=None)``: ``groups`` names the group of each row (one kernel on one GPU); pairs never
cross groups, so GPUs of different speeds train one ranker without a per-GPU scale. ``base_columns``: a
positive feature column ``b`` (e.g. a prior's predicted relative runtime) enters as a fixed margin
``-log b``: the trees learn a correction to the prior's order, as ``models.tree`` learns a factor over a base.

**``predict`` returns a score, not a runtime: lower = predicted faster.** Scores compare rows of one group
only (their scale and offset are arbitrary), so use them to rank and pick (``models.evaluate.ranking_metrics``,
``topk_slowdown``), never as milliseconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import xgboost as xgb

from models.base import CostModel, check_targets, check_xy

OBJECTIVES = {"pairwise": "rank:pairwise", "lambdamart": "rank:ndcg"}


class RankingModel(CostModel):
    name = "xgb_rank"

    def __init__(
        self,
        objective: str = "lambdamart",
        n_estimators: int = 300,
        learning_rate: float = 0.05,
        max_depth: int = 6,
        subsample: float = 0.8,
        colsample_bytree: float = 0.8,
        pairs_per_sample: int = 16,
        base_columns: str | None = None,
        random_state: int = 0,
        n_jobs: int = 1,
    ):
        self.objective = objective
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.max_depth = max_depth
        self.subsample = subsample
        self.colsample_bytree = colsample_bytree
        self.pairs_per_sample = pairs_per_sample
        self.base_columns = base_columns
        self.random_state = random_state
        self.n_jobs = n_jobs

    def _margin(self, X: pd.DataFrame) -> np.ndarray | None:
        if self.base_columns is None:
            return None
        if self.base_columns not in X.columns:
            raise ValueError(f"base column {self.base_columns!r} missing from the features")
        b = X[self.base_columns].to_numpy(float)
        if not np.all(np.isfinite(b) & (b > 0)):
            raise ValueError(f"base column {self.base_columns!r} must be finite and > 0")
        return -np.log(b)

    @staticmethod
    def labels(runtime_ms, groups, objective: str) -> np.ndarray:
        """Relevance labels (higher = faster) within each group, as the objective needs them (module docstring)."""
        log_t = np.log(np.asarray(runtime_ms, float))
        rel = pd.Series(log_t).groupby(np.asarray(groups)).transform("min").to_numpy() - log_t  # <= 0
        if objective == "lambdamart":
            return np.floor(np.exp(rel) * 31 + 1e-9).astype(int)
        return rel

    def fit(self, X: pd.DataFrame, y, groups=None) -> RankingModel:
        X, _ = check_xy(X)
        if self.objective not in OBJECTIVES:
            raise ValueError(f"unknown ranking objective {self.objective!r} ({', '.join(OBJECTIVES)})")
        y = check_targets(y, len(X))
        groups = np.zeros(len(X), int) if groups is None else np.asarray(groups)
        if len(groups) != len(X):
            raise ValueError(f"groups has {len(groups)} entries for {len(X)} rows")
        codes = pd.factorize(groups)[0]
        order = np.argsort(codes, kind="stable")  # XGBoost wants each group's rows contiguous
        self.feature_names_ = list(X.columns)
        Xo = X.iloc[order]
        margin = self._margin(Xo)
        self.model_ = xgb.XGBRanker(
            objective=OBJECTIVES[self.objective],
            n_estimators=self.n_estimators,
            learning_rate=self.learning_rate,
            max_depth=self.max_depth,
            subsample=self.subsample,
            colsample_bytree=self.colsample_bytree,
            lambdarank_pair_method="topk" if self.objective == "lambdamart" else "mean",
            lambdarank_num_pair_per_sample=self.pairs_per_sample,
            random_state=self.random_state,
            n_jobs=self.n_jobs,
            tree_method="hist",
        )
        self.model_.fit(
            Xo[self.feature_names_].to_numpy(np.float32),
            self.labels(y[order], codes[order], self.objective),
            qid=codes[order],
            base_margin=margin,
        )
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        """Ranking score per row, lower = predicted faster (not a runtime; module docstring)."""
        X, _ = check_xy(X)
        missing = [c for c in self.feature_names_ if c not in X.columns]
        if missing:
            raise ValueError(f"features missing: {', '.join(missing)}")
        score = self.model_.predict(X[self.feature_names_].to_numpy(np.float32), base_margin=self._margin(X))
        return -np.asarray(score, float)

    def _save_payload(self, path: Path) -> None:
        self.model_.save_model(path / "xgb_rank.ubj")
        (path / "features.json").write_text(json.dumps(self.feature_names_))

    def _load_payload(self, path: Path) -> None:
        self.model_ = xgb.XGBRanker()
        self.model_.load_model(path / "xgb_rank.ubj")
        self.feature_names_ = json.loads((path / "features.json").read_text())
