"""Prediction intervals by split-conformal calibration in log space (model-agnostic).

Runtimes are positive and span orders of magnitude, so errors are scored multiplicatively:

    s_i = |log(y_i) - log(yhat_i)|      on a calibration fold the model never saw in fit,
    q   = the k-th smallest of s_1..s_n with k = ceil((n + 1) * level)   (the largest if k > n,
          which only happens for n < level / (1 - level), e.g. n < 9 at 90%: then the guarantee is void),
    interval = [yhat * exp(-q), yhat * exp(q)].

If calibration and future rows are exchangeable, the interval covers the true value with probability
>= ``level`` (Vovk et al. 2005; Lei et al., "Distribution-free predictive inference for regression",
JASA 2018). Here the calibration fold is carved out of the *training* rows by whole shapes (grouped by
``shape_id``, the same rule as the held-out split), the model is fitted on the rest, and the held-out
test rows are used only to report the empirical coverage. Rows of one shape (several hardware and
dtypes) are correlated, so the guarantee holds at the level of shapes, not rows; the reported test
coverage is the honest check.

One half-width for all rows gives *marginal* coverage: rows that are easy to predict (the simulated
GPUs) are over-covered and noisy ones (real CPU timings) under-covered. So ``q`` is also calibrated per
hardware id (group-conditional, "Mondrian" conformal: Vovk et al. 2005, ch. 4), for every hardware with
at least :func:`min_rows` calibration rows; others (e.g. a GPU known only by its spec) use the global ``q``.

**Several targets, other transforms** (:func:`calibrate_targets`, :class:`Calibrated`): each target gets its own
``q_j`` from the same fold, scored in the space its model fits (``models.tree``): ``log`` as above, ``log1p``
for zero-heavy counts (s = |log1p(y) - log1p(yhat)|; interval = expm1(log1p(yhat) -+ q), where a log-space
score is undefined at y = 0). Interval ends are clipped to the target's physical bounds [lower, upper] (a
clipped end can only gain coverage: the truth lies inside the bounds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

FORWARD = {"log": np.log, "log1p": np.log1p}
INVERSE = {"log": np.exp, "log1p": np.expm1}


def scores_of(y_true, y_pred, transform: str = "log") -> np.ndarray:
    """Nonconformity scores |T(y) - T(yhat)| for ``T`` = log (predictions floored at 1e-12) or log1p (at 0)."""
    if transform not in FORWARD:
        raise ValueError(f"unknown interval transform {transform!r} (log, log1p)")
    y_true, y_pred = np.asarray(y_true, float), np.asarray(y_pred, float)
    floor = 1e-12 if transform == "log" else 0.0
    return np.abs(FORWARD[transform](y_true) - FORWARD[transform](np.maximum(y_pred, floor)))


def calibrate(y_true, y_pred, level: float = 0.9, transform: str = "log") -> float:
    """Half-width ``q`` of the ``transform``-space interval from calibration-fold targets and predictions."""
    if not 0 < level < 1:
        raise ValueError(f"interval level must be in (0, 1), got {level}")
    y_true, y_pred = np.asarray(y_true, float), np.asarray(y_pred, float)
    if len(y_true) == 0:
        raise ValueError("calibration needs at least one row")
    scores = scores_of(y_true, y_pred, transform)
    k = min(len(scores), math.ceil((len(scores) + 1) * level - 1e-9))  # tolerance: (n+1)*0.9 in floats
    return float(np.sort(scores)[k - 1])


def min_rows(level: float) -> int:
    """Fewest calibration rows for which the ceil((n+1)*level)-th score exists (9 at 90%)."""
    return math.ceil(level / (1 - level) - 1e-9)


def calibrate_by_group(groups, y_true, y_pred, level: float = 0.9) -> dict[str, float]:
    """``q`` per group (e.g. hardware id) for the groups with at least ``min_rows(level)`` rows."""
    groups, y_true, y_pred = np.asarray(groups), np.asarray(y_true, float), np.asarray(y_pred, float)
    return {
        str(g): calibrate(y_true[groups == g], y_pred[groups == g], level)
        for g in sorted(set(groups))
        if (groups == g).sum() >= min_rows(level)
    }


def halfwidths(groups, q: float, by_group: dict[str, float]) -> np.ndarray:
    """Per-row ``q``: the group's own where calibrated, else the global one."""
    return np.array([by_group.get(str(g), q) for g in groups], dtype=float)


