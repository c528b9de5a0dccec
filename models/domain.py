"""Domain of validity: is a prediction inside what the model was trained on, and how far outside?

A physics-first model still moves with the specs and the shape outside its training data, but its learned
efficiency was only ever checked inside it. So every prediction carries

* ``in_domain`` (bool): every dimensionless feature inside its training range, every category (op, math mode)
  seen in training and seen together (an op in a math mode), the hardware's spec position (log2 peak FLOP/s of the math
  mode, float32 peak, bandwidth, SMs, L2, float32 ridge point) inside the span of the training hardware, and the
  workload's size (log2 FLOPs, bytes) inside the training range;
* ``domain_distance`` (float, 0 inside): the sum of how far each is outside, in comparable units: a continuous
  feature's excess over its training range in units of max(its training std, 1) (features are log2 counts or
  fractions: one octave / the whole [0, 1] range at least), 1 per unseen category, and the
  hardware's and the size's excess in octaves (1 = twice the largest bandwidth / FLOP/s / SMs / L2 / FLOPs seen,
  or half the smallest), +1 for categories seen only apart;
* ``domain_reason``: the largest contributor, e.g. ``hw_log2_bandwidth +1.63`` (empty inside);
* ``hardware_seen``: the hardware's spec position equals one of the training hardware's (rows of it were fitted).

:func:`widen` turns these into the interval half-width (log space, ``models.conformal``): ``q = q_seen`` for
hardware seen in training, ``q_unseen`` for new hardware (each op family's own), plus, outside, the rise of a curve
in ``domain_distance``. All of it is calibrated on held-out folds by :func:`calibrate_widening` (held-out shapes,
leave-one-hardware-out, each math mode, held-out largest shapes), never set by hand, so the coverage outside is
measured, not assumed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from models.conformal import min_rows

HW_ATOL = 2e-6  # log2 spec positions closer than this are the same hardware (they are stored rounded to 1e-6)


def distinct_rows(M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(distinct, inverse)`` of the rows of a 2-D array, as ``np.unique(M, axis=0, return_inverse=True)`` gives
    them (sorted lexicographically), by one lexicographic sort: the same arrays 11-28x faster on the few distinct rows
    of a long frame (GPUs, category combinations; 2 100-50 000 rows here)."""
    if len(M) == 0:
        return M[:0], np.zeros(0, int)
    order = np.lexsort(M.T[::-1])
    first = np.ones(len(M), bool)
    first[1:] = (M[order[1:]] != M[order[:-1]]).any(axis=1)
    inverse = np.empty(len(M), int)
    inverse[order] = np.cumsum(first) - 1
    return M[order[first]], inverse


