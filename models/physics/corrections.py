"""Per-GPU corrections of the shared efficiency: each measured GPU's own (fit time), a measured sibling's for a GPU
outside training (borrowed), and a new GPU's from a few of its measurements (:meth:`HardwareCorrections.calibrate`).

A correction has one form: a scale of the launch floors, a log-bias of the kernel time (grid search), then boosted
trees of the log kernel-time correction on the learner inputs. A GPU's rows are predicted as
``floor_scale * floor + kernel * exp(g(x))``. docs/decisions/0011-per-gpu-corrections-and-borrowing.md,
docs/decisions/0012-few-shot-calibration.md.
"""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import xgboost as xgb

from features.physics import FEATURES, HARDWARE_IDENTITY, laws
from models.domain import conformal
from models.physics.floors import floor_groups_of, regime_index
from models.physics.frame import architectures, families_of, hardware_keys, mode_keys, physics_frame
from models.physics.learner import train

MIN_CALIBRATION_ROWS = 5
CALIBRATION_METHODS = ("auto", "refit", "correction")
MIN_GROUP_SCALE_ROWS = 10  # rows of a floor group for a scale of its own in a measured GPU's correction
CORRECTION_ROUNDS = (0, 25, 50, 100)  # boosted-correction sizes tried by cross-validation on the new GPU's rows
# calibrate's refit: from MIN_REFIT_ROWS new rows, the model refitted on the rows it was trained on plus the new GPU's
# rows, those NEW_ROW_REPEATS times (conf/physics.yaml); the new rows' out-of-fold predictions by REFIT_FOLDS-fold
# refits (the interval and the reported error)
NEW_ROW_REPEATS = int(laws()["corrections"]["new_row_repeats"])
MIN_REFIT_ROWS = 10
REFIT_FOLDS = 3
# A training GPU's own correction (``hardware_corrections``): from this many rows, one boosted round per
# CORRECTION_ROWS_PER_ROUND rows, at most MAX_FIT_CORRECTION_ROUNDS (depth-3 trees, eta 0.1) and at most the shared
# learner's trees (``n_estimators``)
MIN_FIT_CORRECTION_ROWS = 30
CORRECTION_ROWS_PER_ROUND = 10
MAX_FIT_CORRECTION_ROUNDS = 300
# A GPU outside training borrows a measured sibling's correction (same architecture and math mode) only when their
# spec positions (features.physics.HARDWARE_IDENTITY, log2 units) are closer than this (sum of squares), weighted by
# 1 - distance / BORROW_MAX_DISTANCE (no step in the prediction as a spec moves): the variants of one chip, not two
# chips of one generation (conf/physics.yaml).
BORROW_MAX_DISTANCE = float(laws()["corrections"]["borrow_max_distance"])


def ape(log_pred: np.ndarray, logy: np.ndarray) -> np.ndarray:
    """Absolute percentage error (a fraction) per row of log predictions."""
    return np.abs(np.expm1(log_pred - logy))


def mape(log_pred: np.ndarray, logy: np.ndarray) -> float:
    return float(np.mean(ape(log_pred, logy)) * 100)


def beats(log_pred: np.ndarray, incumbent: np.ndarray, logy: np.ndarray) -> bool:
    """Whether out-of-fold predictions beat the incumbent's on the same rows by more than one standard error of their
    paired absolute percentage errors (a one-standard-error rule: calibrate keeps the simpler answer unless the rows
    say otherwise). Judged in percent, the error reported, not in the squared log error the fits minimise: the two
    can disagree on a few rows, and the smallest gain alone chooses by noise."""
    gain = ape(incumbent, logy) - ape(log_pred, logy)
    return bool(gain.mean() > gain.std(ddof=1) / np.sqrt(len(gain)))


