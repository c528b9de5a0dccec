"""Each prediction's domain of validity and interval (``models.domain``): split-conformal half-widths in log space
from out-of-fold errors of sub-models, widened with the distance from the training domain, calibrated at fit time on
held-out folds of the training rows (shapes, hardware, math modes, the largest shapes)."""

from __future__ import annotations

import joblib
import numpy as np
import pandas as pd

from features.physics import MODES
from models.domain import calibrate_widening, widen
from models.physics.frame import families_of, hardware_keys, physics_frame, shape_keys


def fold_scores(cls, params: dict, X_train, y_train, X_test, y_test) -> tuple[np.ndarray, ...]:
    """One interval fold: a sub-model (``cls(**params)``) fitted on the fold's training rows, its absolute log errors
    on the held-out rows and their domain distances, hardware-seen flags and op families."""
    X_test = X_test.reset_index(drop=True)
    sub = cls(**params).fit(X_train, y_train)
    dom = sub.domain_.frame(X_test)
    score = np.abs(np.log(sub.predict(X_test)) - np.log(y_test))
    return score, dom["domain_distance"].to_numpy(), dom["hardware_seen"].to_numpy(), families_of(X_test)


class DomainIntervals:
    """The domain and intervals of :class:`models.physics.PhysicsModel` (a mixin: ``domain_`` and ``widening_`` are
    fitted with the model)."""

    def predict_domain(self, X: pd.DataFrame) -> pd.DataFrame:
        """Per row: ``runtime_ms``, the interval ``lo_ms`` / ``hi_ms`` (level ``self.level``), ``in_domain``,
        ``domain_distance``, ``domain_reason``, ``hardware_seen``, ``calibrated_on`` (few-shot hardware or '')."""
        X = physics_frame(X)
        floor, kernel, which = self._parts(X)
        pred = floor + kernel
        out = self.domain_.frame(X)
        if self.widening_ is not None:
            q = widen(self.widening_, out["domain_distance"], out["hardware_seen"], families_of(X))
        else:
            q = np.full(len(X), np.nan)
        for i, c in enumerate(self.corrections_):  # calibrated hardware: its own out-of-fold half-width
            if c.get("origin") == "fit":
                continue
            m = which == i
            d = out.loc[m, "domain_distance"].to_numpy(float)
            q[m] = widen(self.widening_, d, np.ones(len(d), bool), base=c["q"]) if self.widening_ else c["q"]
        out.insert(0, "runtime_ms", pred)
        out.insert(1, "lo_ms", pred * np.exp(-q))
        out.insert(2, "hi_ms", pred * np.exp(q))
        out["calibrated_on"] = [self.corrections_[i]["hardware"] if i >= 0 else "" for i in which]  # fit-time: ""
        return out

    def predict_interval(self, X: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(runtime_ms, lo_ms, hi_ms)`` per row: the prediction and its own interval (:meth:`predict_domain`)."""
        dom = self.predict_domain(X)
        return tuple(dom[c].to_numpy(float) for c in ("runtime_ms", "lo_ms", "hi_ms"))

    def _calibrate_intervals(self, X: pd.DataFrame, y: np.ndarray) -> dict | None:
        """Out-of-fold scores and domain distances from sub-models (module ``models.domain``), then the widening.

        Folds: 20% of the shapes held out; each hardware held out (if there are several; with more hardware than
        ``interval_hardware_folds``, several at a time, a harder test); each math mode held out (if there are
        several); the 10% largest shapes (FLOPs + bytes) held out. Sub-models see at most ``interval_max_rows``
        rows."""
        rng = np.random.default_rng(self.random_state)
        shapes, hw = shape_keys(X), hardware_keys(X)
        folds = []
        distinct = np.unique(shapes)
        if len(distinct) >= 5:
            held = rng.choice(distinct, max(1, len(distinct) // 5), replace=False)
            folds.append(np.isin(shapes, held))
        distinct_hw = np.unique(hw)
        if len(distinct_hw) >= 2:  # each hardware held out once, in at most interval_hardware_folds groups
            groups = np.array_split(rng.permutation(distinct_hw), min(len(distinct_hw), self.interval_hardware_folds))
            folds += [np.isin(hw, g) for g in groups]
        modes = X[[f"mode_{m}" for m in MODES]].to_numpy().argmax(axis=1)
        if len(np.unique(modes)) >= 2:  # a math mode never seen (e.g. tensor cores after fp32-only rows)
            folds += [modes == m for m in np.unique(modes)]
        work = X["flops"].to_numpy(float) + X["bytes"].to_numpy(float)
        folds.append(work > np.quantile(work, 0.9))
        # sub-models without the per-GPU corrections (each would cost as much again): the widening is sized on the
        # shared model, wider than a measured GPU's corrected predictions need
        params = {**self.get_params(), "interval_folds": False, "hardware_corrections": False, "keep_rows": 0}
        jobs = []
        for test in folds:
            train = np.flatnonzero(~test)
            if len(train) < 20 or test.sum() == 0:
                continue
            if len(train) > self.interval_max_rows:
                train = np.sort(rng.choice(train, self.interval_max_rows, replace=False))
            jobs.append((train, np.flatnonzero(test)))
        if not jobs:
            return None
        # the folds in n_jobs processes (one XGBoost thread each): their fits are most of a fit's time
        workers = min(joblib.effective_n_jobs(self.n_jobs), len(jobs))
        params["n_jobs"] = 1 if workers > 1 else self.n_jobs
        out = joblib.Parallel(n_jobs=workers)(
            joblib.delayed(fold_scores)(type(self), params, X.iloc[tr].reset_index(drop=True), y[tr], X.iloc[te], y[te])
            for tr, te in jobs
        )
        scores, dist, seen, family = (np.concatenate(part) for part in zip(*out, strict=True))
        return calibrate_widening(scores, dist, seen, self.level, groups=family)