class Domain:
    """Training envelope over ``features`` (continuous and 0/1 columns), the ``hardware`` position columns and the
    workload ``size`` columns (log2, excess in octaves); ``identity`` (a subset of ``hardware``, the same on every
    row of one GPU) decides ``hardware_seen``."""

    def __init__(
        self, features: Sequence[str], hardware: Sequence[str], identity: Sequence[str], size: Sequence[str] = ()
    ):
        self.features = list(features)
        self.hardware = list(hardware)
        self.identity = list(identity)
        self.size = list(size)

    def fit(self, X: pd.DataFrame) -> Domain:
        F = X[self.features].to_numpy(float)
        binary = np.all((F == 0) | (F == 1), axis=0)
        self.categorical_ = [f for f, b in zip(self.features, binary) if b]
        never = ~np.any(F == 1, axis=0)
        self.unseen_ = [f for f, b, n in zip(self.features, binary, never) if b and n]  # never 1 in training
        self.combinations_ = sorted(set(self._signatures(X)))  # the categories seen together (op x math mode)
        cont = [f for f, b in zip(self.features, binary) if not b]
        C = X[cont].to_numpy(float)
        self.continuous_ = {
            f: (float(lo), float(hi), float(max(sd, 1.0)))
            for f, lo, hi, sd in zip(cont, C.min(axis=0), C.max(axis=0), C.std(axis=0))
        }
        H = X[self.hardware + self.size].to_numpy(float)
        self.hardware_span_ = {
            h: (float(H[:, j].min()), float(H[:, j].max())) for j, h in enumerate(self.hardware + self.size)
        }
        self.hardware_seen_ = distinct_rows(np.round(X[self.identity].to_numpy(float), 6))[0].tolist()
        return self

    def add_hardware(self, X: pd.DataFrame) -> Domain:
        """Mark the hardware positions of ``X`` as seen (after a few-shot calibration on them); spans widen."""
        H = X[self.hardware].to_numpy(float)
        self.hardware_span_.update(
            {
                h: (min(lo, float(H[:, j].min())), max(hi, float(H[:, j].max())))
                for j, (h, (lo, hi)) in enumerate((h, self.hardware_span_[h]) for h in self.hardware)
            }
        )
        new = np.round(X[self.identity].to_numpy(float), 6)
        seen = np.asarray(self.hardware_seen_, float).reshape(-1, len(self.identity))
        self.hardware_seen_ = distinct_rows(np.vstack([seen, new]))[0].tolist()
        return self

    def _signatures(self, X: pd.DataFrame) -> list[str]:
        C = X[self.categorical_].to_numpy(float) == 1
        distinct, inverse = distinct_rows(C)  # a few combinations: joined once each, not once per row
        names = np.asarray(self.categorical_, dtype=object)
        return np.array(["+".join(names[row]) for row in distinct], dtype=object)[inverse].tolist()

    def is_seen(self, X: pd.DataFrame) -> np.ndarray:
        H = X[self.identity].to_numpy(float)
        seen = np.asarray(self.hardware_seen_, float).reshape(-1, len(self.identity))
        return np.any(np.all(np.abs(H[:, None, :] - seen[None, :, :]) < HW_ATOL, axis=2), axis=1)

    def frame(self, X: pd.DataFrame) -> pd.DataFrame:
        """``in_domain``, ``domain_distance``, ``domain_reason``, ``hardware_seen`` per row of ``X``."""
        parts: dict[str, np.ndarray] = {}
        for f, (lo, hi, sd) in self.continuous_.items():
            x = X[f].to_numpy(float)
            parts[f] = np.maximum(0.0, np.maximum(lo - x, x - hi)) / sd
        for f in self.unseen_:
            parts[f] = (X[f].to_numpy(float) == 1).astype(float)
        if self.categorical_:  # each category seen, but never together (e.g. a GEMM in a math mode seen only in convs)
            unseen = ~np.isin(self._signatures(X), self.combinations_)
            single = np.column_stack([parts[f] for f in self.unseen_]).max(axis=1) if self.unseen_ else 0.0
            parts["unseen combination"] = (unseen & (single == 0)).astype(float)
        for h, (lo, hi) in self.hardware_span_.items():
            x = X[h].to_numpy(float)
            parts[h] = np.maximum(0.0, np.maximum(lo - x, x - hi))
        names = list(parts)
        P = np.column_stack([parts[n] for n in names]) if names else np.zeros((len(X), 1))
        distance = P.sum(axis=1)
        worst = P.argmax(axis=1)
        reason = [f"{names[j]} +{P[i, j]:.2f}" if distance[i] > 0 else "" for i, j in enumerate(worst)]
        return pd.DataFrame(
            {
                "in_domain": distance == 0,
                "domain_distance": distance,
                "domain_reason": reason,
                "hardware_seen": self.is_seen(X),
            }
        )

    def to_dict(self) -> dict:
        return {
            "features": self.features,
            "hardware": self.hardware,
            "identity": self.identity,
            "size": self.size,
            "categorical": self.categorical_,
            "combinations": self.combinations_,
            "unseen": self.unseen_,
            "continuous": self.continuous_,
            "hardware_seen": self.hardware_seen_,
            "hardware_span": self.hardware_span_,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Domain:
        dom = cls(d["features"], d["hardware"], d["identity"], d.get("size", ()))
        dom.categorical_, dom.unseen_ = list(d["categorical"]), list(d["unseen"])
        dom.combinations_ = list(d.get("combinations", []))
        dom.continuous_ = {k: tuple(v) for k, v in d["continuous"].items()}
        dom.hardware_seen_ = [list(r) for r in d["hardware_seen"]]
        dom.hardware_span_ = {k: tuple(v) for k, v in d["hardware_span"].items()}
        return dom


def conformal(scores, level: float) -> float:
    """The ceil((n + 1) level)-th smallest score (the largest when n is too small): ``models.conformal``'s rule."""
    scores = np.sort(np.asarray(scores, float))
    return float(scores[min(len(scores), math.ceil((len(scores) + 1) * level - 1e-9)) - 1])


def calibrate_widening(scores, distance, hardware_seen, level: float = 0.9, groups=None) -> dict:
    """``q_seen``, ``q_unseen``, the distance curves and ``slope`` of :func:`widen` from held-out fold rows.

    ``scores`` = |log y - log yhat| of rows the fold's model never saw; ``distance`` / ``hardware_seen`` from that
    fold model's :class:`Domain`. ``q_seen`` and ``q_unseen`` are split-conformal quantiles of the in-domain rows of
    seen and of unseen hardware (``q_unseen`` falls back to ``q_seen`` with fewer than ``min_rows(level)`` rows and
    is never below it). Outside (``d > 0``): ``knots`` / ``beyond``, the half-width as a function of the distance
    (:func:`_distance_knots`), pooled and, where the fold rows allow, one for rows of hardware in training
    (``knots_seen``: larger shapes, other dtypes) and one for hardware outside it (``knots_unseen``). ``slope`` (the
    largest conformal quantile of ``max(0, s - q) / d`` over each quarter of the rows outside: the line ``q + slope d``
    of widenings fitted before the curves) is kept for a fit without enough outside rows (a ``q`` per unit of
    distance when no fold row was outside) and reported (docs/decisions/0017-intervals-widened-with-domain-distance.md).

    ``groups`` (per row, e.g. its op family): ``by_group`` holds a ``q_seen`` / ``q_unseen`` per group from its own
    rows (the pooled ones where it has too few; its ``q_unseen`` never below its ``q_seen`` nor the pooled
    ``q_unseen``); the slope and the curves stay sized against the pooled ones. A pooled quantile is marginal over
    the mix of rows: on every GPU of the pack held out in turn, the pooled half-width covered 1.00 of the unseen
    GPUs' elementwise rows and 0.86 of their GEMMs, 0.88 of their convolutions (``extrapolation_b_all``, in-domain
    rows); with each family's own q, 0.93 and 0.91.
    """
    s, d, seen = (np.asarray(a, float) for a in (scores, distance, hardware_seen))
    seen = seen.astype(bool)
    inside = d == 0
    need = min_rows(level)

    def q_of(mask, fallback):
        return conformal(s[mask], level) if mask.sum() >= need else fallback

    q_seen = q_of(inside & seen, conformal(s, level) if len(s) else 0.0)
    q_unseen = max(q_of(inside & ~seen, q_seen), q_seen)
    by_group = {}
    if groups is not None:
        g = np.asarray(groups).astype(str)
        for name in np.unique(g):
            m = g == name
            qs = q_of(inside & seen & m, q_seen)
            # a GPU never measured is off by its own level in every family (the V100 held out: 1.25x on GEMMs and
            # memory-bound rows alike), which a family's few held-out GPUs may not show: never under the pooled q
            qu = max(q_of(inside & ~seen & m, q_unseen), qs, q_unseen)
            by_group[str(name)] = {"q_seen": float(qs), "q_unseen": float(qu)}
    out = d > 0
    knots = None
    curves = {}
    if out.sum() >= need:
        base = np.where(seen[out], q_seen, q_unseen)  # the pooled q: a group's own would size one slope for all
        ratio = np.maximum(0.0, s[out] - base) / d[out]
        # the level in every quarter of the distance, the farthest included: pooled, the many rows just outside (most
        # already inside q) would set a slope that covers nothing far out
        quarter = np.searchsorted(np.quantile(d[out], [0.25, 0.5, 0.75]), d[out], side="right")
        slopes = [conformal(ratio[quarter == b], level) for b in range(4) if (quarter == b).sum() >= need]
        slope = max(slopes) if slopes else conformal(ratio, level)
        knots = _distance_knots(s[out], d[out], q_seen, level, need)
        # a larger shape on a measured GPU and a GPU never measured are other extrapolations: a curve each where the
        # fold rows allow
        for name, m in (("seen", out & seen), ("unseen", out & ~seen)):
            if m.sum() >= 2 * need:
                curves[name] = _distance_knots(s[m], d[m], q_seen if name == "seen" else q_unseen, level, need)
    else:
        slope = q_unseen  # no fold row outside: one more q per unit of distance, a guess marked by n_outside = 0
    widening = {
        "q_seen": float(q_seen),
        "q_unseen": float(q_unseen),
        "slope": slope,
        "level": float(level),
        "n_seen": float((inside & seen).sum()),
        "n_unseen": float((inside & ~seen).sum()),
        "n_outside": float(out.sum()),
    }
    if groups is not None:
        widening["by_group"] = by_group
    if knots is not None:
        widening["knots"], widening["beyond"] = knots
        for name, (k, r) in curves.items():
            widening[f"knots_{name}"], widening[f"beyond_{name}"] = k, r
    return widening


DISTANCE_BINS = 8  # at most this many bins of the outside fold rows' distances, each of min_rows(level) rows or more


def _distance_knots(s: np.ndarray, d: np.ndarray, q0: float, level: float, need: int) -> tuple[list, float]:
    """The half-width outside the domain as a function of the distance, from the outside fold rows (``s`` their
    scores, ``d`` > 0 their distances): up to :data:`DISTANCE_BINS` bins of equal rows by distance, a knot per bin at
    its nearest row's distance with the conformal quantile of its scores (after a first knot ``[0, q0]``), made
    non-decreasing, so every row of a bin is covered at the level; past the last knot the half-width grows at the
    mean rise from 0 to it. A line ``q + slope d`` whose one slope covers every quarter of the distance takes that
    slope from the rows just outside (a small excess over a tiny distance is steep) and applies it far out: trained
    on NeuSight's five GPUs, the H200's rows (distance ~6) got 90% intervals of 11x either side where 1.4x covered
    them (check (a): covered 1.00, mean log half-width 2.4)."""
    bins = int(max(1, min(DISTANCE_BINS, len(d) // need)))
    order = np.argsort(d, kind="stable")
    xs, qs = [0.0], [float(q0)]
    for part in np.array_split(order, bins):
        xs.append(float(d[part].min()))  # from the bin's nearest row on: every row of the bin at its q or more
        qs.append(conformal(s[part], level))
    qs = np.maximum.accumulate(qs)
    xs = np.maximum.accumulate(xs)
    beyond = float(max(qs[-1] - qs[0], 0.0) / xs[-1]) if xs[-1] > 0 else 0.0
    return [[float(x), float(q)] for x, q in zip(xs, qs, strict=True)], beyond


def widen(widening: dict, distance, hardware_seen, groups=None, base=None) -> np.ndarray:
    """Per-row log-space half-width: inside the domain ``q_seen`` or ``q_unseen`` (with ``groups``, each row's
    group's own where the widening has one, ``by_group``); outside, that plus the rise of a distance curve over its
    start: the curve of rows of hardware in training (``knots_seen``: a larger shape, another dtype) or outside it
    (``knots_unseen``), else the pooled one (``knots``), linear between knots and at the rate ``beyond*`` past the
    last (:func:`_distance_knots`). A widening fitted before the curves: ``q + slope * distance``. ``base``: per-row
    ``q`` in place of those (a calibrated GPU's own)."""
    seen = np.asarray(hardware_seen, bool)
    dist = np.asarray(distance, float)
    q_seen = np.full(len(seen), widening["q_seen"])
    q_unseen = np.full(len(seen), widening["q_unseen"])
    by_group = widening.get("by_group") or {}
    if groups is not None and by_group:
        g = np.asarray(groups).astype(str)
        for name, q in by_group.items():
            m = g == name
            q_seen[m], q_unseen[m] = q["q_seen"], q["q_unseen"]
    base = np.where(seen, q_seen, q_unseen) if base is None else np.broadcast_to(np.asarray(base, float), dist.shape)
    knots = widening.get("knots")
    if not knots:
        return base + widening["slope"] * dist
    curve = np.empty(len(dist))
    for name, rows in (("seen", seen), ("unseen", ~seen)):  # a curve each where the fit had the rows, else the pooled
        own = f"knots_{name}" in widening
        xs, qs = np.array(widening[f"knots_{name}"] if own else knots, float).T
        rate = widening[f"beyond_{name}"] if own else widening["beyond"]
        curve[rows] = np.interp(dist[rows], xs, qs) + rate * np.maximum(dist[rows] - xs[-1], 0.0) - qs[0]
    return base + np.where(dist > 0, curve, 0.0)
