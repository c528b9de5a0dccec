"""Model-guided auto-tuning: pick the next configurations to measure, measure them, refit, stop on a budget.

:func:`tune` is the loop an auto-tuner or design-space explorer calls: a search space (one feature row per
candidate configuration), a ``measure`` function (indices -> runtimes in ms; the real kernel, or a cache replay),
a model factory (any :class:`~models.base.CostModel` that fits positive runtimes), a budget of measurements and
a batch size. Each round it fits a small bootstrap ensemble (:class:`BootstrapEnsemble`) on everything measured
so far and picks the next batch by (``thompson`` is the default: the most robust in ``benchmarks/tuning_sim.py``)

* ``ei``: expected improvement over the best runtime measured so far, in log space, with a per-candidate
  predictive spread from the ensemble calibrated by split conformal on the out-of-bag residuals (normalised
  "jackknife+-after-bootstrap" scores, Kim, Xu & Barber, NeurIPS 2020; Lei et al., JASA 2018: the
  ``level`` interval is mean +- q * spread, and the Gaussian sigma is that half-width / z_level);
* ``thompson``: bootstrap Thompson sampling (Eckles & Kaptein, 2014): each member of the bootstrap ensemble is a
  draw from an approximate posterior; slot j of a batch takes the best not yet chosen candidate of member
  j mod n_models;
* ``greedy``: the lowest predicted runtimes;
* ``random``: uniform random search through the same loop (the baseline).

The first batch has no target measurements to learn from: it is random, or, if ``prior`` scores are given
(lower = more promising, e.g. a model trained on other GPUs: :func:`transfer_prior`), half the prior's best
candidates and half random ones. The result (:class:`TuneResult`) is the whole history in measurement order.

A user's space (``data.tuning.Space``: a space file with a measure command, or a replayed Kernel Tuner cache; what
``costmodel tune`` and ``python -m pipelines.tune`` run): :func:`run_tune` tunes it on its tunables alone, the
budget a count or a fraction of the space (:func:`budget_count`), the first batch optionally ranked by a model
fitted on measurements elsewhere (:func:`prior_scores`); its :class:`TuneRun` carries the history with the
configurations, the best one and a summary.

Simulation (the measure function is a recorded exhaustive cache): :class:`CacheSpace` builds the space of one
kernel on one GPU from schema rows (``data.importers.kerneltuner``) with the tuning features of
``features.config`` (tunables, kernel structure, spec-relative occupancy / waves, and what the other GPUs measured
for the same configurations), and :func:`kernel_tuner_run` replays the same cache through Kernel Tuner's own
strategies in its simulation mode (``kernel_tuner.tune_cache``), so the comparison uses their implementation.
"""

from __future__ import annotations

import gzip
import json
import math
import numbers
import random
import shutil
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import norm

from data.hardware import HardwareRegistry
from data.tuning import Space, plain
from features.config import reference_runtime_features, tunable_features, tuning_features

STRATEGIES = ("ei", "thompson", "greedy", "random")


def default_model_factory(seed: int = 0, base_columns: str | None = None):
    """A small XGBoost regressor on log runtime (``models.tree.XGBoostModel``), one thread."""
    from models.tree import XGBoostModel

    return XGBoostModel(
        n_estimators=200,
        learning_rate=0.1,
        max_depth=6,
        subsample=0.8,
        colsample_bytree=0.8,
        random_state=seed,
        n_jobs=1,
        base_columns=base_columns,
    )


def transfer_model_factory(seed: int = 0):
    """For spaces with a ``prior_base`` column (:class:`CacheSpace` with transfer): even seeds learn a factor over
    the prior (``base_columns="prior_base"``: with few measurements they rank as the prior does), odd seeds learn
    from the features alone. In a :class:`BootstrapEnsemble` half the members trust the other GPUs and half do
    not; with Thompson sampling each member picks its own share of a batch, so when the prior misleads the
    members that ignore it keep exploring (on the A100 convolution cache Thompson recovered in every seed, expected
    improvement over the same ensemble in none: docs/search.md)."""
    return default_model_factory(seed, "prior_base" if seed % 2 == 0 else None)