def fit_correction(
    F: np.ndarray, floor, kernel, logy, rounds: int, seed: int, names=FEATURES, bounded: bool = False, groups=None
) -> dict:
    """Floor scale and kernel log-bias by grid search, then ``rounds`` boosted trees of the log-correction on the
    learner inputs ``F`` (``PhysicsModel._inputs``, columns ``names``).

    ``bounded`` (a new GPU's correction, :meth:`HardwareCorrections.calibrate`): the scaled floor stays under every
    row's measured runtime. The trees correct the kernel time only, so a launch floor above a measured call stays
    wrong, and a new GPU's floors come from other GPUs' hosts. Not for a measured GPU's own correction: one scale
    serves every family's floor there, so the family of the lowest runtime / floor would bind the others.

    ``groups`` (a measured GPU's own correction, the floor group per row): after the GPU's scale and bias, each group
    of :data:`MIN_GROUP_SCALE_ROWS` rows or more gets a floor scale of its own (grid search on its rows, the bias
    fixed), so the trees see each family's time less its own floor: the launch cost of a family's host path is not the
    same multiple of the shared floor on every host. Applied to rows of the harness the GPU was measured with (another
    harness's floors take the GPU's one scale). A new GPU's few rows keep one scale: a group's scale from a few rows
    that happen to be large says nothing of its floor.
    """
    grid, biases = np.geomspace(0.25, 4.0, 25), np.linspace(-2.0, 2.0, 81)
    scales = grid
    if bounded:  # docstring; the grid's bottom where even that is over
        cap = np.min(np.exp(logy) / floor)
        scales = grid[grid <= cap] if (grid <= cap).any() else grid[:1]
    scaled_kernel = kernel[None, :] * np.exp(biases)[:, None]  # [bias, row]
    loss = np.array([np.sum((np.log(s * floor[None, :] + scaled_kernel) - logy) ** 2, axis=1) for s in scales])
    i, j = np.unravel_index(np.argmin(loss), loss.shape)  # the first of equal losses, scale-major as a loop finds it
    scale, bias = float(scales[i]), float(biases[j])
    corr = {"floor_scale": scale, "bias": bias, "rounds": int(rounds), "booster": None}
    row_scale = np.full(len(logy), scale)
    if groups is not None:  # docstring: each floor group's own scale, the kernel's bias fixed
        corr["floor_scales"] = {}
        for g in np.unique(groups):
            rows = groups == g
            if rows.sum() < MIN_GROUP_SCALE_ROWS:
                continue
            err = [np.sum((np.log(c * floor[rows] + kernel[rows] * np.exp(bias)) - logy[rows]) ** 2) for c in grid]
            corr["floor_scales"][str(g)] = float(grid[int(np.argmin(err))])
            row_scale[rows] = corr["floor_scales"][str(g)]
    if rounds:
        params = {"eta": 0.1, "max_depth": 3, "min_child_weight": 2, "reg_lambda": 1.0, "seed": seed, "nthread": 1}
        obj = correction_objective(kernel, row_scale * floor, logy)
        corr["booster"] = train(params, F, np.full(len(F), bias), rounds, obj)
        corr["booster"].feature_names = list(names)
    return corr


def correction_objective(kernel, floor, logy):
    """Squared log error of ``floor + kernel * exp(g)`` on the margin g (the boosted correction)."""

    def obj(g, _dtrain):
        k = kernel * np.exp(g)
        pred = floor + k
        w = k / pred
        resid = np.log(pred) - logy
        return resid * w, w * w + 1e-6

    return obj


def group_scale(corr: dict, groups: np.ndarray) -> np.ndarray:
    """Per floor group a correction's scale of the launch floor: the group's where the correction has one (a measured
    GPU's own, :func:`fit_correction`'s ``groups``), else the GPU's."""
    own = corr.get("floor_scales") or {}
    return np.array([own.get(str(g), corr["floor_scale"]) for g in groups], float)


def floor_scale(corr: dict, X: pd.DataFrame, other: float) -> np.ndarray:
    """Per row of ``X`` a correction's floor scale on rows of the harness its GPU was measured with
    (:func:`group_scale`), ``other`` on rows of another harness (and on every row of a calibrated GPU's correction,
    which records no harness)."""
    same = regime_index(X) == corr.get("harness", -1)
    return np.where(same, group_scale(corr, floor_groups_of(X)), other)


