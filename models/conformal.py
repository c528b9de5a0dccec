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
    k = min(len(scores), math.ceil((len(scores) + 1) * level - 1e-9))  # tolerance: (n+1)*0.9 in floats
    return float(np.sort(scores)[k - 1])


def min_rows(level: float) -> int:
    """Fewest calibration rows for which the ceil((n+1)*level)-th score exists (9 at 90%)."""
    return math.ceil(level / (1 - level) - 1e-9)


def calibrate_by_group(groups, y_true, y_pred, level: float = 0.9) -> dict[str, float]:
    """``q`` per group (e.g. hardware id) for the groups with at least ``min_rows(level)`` rows."""
    groups, y_true, y_pred = np.asarray(groups), np.asarray(y_true, float), np.asarray(y_pred, float)
    return {str(g): calibrate(y_true[groups == g], y_pred[groups == g], level)
            for g in sorted(set(groups)) if (groups == g).sum() >= min_rows(level)}


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
