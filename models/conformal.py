"""Prediction intervals by split-conformal calibration in log space (model-agnostic).

Runtimes are positive and span orders of magnitude, so errors are scored multiplicatively:

    s_i = |log(y_i) - log(yhat_i)|      on a calibration fold the model never saw in fit,
    q   = the ceil((n + 1) * level) / n empirical quantile of s_1..s_n  (``higher`` interpolation),
    interval = [yhat * exp(-q), yhat * exp(q)].

If calibration and future rows are exchangeable, the interval covers the true value with probability
>= ``level`` (Vovk et al. 2005; Lei et al., "Distribution-free predictive inference for regression",
JASA 2018). Here the calibration fold is carved out of the *training* rows by whole shapes (grouped by
``shape_id``, the same rule as the held-out split), the model is fitted on the rest, and the held-out
test rows are used only to report the empirical coverage. Rows of one shape (several hardware and
dtypes) are correlated, so the guarantee holds at the level of shapes, not rows; the reported test
coverage is the honest check.
"""
from __future__ import annotations

import math

import numpy as np


def calibrate(y_true, y_pred, level: float = 0.9) -> float:
    """Half-width ``q`` of the log-space interval from calibration-fold targets and predictions."""
    if not 0 < level < 1:
        raise ValueError(f"interval level must be in (0, 1), got {level}")
    y_true, y_pred = np.asarray(y_true, float), np.asarray(y_pred, float)
    if len(y_true) == 0:
        raise ValueError("calibration needs at least one row")
    scores = np.abs(np.log(y_true) - np.log(np.maximum(y_pred, 1e-12)))
    n = len(scores)
    rank = min(1.0, math.ceil((n + 1) * level) / n)
    return float(np.quantile(scores, rank, method="higher"))


def interval(y_pred, q: float) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, hi)`` = ``y_pred * exp(-q)``, ``y_pred * exp(q)``."""
    y_pred = np.asarray(y_pred, float)
    return y_pred * math.exp(-q), y_pred * math.exp(q)


def coverage(y_true, lo, hi) -> float:
    """Fraction of rows whose true value lies in ``[lo, hi]``."""
    y_true = np.asarray(y_true, float)
    return float(np.mean((y_true >= np.asarray(lo)) & (y_true <= np.asarray(hi))))