class BootstrapEnsemble:
    """``n_models`` models from ``model_factory(seed)``, each fitted on a bootstrap resample of the measured rows.

    ``predict(X)`` returns, in log-runtime space, the ensemble mean and a calibrated Gaussian sigma per row:
    the members' spread (+ ``floor``) times the conformal multiplier ``q_`` (the ``level`` quantile of
    |log y - out-of-bag mean| / spread over the measured rows) divided by the normal quantile of ``level``.
    """

    def __init__(
        self,
        model_factory: Callable = default_model_factory,
        n_models: int = 4,
        level: float = 0.9,
        floor: float = 0.005,
        seed: int = 0,
    ):
        self.model_factory, self.n_models, self.level, self.floor, self.seed = (
            model_factory,
            n_models,
            level,
            floor,
            seed,
        )

    def fit(self, X: pd.DataFrame, runtime_ms) -> BootstrapEnsemble:
        y = np.asarray(runtime_ms, float)
        n = len(y)
        if n < 2:
            raise ValueError(f"the ensemble needs at least 2 measured configurations, got {n}")
        rng = np.random.default_rng(self.seed)
        self.members_, oob = [], []
        for b in range(self.n_models):
            rows = rng.integers(0, n, n)
            self.members_.append(self.model_factory(self.seed * 1000 + b).fit(X.iloc[rows], y[rows]))
            out = np.ones(n, bool)
            out[rows] = False
            oob.append(out)
        logp = self.member_log(X)
        oob = np.array(oob)
        with np.errstate(invalid="ignore"):
            oob_mean = np.where(oob.any(0), (logp * oob).sum(0) / np.maximum(oob.sum(0), 1), np.nan)
        spread = logp.std(0) + self.floor
        scores = np.abs(np.log(y) - oob_mean) / spread
        scores = np.sort(scores[np.isfinite(scores)])
        if len(scores) == 0:
            self.q_ = float(norm.ppf(0.5 + self.level / 2))  # no out-of-bag row: the plain Gaussian multiplier
        else:
            k = min(len(scores), int(np.ceil((len(scores) + 1) * self.level - 1e-9)))
            self.q_ = float(scores[k - 1])
        return self

    def member_log(self, X: pd.DataFrame) -> np.ndarray:
        """Log runtime predicted by each member, shape (n_models, rows)."""
        return np.log(np.maximum(np.array([m.predict(X) for m in self.members_], float), 1e-30))

    def moments(self, logp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mean, calibrated Gaussian sigma) per row from the members' log predictions (:meth:`member_log`)."""
        half = self.q_ * (logp.std(0) + self.floor)
        return logp.mean(0), half / norm.ppf(0.5 + self.level / 2)

    def predict(self, X: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """(mean log runtime, Gaussian sigma of log runtime) per row."""
        return self.moments(self.member_log(X))

    def interval(self, X: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(prediction, lo, hi) in ms: the ``level`` conformal interval exp(mean -+ q * spread)."""
        logp = self.member_log(X)
        mean, half = logp.mean(0), self.q_ * (logp.std(0) + self.floor)
        return np.exp(mean), np.exp(mean - half), np.exp(mean + half)


def expected_improvement(mean, sigma, best) -> np.ndarray:
    """EI of a minimisation: E[max(best - Y, 0)] for Y ~ N(mean, sigma^2) (all in log-runtime space)."""
    mean, sigma = np.asarray(mean, float), np.maximum(np.asarray(sigma, float), 1e-12)
    z = (best - mean) / sigma
    return sigma * (z * norm.cdf(z) + norm.pdf(z))


@dataclass
class TuneResult:
    """Every measurement of a tuning run in order: ``step`` (1-based measurement count), ``batch``, ``index``
    (row of the space), ``runtime_ms`` (NaN = the configuration failed), ``predicted_ms`` (NaN where no model
    had been fitted yet), ``reason`` (random / prior / the strategy)."""

    history: pd.DataFrame
    strategy: str
    seed: int
    extra: dict = field(default_factory=dict)

    @property
    def best_index(self) -> int:
        return int(self.history.loc[self.history["runtime_ms"].idxmin(), "index"])

    @property
    def best_runtime_ms(self) -> float:
        return float(self.history["runtime_ms"].min())

    def measurements_to_within(self, best_ms: float, tolerance: float) -> float:
        return measurements_to_within(self.history["runtime_ms"].to_numpy(float), best_ms, tolerance)


def measurements_to_within(runtimes_in_order, best_ms: float, tolerance: float) -> float:
    """Measurements until one is within ``tolerance`` (0.01 = 1 %) of ``best_ms``; ``inf`` if none is."""
    t = np.asarray(runtimes_in_order, float)
    hit = np.flatnonzero(np.nan_to_num(t, nan=np.inf) <= best_ms * (1 + tolerance) * (1 + 1e-12))
    return float(hit[0] + 1) if len(hit) else float("inf")


def _pick(rng, candidates: np.ndarray, k: int) -> np.ndarray:
    return rng.choice(candidates, size=min(k, len(candidates)), replace=False)


def tune(
    space: pd.DataFrame,
    measure: Callable[[np.ndarray], np.ndarray],
    budget: int,
    batch_size: int = 32,
    strategy: str = "thompson",
    seed: int = 0,
    model_factory: Callable = default_model_factory,
    prior=None,
    n_models: int = 4,
    level: float = 0.9,
    min_fit: int = 8,
) -> TuneResult:
    """Tune over ``space`` (one feature row per candidate) with at most ``budget`` calls' worth of measurements.

    ``measure(indices)`` gets positions into ``space`` and returns their runtimes in ms (NaN / inf / <= 0 = the
    configuration failed: recorded, never fitted, never picked again). ``prior``: optional scores per candidate
    (lower = more promising) that seed the first batch. ``model_factory(seed)`` returns an unfitted
    :class:`~models.base.CostModel`. Models are fitted once ``min_fit`` configurations have succeeded.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown tuning strategy {strategy!r} (choose from {', '.join(STRATEGIES)})")
    if not isinstance(space, pd.DataFrame) or len(space) == 0:
        raise ValueError("space must be a non-empty DataFrame of candidate features")
    if budget < 1 or batch_size < 1:
        raise ValueError(f"budget ({budget}) and batch_size ({batch_size}) must be >= 1")
    if prior is not None and len(prior) != len(space):
        raise ValueError(f"prior has {len(prior)} scores for {len(space)} candidates")
    n = len(space)
    budget = min(int(budget), n)
    rng = np.random.default_rng(seed)
    runtime = np.full(n, np.nan)
    measured = np.zeros(n, bool)
    records: list[pd.DataFrame] = []
    batch = 0
    while measured.sum() < budget:
        k = min(batch_size, budget - int(measured.sum()))
        free = np.flatnonzero(~measured)
        ok = measured & np.isfinite(runtime)
        pred = np.full(k, np.nan)
        if strategy == "random":
            idx, reason = _pick(rng, free, k), "random"
        elif ok.sum() < min_fit:
            if prior is not None and batch == 0:
                p = np.asarray(prior, float)[free]
                top = free[np.argsort(np.nan_to_num(p, nan=np.inf), kind="stable")[: (k + 1) // 2]]
                rest = _pick(rng, np.setdiff1d(free, top), k - len(top))
                idx, reason = np.concatenate([top, rest]), "prior"
            else:
                idx, reason = _pick(rng, free, k), "random"
        else:
            ens = BootstrapEnsemble(model_factory, n_models, level, seed=seed * 7919 + batch)
            ens.fit(space.iloc[np.flatnonzero(ok)], runtime[ok])
            members = ens.member_log(space.iloc[free])
            mean, sigma = ens.moments(members)
            if strategy == "greedy":
                order = np.argsort(mean, kind="stable")[:k]
            elif strategy == "ei":
                order = np.argsort(-expected_improvement(mean, sigma, np.log(np.nanmin(runtime[ok]))), kind="stable")[
                    :k
                ]
            else:  # thompson: slot j takes the best not yet chosen of bootstrap member j mod n_models
                chosen: list[int] = []
                taken = np.zeros(len(free), bool)
                for j in range(k):
                    draw = np.where(taken, np.inf, members[j % len(members)])
                    pick = int(np.argmin(draw))
                    chosen.append(pick)
                    taken[pick] = True
                order = np.array(chosen)
            idx, reason, pred = free[order], strategy, np.exp(mean[order])
        idx = np.asarray(idx, int)
        y = np.asarray(measure(idx), float).reshape(-1)
        if len(y) != len(idx):
            raise ValueError(f"measure returned {len(y)} runtimes for {len(idx)} configurations")
        y = np.where(np.isfinite(y) & (y > 0), y, np.nan)
        measured[idx], runtime[idx] = True, y
        records.append(
            pd.DataFrame({"batch": batch, "index": idx, "runtime_ms": y, "predicted_ms": pred, "reason": reason})
        )
        batch += 1
    history = pd.concat(records, ignore_index=True)
    history.insert(0, "step", np.arange(1, len(history) + 1))
    return TuneResult(history, strategy, seed)


# --- a space's run: budget, prior, summary -------------------------------------------------------------------


def budget_count(budget: float | int, n: int) -> int:
    """How many configurations a budget measures, at most the space: an integer is a count; a number written with a
    decimal point (a float) up to 1.0 is a fraction of the space (``1.0``: all of it), above 1 a count that must be
    whole (``50.0`` = 50)."""
    if isinstance(budget, bool) or not isinstance(budget, numbers.Real) or not budget > 0:
        raise ValueError(f"budget must be > 0 (a count, or a fraction of the space up to 1.0), got {budget!r}")
    if isinstance(budget, numbers.Integral):
        return min(n, int(budget))
    if budget <= 1:
        return min(n, max(1, math.ceil(float(budget) * n - 1e-9)))
    if not float(budget).is_integer():
        raise ValueError(f"budget {budget}: a count is a whole number (a fraction of the space is at most 1.0)")
    return min(n, int(budget))


def prior_scores(prior: pd.DataFrame, space: Space, seed: int = 0, where: str = "prior") -> np.ndarray:
    """Scores per candidate of ``space`` (lower = more promising) from measurements elsewhere (``prior``:
    ``data.tuning.read_prior``; ``where`` names it in errors): a model fitted on the prior's runtimes relative to
    each ``hardware``'s best (one group if no ``hardware`` column), on the tunables
    (``features.config.tunable_features``)."""
    missing = [c for c in [*space.configs.columns, "runtime_ms"] if c not in prior.columns]
    if missing:
        raise ValueError(f"prior {where}: column(s) missing: {', '.join(missing)}")
    runtime = pd.to_numeric(prior["runtime_ms"], errors="coerce")
    prior = prior[np.isfinite(runtime) & (runtime > 0)].reset_index(drop=True)
    if len(prior) < 2:
        raise ValueError(f"prior {where}: fewer than 2 rows with a positive runtime_ms")
    groups = prior["hardware"] if "hardware" in prior.columns else pd.Series(0, index=prior.index)
    y = prior["runtime_ms"].astype(float)
    rel = (y / y.groupby(groups).transform("min")).to_numpy(float)
    both = tunable_features(pd.concat([space.configs, prior[list(space.configs.columns)]], ignore_index=True))
    X_space, X_prior = both.iloc[: len(space.configs)], both.iloc[len(space.configs) :]
    model = default_model_factory(seed).fit(X_prior.reset_index(drop=True), rel)
    return np.asarray(model.predict(X_space), float)


@dataclass
class TuneRun:
    """A finished run over a :class:`data.tuning.Space`: the history (configs + step, batch, runtime_ms,
    predicted_ms, reason, status), the best configuration and the summary metrics."""

    history: pd.DataFrame
    best_config: dict
    summary: dict


def run_tune(
    space: Space,
    measure: Callable | None = None,
    budget: float = 50,
    batch: int = 5,
    strategy: str = "thompson",
    seed: int = 0,
    prior: np.ndarray | None = None,
    n_models: int = 4,
    min_fit: int = 8,
) -> TuneRun:
    """Tune ``space`` on its tunables (``features.config.tunable_features``) with ``measure`` (default: replay
    ``space.recorded_ms``) for :func:`budget_count` measurements; a replay's summary says how far the best found is
    from the best recorded."""
    n = len(space.configs)
    count = budget_count(budget, n)
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    if measure is None:
        if space.recorded_ms is None:
            raise ValueError("no measure command and no recorded runtimes to replay")
        recorded = space.recorded_ms

        def measure(indices):
            return recorded[np.asarray(indices, int)]

    result = tune(
        tunable_features(space.configs),
        measure,
        count,
        batch,
        strategy,
        seed,
        prior=prior,
        n_models=n_models,
        min_fit=min_fit,
    )
    h = result.history
    configs = space.configs.iloc[h["index"].to_numpy()].reset_index(drop=True)
    history = pd.concat([h, configs], axis=1)
    history["status"] = np.where(history["runtime_ms"].notna(), "ok", "failed")
    ok = history["runtime_ms"].notna()
    summary = {"space_size": n, "budget": count, "measured": len(history), "failed": int((~ok).sum())}
    if not ok.any():
        return TuneRun(history, {}, summary)
    best = history.loc[history["runtime_ms"].idxmin()]
    summary["best_ms"] = float(best["runtime_ms"])
    if space.recorded_ms is not None and np.isfinite(space.recorded_ms).any():
        best_recorded = float(np.nanmin(space.recorded_ms))
        summary.update(
            best_recorded_ms=best_recorded,
            ratio_to_best=summary["best_ms"] / best_recorded,
            measurements_to_within_2pct=result.measurements_to_within(best_recorded, 0.02),
        )
    return TuneRun(history, {c: plain(best[c]) for c in space.configs.columns}, summary)


# --- simulation on exhaustive caches -------------------------------------------------------------------------


def transfer_prior(
    target: pd.DataFrame,
    reference: pd.DataFrame,
    registry: HardwareRegistry,
    model_factory: Callable = default_model_factory,
) -> np.ndarray:
    """Runtime of each ``target`` configuration relative to the target GPU's best, as predicted by one model
    fitted on the ``reference`` GPUs' rows (target = runtime / that GPU's fastest) with the tunables, the
    kernel structure and the spec-relative features of ``features.config`` (no GPU identity): what the other
    GPUs say about a GPU with these limits before any of its configurations has run. Lower = more promising."""
    ref = reference[reference["runtime_ms"].notna()].reset_index(drop=True)
    rel = ref["runtime_ms"].to_numpy(float) / ref.groupby("hardware")["runtime_ms"].transform("min").to_numpy(float)
    X_ref = tuning_features(ref, registry)
    X_tgt = tuning_features(target.reset_index(drop=True), registry)
    model = model_factory(0).fit(X_ref, rel)
    return np.asarray(model.predict(X_tgt[X_ref.columns]), float)


@dataclass
class CacheSpace:
    """One kernel on one GPU from an exhaustive cache: the candidates (successful configurations), their tuning
    features, and the recorded runtimes that :meth:`measure` replays."""

    rows: pd.DataFrame
    features: pd.DataFrame
    runtime_ms: np.ndarray
    prior: np.ndarray | None = None

    @property
    def model_factory(self) -> Callable:
        """:func:`transfer_model_factory` if the space carries a prior, else :func:`default_model_factory`."""
        return transfer_model_factory if "prior_base" in self.features.columns else default_model_factory

    def measure(self, indices) -> np.ndarray:
        return self.runtime_ms[np.asarray(indices, int)]

    @property
    def best_ms(self) -> float:
        return float(np.min(self.runtime_ms))

    @classmethod
    def from_rows(
        cls,
        rows: pd.DataFrame,
        hardware: str,
        registry: HardwareRegistry,
        op: str | None = None,
        transfer: bool = True,
        prior_factory: Callable | None = default_model_factory,
    ) -> CacheSpace:
        """The space of ``hardware`` (and ``op``, if ``rows`` hold several kernels) from schema rows.

        ``transfer``: add what the other GPUs running the same kernel measured (``ref_*`` columns,
        ``features.config.reference_runtime_features``), the prediction of :func:`transfer_prior` from their
        rows (``prior_rel``; skipped if ``prior_factory`` is None) and ``prior_base``: the geometric mean of
        the other GPUs' relative runtimes of the configuration (``exp(ref_mean)``) where any measured it, else
        ``prior_rel``, else 1. ``prior_base`` ranks the first batch and is the base of
        :func:`transfer_model_factory`.
        """
        ok = rows[(rows["status"] == "ok") & rows["runtime_ms"].notna()]
        mine = ok[ok["hardware"] == hardware]
        if op is not None:
            mine = mine[mine["op"] == op]
        if mine.empty:
            raise ValueError(f"no successful configurations of {op or 'any kernel'} on {hardware!r}")
        if mine["op"].nunique() > 1:
            raise ValueError(f"{hardware!r} runs several kernels ({sorted(mine['op'].unique())}): pass op=")
        kernel = mine["op"].iloc[0]
        mine = mine.reset_index(drop=True)
        X = tuning_features(mine, registry)
        prior = None
        others = ok[(ok["op"] == kernel) & (ok["hardware"] != hardware)]
        if transfer and not others.empty:
            X = pd.concat([X, reference_runtime_features(mine, others).reset_index(drop=True)], axis=1)
            fallback = np.ones(len(X))
            if prior_factory is not None:
                X["prior_rel"] = fallback = transfer_prior(mine, others, registry, prior_factory)
            ref = X["ref_mean"].to_numpy(float)
            prior = np.where(np.isfinite(ref), np.exp(np.nan_to_num(ref)), fallback)
            X["prior_base"] = prior
        return cls(mine, X, mine["runtime_ms"].to_numpy(float), prior)


def decompress_cache(path: str | Path, workdir: str | Path) -> Path:
    """A ``.json.gz`` Kernel Tuner cache as a plain ``.json`` under ``workdir`` (Kernel Tuner reads only those)."""
    path, workdir = Path(path), Path(workdir)
    if path.suffix != ".gz":
        return path
    out = workdir / (path.parent.name + "_" + path.name[:-3])
    if not out.exists():
        workdir.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".partial")
        with gzip.open(path, "rb") as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst)
        tmp.replace(out)
    return out


def kernel_tuner_run(
    cache: str | Path,
    strategy: str,
    budget: int,
    seed: int = 0,
    workdir: str | Path | None = None,
    strategy_options: dict | None = None,
) -> np.ndarray:
    """Replay ``cache`` through Kernel Tuner's ``strategy`` in simulation mode (``kernel_tuner.tune_cache``: the
    space is the cache's successful configurations) for ``budget`` unique measurements; returns the runtimes (ms)
    in the order the strategy first measured each configuration. Strategies draw from Python's and NumPy's global
    generators, so both are seeded here (Kernel Tuner's own ``seed`` argument is not used by them)."""
    from kernel_tuner import tune_cache

    workdir = Path(workdir or tempfile.gettempdir()) / "kernel_tuner_caches"
    path = decompress_cache(cache, workdir)
    random.seed(seed)
    np.random.seed(seed)
    options = {"max_fevals": int(budget), **(strategy_options or {})}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results, _ = tune_cache(str(path), strategy=strategy, strategy_options=options, quiet=True)
    with open(path) as fh:
        keys = json.load(fh)["tune_params_keys"]
    seen, order = set(), []
    for r in results:
        key = tuple(r.get(k) for k in keys)
        if key in seen:
            continue
        seen.add(key)
        t = r.get("time")
        order.append(float(t) if isinstance(t, (int, float)) and "__error__" not in r else np.nan)
    return np.array(order[: int(budget)], float)


def tune_on_rows(
    rows: pd.DataFrame,
    hardware: str,
    registry: HardwareRegistry,
    budget: float,
    batch_size: int | None = None,
    strategy: str = "thompson",
    seed: int = 0,
    op: str | None = None,
    transfer: bool = True,
    rounds: int = 15,
) -> TuneResult:
    """A whole simulated tuning run on ``hardware``'s recorded configurations in one call, with the kernel-structure
    and spec-relative features (``costmodel tune --cache``, ``pipelines.tune``, uses the tunables alone):
    :meth:`CacheSpace.from_rows` (the other GPUs in ``rows`` are the transfer data
    if ``transfer``), then :func:`tune`. ``budget`` < 1 is a fraction of the space, else a count; the batch is
    budget / ``rounds`` unless given. ``extra`` of the result holds the space size, the budget and the best
    recorded runtime."""
    if not budget > 0:
        raise ValueError(f"budget must be > 0 (a fraction < 1 or a count), got {budget}")
    space = CacheSpace.from_rows(rows, hardware, registry, op=op, transfer=transfer)
    n = len(space.runtime_ms)
    count = int(np.ceil(budget * n)) if budget < 1 else int(budget)
    batch = batch_size or max(1, int(np.ceil(count / rounds)))
    result = tune(space.features, space.measure, count, batch, strategy, seed, space.model_factory, prior=space.prior)
    result.extra.update(space_size=n, budget=count, best_recorded_ms=space.best_ms)
    return result