def interval(y_pred, q) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, hi)`` = ``y_pred * exp(-q)``, ``y_pred * exp(q)``; ``q`` a scalar or one value per row."""
    y_pred, q = np.asarray(y_pred, float), np.asarray(q, float)
    return y_pred * np.exp(-q), y_pred * np.exp(q)


def coverage(y_true, lo, hi) -> float:
    """Fraction of rows whose true value lies in ``[lo, hi]``."""
    y_true = np.asarray(y_true, float)
    return float(np.mean((y_true >= np.asarray(lo)) & (y_true <= np.asarray(hi))))


def coverage_by_hardware(hardware, y_true, lo, hi) -> dict[str, float]:
    """Coverage over all rows (key ``"all"``) and per hardware id, like ``models.evaluate.evaluate``."""
    hardware, y_true, lo, hi = (np.asarray(a) for a in (hardware, y_true, lo, hi))
    out = {"all": coverage(y_true, lo, hi)}
    for hw in sorted(set(hardware)):
        m = hardware == hw
        out[hw] = coverage(y_true[m], lo[m], hi[m])
    return out


def bounded_interval(y_pred, q, transform: str = "log", lower=None, upper=None) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, hi)`` = inverse(T(yhat) -+ q) clipped to ``[lower, upper]`` (None = unbounded)."""
    y_pred, q = np.asarray(y_pred, float), np.asarray(q, float)
    if transform == "log":
        lo, hi = interval(y_pred, q)
    else:
        z = FORWARD[transform](np.maximum(y_pred, 0.0))
        lo, hi = INVERSE[transform](z - q), INVERSE[transform](z + q)
    lo_b, hi_b = (-np.inf if lower is None else lower), (np.inf if upper is None else upper)
    return np.clip(lo, lo_b, hi_b), np.clip(hi, lo_b, hi_b)


def calibrate_targets(Y_true, Y_pred, transforms, level: float = 0.9) -> np.ndarray:
    """One half-width per target column of ``[n, T]`` arrays, each in its own transform's space."""
    Y_true, Y_pred = np.asarray(Y_true, float), np.asarray(Y_pred, float)
    return np.array([calibrate(Y_true[:, j], Y_pred[:, j], level, t) for j, t in enumerate(transforms)])


def take(X, positions):
    """Rows ``positions`` of a model input: a DataFrame (``iloc``), an array, or a list (graphs, token encodings)."""
    if isinstance(X, (pd.DataFrame, pd.Series)):
        return X.iloc[positions]
    if isinstance(X, np.ndarray):
        return X[positions]
    return [X[i] for i in positions]


def loo_coverage(y_true, y_pred, level: float) -> float:
    """Held-out check of the split-conformal rule on the calibration fold itself: for each calibration point,
    ``q`` from the *other* ones (:func:`calibrate`), and whether its own log error is within it. The interval served
    uses ``q`` from all of them (one more point), so this is the rule's coverage with ``n - 1`` points, not an
    in-sample figure (which would be >= level by construction)."""
    y_true, y_pred = np.asarray(y_true, float), np.asarray(y_pred, float)
    if len(y_true) < 2:
        return float("nan")
    s = np.abs(np.log(y_true) - np.log(np.maximum(y_pred, 1e-12)))
    keep = ~np.eye(len(s), dtype=bool)
    return float(np.mean([s[i] <= calibrate(y_true[keep[i]], y_pred[keep[i]], level) for i in range(len(s))]))