def correction_margin(corr: dict, F: np.ndarray, names=FEATURES) -> np.ndarray:
    """Per row a correction's log kernel-time factor: its bias, plus its trees where it has any."""
    if corr.get("booster") is None:
        return np.full(len(F), corr["bias"])
    d = xgb.DMatrix(F, feature_names=list(names))
    d.set_base_margin(np.full(len(F), corr["bias"]))
    return corr["booster"].predict(d, output_margin=True).astype(float)


class HardwareCorrections:
    """The per-GPU corrections of :class:`models.physics.PhysicsModel` (a mixin: ``corrections_`` is a list of
    records, ``origin`` ``fit`` for a measured GPU's own, per math mode; a calibrated GPU's record has ``method``
    ``correction``, ``refit`` or ``none``)."""

    def _fit_hardware_corrections(self, X: pd.DataFrame, y: np.ndarray) -> list[dict]:
        """Each training GPU (spec position) and math mode with :data:`MIN_FIT_CORRECTION_ROWS` rows gets its own
        correction of the shared efficiency (rounds grow with its rows): what a spec sheet cannot say about a GPU
        that was measured (its library's tile choices, its sustained clock) is learned for that GPU only. A GPU
        outside training gets the shared model, which never saw a GPU's identity, or a sibling's (:meth:`_borrow`)."""
        keys = mode_keys(X)
        floor, kernel = self._floor(X), X["physics_ms"].to_numpy(float) / self.efficiency(X)
        logy = np.log(y)
        out = []
        for key in np.unique(keys):
            idx = np.flatnonzero(keys == key)
            if len(idx) < MIN_FIT_CORRECTION_ROWS:
                continue
            rounds = min(MAX_FIT_CORRECTION_ROUNDS, self.n_estimators, len(idx) // CORRECTION_ROWS_PER_ROUND)
            Xi = X.iloc[idx].reset_index(drop=True)
            corr = fit_correction(
                self._inputs(Xi),
                floor[idx],
                kernel[idx],
                logy[idx],
                rounds,
                self.random_state,
                self.inputs_,
                groups=floor_groups_of(Xi),
            )
            corr.update(
                key=str(key),
                hardware="",
                rows=len(idx),
                origin="fit",
                architecture=str(architectures(Xi)[0]),
                position=[float(v) for v in Xi[list(HARDWARE_IDENTITY)].iloc[0]],
                harness=int(np.bincount(regime_index(Xi)).argmax()),
            )
            out.append(corr)
        return out

    def _correct(self, X: pd.DataFrame, floor: np.ndarray, kernel: np.ndarray) -> np.ndarray:
        """Apply the corrections to ``floor`` and ``kernel`` (in place) and return per row the index of the
        calibration it took (-1: none): a measured GPU's own fit-time correction (per math mode); else a measured
        sibling's (borrowed); then a calibrated GPU's correction on top (calibrate fitted it on that same base)."""
        which = np.full(len(X), -1)
        if not self.corrections_:
            return which
        keys = hardware_keys(X)
        modes = mode_keys(X, keys)
        for fit in (True, False):
            for i, c in enumerate(self.corrections_):
                if (c.get("origin") == "fit") != fit:
                    continue
                m = (modes if fit else keys) == c["key"]
                if "families" in c:  # a calibration kept for these op families only
                    m &= np.isin(families_of(X), c["families"])
                if m.any() and c.get("model") is not None:  # calibrated by a refit: that model's answer
                    floor[m], kernel[m], _ = c["model"]._parts(X[m])
                    which[m] = i
                elif m.any():
                    Xm = X[m]
                    floor[m] = floor[m] * floor_scale(c, Xm, other=c["floor_scale"])
                    kernel[m] = kernel[m] * np.exp(correction_margin(c, self._inputs(Xm), self.inputs_))
                    which[m] = i
            if fit and self.borrow_corrections:
                self._borrow(X, floor, kernel, which, modes)
        return which

    def _borrow(self, X: pd.DataFrame, floor, kernel, which, modes) -> None:
        """Rows of a GPU outside training take the fit-time correction of the nearest measured GPU (spec position)
        of the same architecture and math mode (in place): same SM design and library kernels, another clock,
        bandwidth or SM count, which the physics already moves with. Kept out of ``which`` (not a calibration)."""
        donors = [(i, c) for i, c in enumerate(self.corrections_) if c.get("origin") == "fit" and c.get("architecture")]
        free = which < 0
        if not donors or not free.any():
            return
        arch, H = architectures(X), X[list(HARDWARE_IDENTITY)].to_numpy(float)
        for key in np.unique(modes[free]):
            m = free & (modes == key)
            first = np.flatnonzero(m)[0]
            mode = key.rsplit("|", 1)[1]
            near = [
                (float(np.sum((np.asarray(c["position"]) - H[first]) ** 2)), i)
                for i, c in donors
                if c["architecture"] == arch[first] and c["key"].rsplit("|", 1)[1] == mode
            ]
            if near and min(near)[0] < BORROW_MAX_DISTANCE:
                distance, i = min(near)
                c, w = self.corrections_[i], 1.0 - distance / BORROW_MAX_DISTANCE  # fades out with the distance
                Xm = X[m]
                floor[m] = floor[m] * floor_scale(c, Xm, other=1.0) ** w  # a floor scale is the donor harness's
                kernel[m] = kernel[m] * np.exp(w * correction_margin(c, self._inputs(Xm), self.inputs_))

    def calibrate(self, X_new: pd.DataFrame, y_new, hardware: str | None = None, method: str = "auto"):
        """A new model that also knows one new GPU from a few of its measured rows (``self`` is unchanged).

        ``method`` ``auto`` keeps whichever of ``none`` (the model's own answer), ``correction`` and ``refit`` does
        best out of fold on the new rows, a more complex one only where it beats a simpler one by more than a
        standard error of their paired percentage errors (:func:`beats`); ``refit`` or ``correction`` asks for one
        (``method`` in the record the new model appends to ``corrections_``):

        * ``refit`` (a model that kept its training rows, ``keep_rows``, and :data:`MIN_REFIT_ROWS` new rows or more):
          a model fitted on the kept rows plus the new ones, those :data:`NEW_ROW_REPEATS` times, answers for the new
          GPU, so that GPU takes part in everything a fit learns (its harness's floors, the shared efficiency, its own
          per-mode correction from :data:`MIN_FIT_CORRECTION_ROWS` rows). A family the model never saw is learned
          this way, not by correcting a guess. Out of fold: :data:`REFIT_FOLDS` refits, each without a fold of the new
          rows. The calibrated model keeps the new rows too (a later calibration of another GPU refits with them).
        * ``correction`` (fewer rows, or a model saved without its rows): a scale of the launch floors and a log-bias
          of the kernel time (grid search), then a boosted correction g(x) of log kernel time on the dimensionless
          features (depth-3 trees; the number of rounds in :data:`CORRECTION_ROUNDS` chosen by 5-fold
          cross-validation on the new rows, leave-one-out under 20 rows; with ``auto``, none at all when none beats
          the model's own answer out of fold). Rows of that hardware (same spec position) are then predicted as
          ``floor_scale * floor + kernel * exp(g(x))`` (floor and kernel: the model's answer without that GPU's own
          corrections, i.e. shared or borrowed from a measured sibling).

        Never worse than the model's own answer: the new GPU's rows of an op family keep the calibration only where it
        beats that answer out of fold on them (``families`` in the record; families of fewer than
        :data:`MIN_CALIBRATION_ROWS` rows judged together); the out-of-fold answers are kept as ``calibration_oof_``.
        Other hardware is predicted exactly as before. The new GPU's interval comes from the out-of-fold errors.
        Raises ValueError (one line) for too few or bad rows, or a refit asked of a model that cannot refit.
        """
        if not hasattr(self, "floors_"):
            raise ValueError("calibrate: fit the model first")
        if method not in CALIBRATION_METHODS:
            raise ValueError(f"calibrate: method must be one of {', '.join(CALIBRATION_METHODS)}, got {method!r}")
        try:
            X_new = physics_frame(X_new)
        except TypeError as exc:
            raise ValueError(f"calibrate: {exc}") from None
        y_new = np.asarray(y_new, float)
        if y_new.shape != (len(X_new),):
            raise ValueError(f"calibrate: y has shape {y_new.shape}, expected ({len(X_new)},)")
        if len(X_new) < MIN_CALIBRATION_ROWS:
            raise ValueError(
                f"calibrate: needs at least {MIN_CALIBRATION_ROWS} measured rows of the new hardware, got {len(X_new)}"
            )
        if not np.all(np.isfinite(y_new)) or np.any(y_new <= 0):
            raise ValueError("calibrate: measured runtimes must be finite and > 0")
        keys = np.unique(hardware_keys(X_new))
        if len(keys) != 1:
            raise ValueError(f"calibrate: rows must come from one hardware, got {len(keys)} different spec positions")
        key = str(keys[0])
        new = copy.deepcopy(self)
        # the calibrated correction replaces what the model had for that GPU (its fit-time ones included) and starts
        # from what the model says without them: the shared model, or a measured sibling's borrowed correction
        new.corrections_ = [c for c in self.corrections_ if c["key"].split("|")[0] != key]
        base_floor, base_kernel, _ = new._parts(X_new)
        logy = np.log(y_new)
        can_refit = self.rows_ is not None and len(X_new) >= MIN_REFIT_ROWS
        if method == "refit" and not can_refit:
            raise ValueError(
                f"calibrate: a refit needs the model's training rows (keep_rows) and {MIN_REFIT_ROWS} new rows or more"
            )
        rounds, oof = -1, np.log(base_floor + base_kernel)
        if method != "refit":
            rounds, oof = self._choose_rounds(X_new, base_floor, base_kernel, logy, none=method == "auto")
        oof_refit = None
        if can_refit and method != "correction":
            oof_refit = self._refit_out_of_fold(X_new, y_new)
            X_all, y_all = self._with_new_rows(X_new, y_new)
            new.rows_ = {"X": X_all, "y": y_all}  # a later calibration's refit knows this GPU too
        if oof_refit is not None and (method == "refit" or beats(oof_refit, oof, logy)):
            oof, sub = oof_refit, self._refit(X_all, y_all)
            corr = {"floor_scale": 1.0, "bias": 0.0, "rounds": 0, "booster": None, "method": "refit", "model": sub}
        else:  # too few rows or no kept rows for a refit, or the correction (or none) is better out of fold
            if rounds < 0:  # the model's own answer is better out of fold than any correction of it from these rows
                corr = {"floor_scale": 1.0, "bias": 0.0, "rounds": 0, "booster": None}
            else:
                corr = fit_correction(
                    self._inputs(X_new),
                    base_floor,
                    base_kernel,
                    logy,
                    rounds,
                    self.random_state,
                    self.inputs_,
                    bounded=True,
                )
            corr["method"] = "correction" if rounds >= 0 else "none"
        base_log = np.log(base_floor + base_kernel)
        # never worse than the model's own answer: the new GPU's rows of an op family keep the correction only where
        # it beats that answer out of fold on them; families of fewer than MIN_CALIBRATION_ROWS rows are judged
        # together (and with all the rows where even together they are fewer)
        families = families_of(X_new)
        names, counts = np.unique(families, return_counts=True)
        small = np.isin(families, names[counts < MIN_CALIBRATION_ROWS])
        groups = [families == f for f in names[counts >= MIN_CALIBRATION_ROWS]]
        groups.append(small if small.sum() >= MIN_CALIBRATION_ROWS else np.ones(len(families), bool) & small)
        kept = []
        for g in groups:
            judged = g if g.sum() >= MIN_CALIBRATION_ROWS else np.ones(len(families), bool)
            if g.any() and mape(oof[judged], logy[judged]) < mape(base_log[judged], logy[judged]):
                kept += [str(f) for f in np.unique(families[g])]
        if corr["method"] != "none":
            corr["families"] = kept
            oof = np.where(np.isin(families, kept), oof, base_log)
        new.calibration_oof_ = pd.DataFrame({"family": families, "before": base_log, "after": oof, "measured": logy})
        corr.update(
            key=key,
            hardware=hardware or key,
            rows=len(X_new),
            q=conformal(np.abs(oof - logy), self.level),
            # honest numbers on the new rows: the model before, and the kept way out of fold
            mape_before=mape(base_log, logy),
            mape_out_of_fold=mape(oof, logy),
        )
        if oof_refit is not None:  # what the refit would have given, kept or not
            corr["mape_refit_out_of_fold"] = mape(oof_refit, logy)
        new.corrections_.append(corr)
        new.domain_ = copy.deepcopy(self.domain_).add_hardware(X_new)
        return new

    def _with_new_rows(self, X_new: pd.DataFrame, y_new: np.ndarray) -> tuple[pd.DataFrame, np.ndarray]:
        """The kept rows plus the new GPU's, those :data:`NEW_ROW_REPEATS` times."""
        X = pd.concat([self.rows_["X"], *[X_new[self.rows_["X"].columns]] * NEW_ROW_REPEATS], ignore_index=True)
        return X, np.concatenate([self.rows_["y"], *[y_new] * NEW_ROW_REPEATS])

    def _refit(self, X: pd.DataFrame, y: np.ndarray):
        """A model of the same parameters fitted on ``X, y`` (no interval folds: the parent's widening serves; no rows
        kept: the parent keeps them)."""
        return type(self)(**{**self.get_params(), "interval_folds": False, "keep_rows": 0}).fit(X, y)

    def _refit_out_of_fold(self, X_new: pd.DataFrame, y_new: np.ndarray) -> np.ndarray:
        """log predictions of the new rows by refits without them (:data:`REFIT_FOLDS` folds)."""
        folds = np.random.default_rng(self.random_state).permutation(len(X_new)) % REFIT_FOLDS
        oof = np.zeros(len(X_new))
        for k in range(REFIT_FOLDS):
            tr, te = folds != k, folds == k
            sub = self._refit(*self._with_new_rows(X_new[tr].reset_index(drop=True), y_new[tr]))
            oof[te] = np.log(sub.predict(X_new[te].reset_index(drop=True)))
        return oof

    def _choose_rounds(self, X, floor, kernel, logy, none: bool = True) -> tuple[int, np.ndarray]:
        """The correction's rounds (:data:`CORRECTION_ROUNDS`) and its out-of-fold log predictions; with ``none``,
        -1 (no correction) unless one beats the model's own answer (:func:`beats`)."""
        n, F = len(X), self._inputs(X)
        n_folds = n if n < 20 else 5  # few rows: leave one out
        folds = np.random.default_rng(self.random_state).permutation(n) % n_folds
        best, best_oof = -1, np.log(floor + kernel)  # no correction at all
        for rounds in CORRECTION_ROUNDS:
            if rounds and n < 20:  # too few rows for trees: the floor scale and the bias only
                continue
            oof = np.zeros(n)
            for k in np.unique(folds):
                tr, te = folds != k, folds == k
                c = fit_correction(
                    F[tr], floor[tr], kernel[tr], logy[tr], rounds, self.random_state, self.inputs_, bounded=True
                )
                g = correction_margin(c, F[te], self.inputs_)
                oof[te] = np.log(floor[te] * c["floor_scale"] + kernel[te] * np.exp(g))
            if (best < 0 and not none) or beats(oof, best_oof, logy):
                best, best_oof = rounds, oof
        return best, best_oof
