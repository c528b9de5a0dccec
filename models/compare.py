"""Is a challenger better than the champion beyond the run-to-run spread? A paired bootstrap on the same rows.

Two models scored on the same held-out rows differ by the rows as much as by the models: retraining the same
configuration on a re-measured dataset moves held-out MAPE by tenths of a point, so "lower" alone moves the alias on
noise. :func:`paired_difference` resamples the compared rows' clusters (held-out shapes: the rows of one workload on
several GPUs are not independent) with replacement, scores both models on each resample, and returns the metric
difference (challenger - champion) with its bootstrap interval (Efron & Tibshirani 1993, ch. 13, percentile
interval; the pairing cancels the rows' own difficulty, which is most of the spread).

:func:`beats` is the promotion rule: the challenger is better on the full rows and on at least ``level`` of the
resamples (a one-sided test at ``1 - level``), by more than ``margin`` (a fraction of the champion's value).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

LOWER_IS_BETTER = {"mape": True, "medape": True, "r2_log": False, "kendall_tau": False}


def _score(metric: str, y: np.ndarray, p: np.ndarray) -> float:
    if metric in ("mape", "medape"):
        ape = np.abs(p - y) / np.abs(y) * 100.0
        return float(np.mean(ape) if metric == "mape" else np.median(ape))
    from models.evaluate import regression_metrics

    return float(regression_metrics(y, p)[metric])


@dataclass
class Comparison:
    metric: str
    new: float  # the challenger's value on all compared rows
    old: float  # the champion's
    difference: float  # new - old
    lo: float  # the bootstrap interval of the difference at ``level`` (two-sided percentile ends)
    hi: float
    share_better: float  # resamples on which the challenger is better
    level: float
    n: int  # rows
    clusters: int
    margin: float

    @property
    def lower_is_better(self) -> bool:
        return LOWER_IS_BETTER.get(self.metric, True)

    def beats(self) -> bool:
        """The promotion rule (module docstring)."""
        need = self.margin * abs(self.old)
        better = (self.old - self.new) if self.lower_is_better else (self.new - self.old)
        return better > need and self.share_better >= self.level

    def describe(self) -> str:
        """One line: the difference, its interval and what they say."""
        line = (
            f"difference {self.difference:+.4g} [{self.lo:+.4g}, {self.hi:+.4g}] "
            f"({self.level:.0%} paired bootstrap over {self.clusters} held-out shapes, challenger better in "
            f"{self.share_better:.0%} of resamples"
        )
        line += f", margin {self.margin:.0%})" if self.margin else ")"
        return line


def paired_difference(
    metric: str,
    y,
    new,
    old,
    clusters=None,
    resamples: int = 1000,
    level: float = 0.95,
    margin: float = 0.0,
    seed: int = 0,
) -> Comparison:
    """The challenger's (``new``) and champion's (``old``) predictions of targets ``y`` on the same rows, compared
    (module docstring). ``clusters``: a label per row resampled together (default: each row its own)."""
    y, new, old = (np.asarray(a, float) for a in (y, new, old))
    if not (len(y) == len(new) == len(old)) or len(y) == 0:
        raise ValueError("paired comparison needs the same rows, at least one, for both models")
    codes = pd.factorize(pd.Series(np.arange(len(y)) if clusters is None else np.asarray(clusters)))[0]
    k = int(codes.max()) + 1
    members = [np.flatnonzero(codes == c) for c in range(k)]
    rng = np.random.default_rng(seed)
    diffs = np.empty(resamples)
    fast = metric == "mape"
    if fast:  # the mean of per-row errors: per-cluster sums and counts, one matrix product per resample batch
        ape_new, ape_old = (np.abs(p - y) / np.abs(y) * 100.0 for p in (new, old))
        sums = np.array([[ape_new[m].sum(), ape_old[m].sum(), len(m)] for m in members])
        draws = rng.integers(0, k, size=(resamples, k))
        weights = np.stack([np.bincount(d, minlength=k) for d in draws])
        totals = weights @ sums
        diffs = totals[:, 0] / totals[:, 2] - totals[:, 1] / totals[:, 2]
    else:
        for b in range(resamples):
            idx = np.concatenate([members[c] for c in rng.integers(0, k, size=k)])
            diffs[b] = _score(metric, y[idx], new[idx]) - _score(metric, y[idx], old[idx])
    v_new, v_old = _score(metric, y, new), _score(metric, y, old)
    lower = LOWER_IS_BETTER.get(metric, True)
    alpha = (1 - level) / 2
    lo, hi = np.quantile(diffs, [alpha, 1 - alpha])
    better = float(np.mean(diffs < 0) if lower else np.mean(diffs > 0))
    return Comparison(metric, v_new, v_old, v_new - v_old, float(lo), float(hi), better, level, len(y), k, margin)