@dataclass
class Calibrated:
    """A fitted :class:`~models.base.CostModel` (one or several targets) with split-conformal half-widths per target.

    Built by :func:`fit_calibrated`. ``q[j]`` is target ``j``'s half-width, ``by_group[j]`` its per-group ones
    (Mondrian, e.g. per hardware; empty without groups); ``predict_interval(X, groups)`` returns
    ``(pred, lo, hi)``, each shaped like ``predict``. ``y_cal`` / ``p_cal`` are the calibration scores' inputs
    (targets and out-of-fit predictions, ``[n, T]``).
    """

    model: object
    q: np.ndarray  # one half-width per target
    transforms: list[str]
    lower: list
    upper: list
    level: float
    n_calibration: int
    by_group: list[dict[str, float]] = None
    y_cal: np.ndarray | None = None
    p_cal: np.ndarray | None = None

    def halfwidths(self, groups, n: int) -> np.ndarray:
        """``[n, T]`` per-row half-widths: the row's group's own where calibrated, else the global one."""
        if groups is None or not self.by_group:
            return np.tile(self.q, (n, 1))
        return np.column_stack([halfwidths(groups, q, g) for q, g in zip(self.q, self.by_group)])

    def interval(self, pred, groups=None) -> tuple[np.ndarray, np.ndarray]:
        """``(lo, hi)`` around given predictions (``[n]`` or ``[n, T]``)."""
        pred = np.asarray(pred, float)
        P = pred.reshape(len(pred), -1)
        Q = self.halfwidths(groups, len(P))
        ends = [
            bounded_interval(P[:, j], Q[:, j], t, lo, hi)
            for j, (t, lo, hi) in enumerate(zip(self.transforms, self.lower, self.upper))
        ]
        lo, hi = np.column_stack([e[0] for e in ends]), np.column_stack([e[1] for e in ends])
        return (lo, hi) if pred.ndim == 2 else (lo[:, 0], hi[:, 0])

    def predict_interval(self, X, groups=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pred = np.asarray(self.model.predict(X), float)
        return (pred, *self.interval(pred, groups))

    def coverage(self, X, y, groups=None) -> np.ndarray:
        """Empirical coverage of the nominal ``level`` interval per target on rows ``(X, y)``."""
        _, lo, hi = self.predict_interval(X, groups)
        Y, lo, hi = (np.asarray(a, float).reshape(len(y), -1) for a in (y, lo, hi))
        return np.array([coverage(Y[:, j], lo[:, j], hi[:, j]) for j in range(Y.shape[1])])


def fit_calibrated(
    model,
    X,
    y,
    groups=None,
    calibration_size: float = 0.2,
    level: float = 0.9,
    seed: int = 0,
    *,
    by=None,
    folds=None,
    calibration=None,
) -> Calibrated:
    """Fit a model and calibrate split-conformal half-widths per target on rows it never saw in fit: the one
    calibration helper of every job.

    ``model``: an unfitted :class:`~models.base.CostModel`, or a zero-argument factory of fresh ones (needed for
    ``folds``). ``X`` / ``y``: the training rows (``y`` ``[n]`` or ``[n, T]``). Where the calibration scores come from:

    * default (split conformal): a seeded ``calibration_size`` of the distinct ``groups`` (e.g. shape ids) is held
      back; the model is fitted on the other rows and scored on the held-back ones, so no group is on both sides;
    * ``calibration=(fit, cal)``: explicit positions (e.g. a per-family fold);
    * ``folds=[(train, test), ...]`` over the rows (cross-conformal, Vovk 2015; Barber et al. 2021, "Predictive
      inference with the jackknife+": worst-case coverage 1 - 2 alpha, near nominal in practice): the scores are the
      out-of-fold errors of a fresh model per fold, and the model is fitted on every row. It spends no rows.

    ``by``: a group per row (e.g. hardware id) for per-group half-widths where a group has at least
    :func:`min_rows` calibration rows. Transforms and bounds per target are read from the model's ``transform`` /
    ``lower`` / ``upper`` settings (``models.tree``; models without them: log, unbounded).
    """
    from models.base import CostModel
    from models.splits import held_out_groups
    from models.tree import per_target

    make = (lambda: model) if isinstance(model, CostModel) else model
    y = np.asarray(y, float)
    by = None if by is None else np.asarray(by)
    if folds is not None:
        pred = None
        for tr, te in folds:
            p = np.asarray(make().fit(take(X, tr), y[tr]).predict(take(X, te)), float)
            pred = np.full((len(y), *p.shape[1:]), np.nan) if pred is None else pred
            pred[te] = p
        fitted = make().fit(X, y)
        cal_pos, P = np.arange(len(y)), pred
    else:
        fit_pos, cal_pos = (
            calibration if calibration is not None else held_out_groups(np.asarray(groups), calibration_size, seed)
        )
        fitted = make().fit(take(X, fit_pos), y[fit_pos])
        P = np.asarray(fitted.predict(take(X, cal_pos)), float)
    n_t = 1 if y.ndim == 1 else y.shape[1]
    P = P.reshape(len(cal_pos), -1)
    Y = y[cal_pos].reshape(len(cal_pos), -1)
    transforms = per_target(getattr(fitted, "transform", "log"), n_t, "transform")
    lower = per_target(getattr(fitted, "lower", None), n_t, "lower")
    upper = per_target(getattr(fitted, "upper", None), n_t, "upper")
    q = calibrate_targets(Y, P, transforms, level)
    by_group = [calibrate_by_group(by[cal_pos], Y[:, j], P[:, j], level) if by is not None else {} for j in range(n_t)]
    return Calibrated(fitted, q, transforms, lower, upper, level, len(cal_pos), by_group, Y, P)
