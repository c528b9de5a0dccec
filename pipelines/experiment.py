"""The one library path every entry point calls: build -> fit -> calibrate -> evaluate over splits -> log -> register.

An entry point (``pipelines/run.py``, ``power.py``, ``networks.py``) gets its rows (collect, import, measure), then
calls :func:`run_experiment` with its composed config; ``pipelines/evaluate.py`` uses the same pieces
(:func:`model_entries`, :func:`build`, :func:`log_split_runs`) for the public datasets' protocols. What it reads:

* ``target`` (``conf/target/<name>.yaml``, :class:`Target`): the columns a model predicts, the baseline column, how
  kernels combine into a network, which backends measure it, the registry name, the columns that rank models;
* ``model`` (``conf/model/<name>.yaml``, one entry per model): each built by ``hydra.utils.instantiate`` and used
  only through :class:`~models.base.CostModel`; its ``encoder`` sub-config, or the job's ``encoder``
  (``conf/encoder/<name>.yaml``), turns rows into its ``X`` (``features.encoders.build_encoder``; each distinct
  encoder encodes the rows once);
* ``split``: the champion split whose held-out rows (``test``) score the fits that may be registered;
  ``interval``: how those fits are calibrated (``models.conformal.fit_calibrated``: ``split`` = a calibration fold
  of whole ``interval.group`` values out of the training rows, ``cross`` = out-of-fold scores over
  ``interval.folds`` folds of the training shapes, ``loo`` = calibrated on the held-out rows themselves with the
  coverage checked leave-one-out);
* ``eval_splits``: generalisation splits (``models.splits.FOLDS`` names, or the folds an entry point passes), each
  refitted per fold (``eval_trees`` scales tree counts; ``eval_interval``: calibrate inside each fold too) and scored
  on its pooled test rows;
* ``register``: ``models`` (the candidates, null = all), ``select_split`` + ``select_metric`` (what ranks the
  candidates, over the target's ``rank_by`` columns in order) on ``select_scope`` (``all`` rows, or
  ``hardware_mean``: the metric averaged over the held-out hardware), ``name`` / ``alias``: the one champion rule,
  ``pipelines.tracking.register``.

**Metric keys**: ``<split>/<scope>/<metric>``, one scheme for every job. ``split``: ``test`` (the champion split's
held-out rows, the registered fit), an eval split's name, ``calibration`` (the interval's half-widths), or a job's
own (``noise_floor``). ``scope``: ``all``, a hardware id, ``hardware_mean`` (each metric averaged over the hardware
ids, with ``scopes: [hardware]``), ``family:<name>``. ``metric``: ``mape``, ``medape``,
``smape``, ``r2_log``, ``kendall_tau``, ``group_kendall_tau``, ``coverage90``, ``n``, ``folds``, ``fit_seconds``,
... A multi-target run (several ``target.columns``, e.g. the power model) names a target's metric
``<column>.<metric>`` (``test/all/power_w.medape``); a metric over all targets keeps its bare name.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from data.hardware import CONF_DIR, HardwareRegistry
from data.workloads import SHAPE_PARAMS
from features.physics import layout_of, measurement_settings
from models.base import HasDomain, HasIntervals
from models.conformal import fit_calibrated, loo_coverage, take
from models.evaluate import regression_metrics, smape, within_group_kendall
from models.splits import FOLDS, SPLITS
from pipelines import tracking

CONF = Path(__file__).resolve().parent.parent / "conf"
DESCRIBE = ["op", "hardware", "dtype", *SHAPE_PARAMS]  # what a kernel row is (its served input)
NETWORK_DESCRIBE = ["mlir", "hardware", "dtype"]  # what a network row is


class TargetError(ValueError):
    """The configured target cannot be trained on (no collected row has it): one error line, exit 2."""


# --------------------------------------------------------------------------- config
def load_option(group: str, name: str) -> DictConfig:
    """``<group>/<name>.yaml`` from the running Hydra app's config search path (so a ``hydra.searchpath`` entry adds
    options), else from this repository's ``conf/``. For config groups chosen by a list of names at run time
    (``collect.backends``), where Hydra's defaults list cannot compose one entry per name."""
    from hydra.core.hydra_config import HydraConfig

    sources = [("file", str(CONF))]
    if HydraConfig.initialized():
        sources = [(s.schema, s.path) for s in HydraConfig.get().runtime.config_sources if s.schema in ("file", "pkg")]
    for schema, root in sources:
        rel = f"{group}/{name}.yaml"
        if schema == "file" and (Path(root) / rel).exists():
            return OmegaConf.load(Path(root) / rel)
        if schema == "pkg":
            try:
                path = resources.files(root).joinpath(rel)
                if path.is_file():
                    return OmegaConf.create(path.read_text())
            except ModuleNotFoundError:
                continue
    raise ValueError(f"no config {group}/{name}.yaml in the config search path ({', '.join(r for _, r in sources)})")


def output_dir(cfg: DictConfig) -> Path:
    out = Path(cfg.paths.output_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    return out


def hardware_registry(cfg: DictConfig) -> HardwareRegistry:
    return HardwareRegistry.from_dir(cfg.paths.get("hardware_dir") or CONF_DIR)


@dataclass
class Target:
    """A target's facts (``conf/target/<name>.yaml``)."""

    name: str
    columns: list[str]
    combine: dict[str, str]
    register_name: str
    baseline_column: object = None
    measured_by: list[str] = field(default_factory=list)
    rank_by: list[str] = field(default_factory=list)
    network_totals: bool = False
    derived: dict = field(default_factory=dict)

    @classmethod
    def from_config(cls, cfg: DictConfig) -> Target:
        facts = OmegaConf.to_container(cfg, resolve=True)
        facts.setdefault("rank_by", list(facts["columns"]))
        return cls(**facts)

    @property
    def primary(self) -> str:
        """The column the champion rule compares."""
        return self.rank_by[0]

    @property
    def multi(self) -> bool:
        return len(self.columns) > 1

    def key(self, metric: str, column: str | None = None) -> str:
        """A metric's name in this target's runs: bare for one column, ``<column>.<metric>`` for several."""
        return f"{column or self.primary}.{metric}" if self.multi else metric

    def facts(self) -> dict:
        return {k: getattr(self, k) for k in ("name", "columns", "combine", "network_totals", "derived")}


def dataset_digest(rows: pd.DataFrame) -> str:
    """``data.schema.dataset_hash`` of rows that may hold JSON / dict columns (compared as text)."""
    from data.schema import dataset_hash

    return dataset_hash(rows.astype({c: str for c in rows.columns if rows[c].dtype == object}))


def rows_with_target(rows: pd.DataFrame, target: Target, backends) -> tuple[pd.DataFrame, str]:
    """The ok rows that have every target column, and a note on the ok rows dropped for lacking them (per backend).
    No such row is a :class:`TargetError` naming the backends that measure the target."""
    ok = rows["status"] == "ok"
    has = ok & rows[target.columns].notna().all(axis=1)
    if not has.any():
        raise TargetError(
            f"no collected row has target {target.name!r} ({int(ok.sum())} ok rows from backends "
            f"{', '.join(sorted(set(rows['backend'])))}; {target.name} is measured by: "
            f"{', '.join(target.measured_by) or 'see conf/target'}; collect.backends: {list(backends)})"
        )
    dropped = rows[ok & ~has]
    note = (
        ""
        if dropped.empty
        else (
            f"target {target.name}: {int(has.sum())} rows have it; dropped {len(dropped)} ok rows without it ("
            + ", ".join(f"{b}: {n}" for b, n in dropped["backend"].value_counts().sort_index().items())
            + ")"
        )
    )
    return rows[has.to_numpy()].reset_index(drop=True), note


# --------------------------------------------------------------------------- models and encoders
@dataclass
class Entry:
    """One ``model`` entry: its name, its instantiable config (without ``encoder``) and its encoder config."""

    name: str
    config: DictConfig
    encoder: dict

    def params(self) -> dict[str, str]:
        return tracking.flat_params(OmegaConf.create({self.name: self.config}), [self.name])


def model_entries(cfg: DictConfig, overrides: dict | None = None) -> dict[str, Entry]:
    """The job's models: ``cfg.model`` entries with their encoder (their own ``encoder`` or the job's ``encoder``);
    ``overrides[name]`` merges over an entry (e.g. a dataset's hyper-parameters)."""
    out = {}
    default = (
        OmegaConf.to_container(cfg.encoder, resolve=True)
        if cfg.get("encoder")
        else {"_target_": "features.tabular.TabularFeaturizer"}
    )
    for name in cfg.model:
        mcfg = OmegaConf.to_container(cfg.model[name], resolve=True)  # interpolations resolve against the job
        mcfg = OmegaConf.to_container(OmegaConf.merge(mcfg, (overrides or {}).get(name) or {}), resolve=True)
        encoder = mcfg.pop("encoder", None) or default
        out[str(name)] = Entry(str(name), OmegaConf.create(mcfg), encoder)
    return out


def build(entry: Entry, **kwargs):
    """A fresh, unfitted model of ``entry`` (``hydra.utils.instantiate``; ``kwargs`` override its parameters)."""
    return instantiate(entry.config, _convert_="all", **kwargs)


def scale_trees(entry: Entry, fraction: float) -> Entry:
    """``entry`` with ``n_estimators`` (its own or its ``base``'s) x ``fraction`` (at least 10): the eval splits'
    cheaper refits (``eval_trees``)."""
    config = entry.config.copy()
    for node in (config, config.get("base")):
        if node is not None and "n_estimators" in node and fraction != 1:
            node.n_estimators = max(10, round(int(node.n_estimators) * fraction))
    return Entry(entry.name, config, entry.encoder)


class Encodings:
    """Each distinct encoder config builds once and encodes the rows once."""

    def __init__(self, rows: pd.DataFrame, registry: HardwareRegistry, **context):
        self.rows, self.registry, self.context, self._cache = rows, registry, context, {}

    def encoder(self, spec: dict):
        from features.encoders import build_encoder

        return build_encoder(spec, self.registry, **self.context)

    def X(self, spec: dict):
        key = json.dumps(spec, sort_keys=True, default=str)
        if key not in self._cache:
            self._cache[key] = self.encoder(spec).transform(self.rows)
        return self._cache[key]

    def unit(self, spec: dict) -> str:
        from features.encoders import encoder_unit

        return encoder_unit(self.encoder(spec))


# --------------------------------------------------------------------------- metrics
def coverage_key(level: float) -> str:
    return f"coverage{round(level * 100)}"


HARDWARE_MEAN = "hardware_mean"  # the scope of the metrics averaged over the hardware scopes (scopes: [hardware])


def scope_masks(rows: pd.DataFrame, scopes) -> dict[str, np.ndarray]:
    """``all`` and, per entry of ``scopes``, one mask per value: ``hardware`` -> the hardware id, ``family`` ->
    ``family:<name>``."""
    out = {"all": np.ones(len(rows), bool)}
    for scope in scopes or ():
        values = rows[scope].astype(str).to_numpy()
        for v in sorted(set(values)):
            out[v if scope == "hardware" else f"{scope}:{v}"] = values == v
    return out


def score(
    rows: pd.DataFrame, Y, P, lo=None, hi=None, *, target: Target, level: float, scopes=(), loo=False
) -> dict[str, dict[str, float]]:
    """Metrics per scope (:func:`scope_masks`) and target column: ``n``, MAPE, MedAPE, R^2 (log10), Kendall tau,
    SMAPE, Kendall tau within each (op, hardware) group, and interval coverage (given ``lo`` / ``hi``; ``loo``: the
    leave-one-out coverage of the calibration rule on these rows, ``models.conformal.loo_coverage``)."""
    Y, P = (np.asarray(a, float).reshape(len(rows), -1) for a in (Y, P))
    lo, hi = (
        (None, None)
        if lo is None
        else (np.asarray(lo, float).reshape(len(rows), -1), np.asarray(hi, float).reshape(len(rows), -1))
    )
    groups = rows["op"].astype(str).to_numpy() + "@" + rows["hardware"].astype(str).to_numpy()
    out = {}
    for scope, m in scope_masks(rows, scopes).items():
        values = {}
        for j, col in enumerate(target.columns):
            y, p = Y[m, j], P[m, j]
            metrics = regression_metrics(y, p)
            metrics["smape"] = smape(y, p)
            metrics["group_kendall_tau"] = within_group_kendall(groups[m], y, p)
            if loo:
                metrics[coverage_key(level)] = loo_coverage(y, p, level)
            elif lo is not None:
                metrics[coverage_key(level)] = float(np.mean((y >= lo[m, j]) & (y <= hi[m, j])))
            values.update({target.key(k, col): v for k, v in metrics.items()})
        out[scope] = values
    hardware = sorted(set(rows["hardware"].astype(str))) if "hardware" in (scopes or ()) else []
    if len(hardware) > 1:  # each hardware counted once, whatever its row count: the error expected on a GPU held out
        common = [k for k in out[hardware[0]] if all(k in out[h] for h in hardware)]  # a few rows score fewer metrics
        out[HARDWARE_MEAN] = {k: float(np.mean([out[h][k] for h in hardware])) for k in common}
    return out


def flat(split: str, by_scope: dict[str, dict[str, float]]) -> dict[str, float]:
    return {f"{split}/{scope}/{k}": v for scope, values in by_scope.items() for k, v in values.items()}


# --------------------------------------------------------------------------- fits
@dataclass
class Fit:
    """A model's held-out predictions on one split: rows ``index`` (positions into the job's rows), ``pred`` /
    ``lo`` / ``hi`` ``[n, T]``, and for the registered fit the calibrated model."""

    index: np.ndarray
    pred: np.ndarray
    lo: np.ndarray | None = None
    hi: np.ndarray | None = None
    calibrated: object = None
    n_train: int = 0
    seconds: float = 0.0
    folds: int = 1


def floored(fit: Fit, floor: np.ndarray | None, column: int | None) -> Fit:
    """``fit`` with the speed-of-light floor (``models.sol``, one value per job row, NaN: none) under target column
    ``column``'s point and interval, as the served model puts it there (``models.serving``): the held-out scores are
    those of what is served."""
    if floor is None or column is None:
        return fit
    from models.sol import apply_floor

    pred = fit.pred.copy()
    lo = pred.copy() if fit.lo is None else fit.lo.copy()
    hi = pred.copy() if fit.hi is None else fit.hi.copy()
    pred[:, column], lo[:, column], hi[:, column], _ = apply_floor(
        pred[:, column], lo[:, column], hi[:, column], floor[fit.index]
    )
    return dataclasses.replace(fit, pred=pred, lo=None if fit.lo is None else lo, hi=None if fit.hi is None else hi)


def row_floor(rows: pd.DataFrame, registry: HardwareRegistry, target: Target) -> tuple[np.ndarray | None, int | None]:
    """``(floor per row, target column)`` of the speed of light (``models.sol``) where the target predicts a kernel's
    runtime; ``(None, None)`` otherwise, or where the rows are not kernels the closed forms cost."""
    from features.tabular import FeatureError
    from models.serving import FLOORED_COLUMN
    from models.sol import speed_of_light_ms

    if FLOORED_COLUMN not in target.columns or "op" not in rows.columns:
        return None, None
    try:
        return speed_of_light_ms(rows, registry), list(target.columns).index(FLOORED_COLUMN)
    except (FeatureError, KeyError, ValueError):
        return None, None


def _calibrate(make, X, Y, rows: pd.DataFrame, train, interval: DictConfig, level: float):
    """Fit on ``train`` less a calibration fold and calibrate (``interval.method`` split | cross)."""
    by = rows["hardware"].to_numpy()
    Xt, Yt, seed = take(X, train), Y[train], int(interval.seed)
    if interval.method == "split":
        groups = rows[interval.get("group", "shape_id")].to_numpy()[train]
        return fit_calibrated(make, Xt, Yt, groups, float(interval.calibration_size), level, seed, by=by[train])
    if interval.method == "cross":
        folds = [
            (tr, te)
            for _, tr, te in FOLDS["held_out_shapes_kfold"](
                rows.iloc[train].reset_index(drop=True), seed=seed, folds=int(interval.folds)
            )
        ]
        return fit_calibrated(make, Xt, Yt, level=level, by=by[train], folds=folds)
    raise ValueError(f"interval.method must be split, cross or loo, got {interval.method!r}")


def predict_interval(cal, X, groups):
    """``(pred, lo, hi)`` of a calibrated fit: a model with its own intervals (``models.base.HasIntervals``, e.g.
    widened outside its training domain: what it serves) gives them; others the split-conformal half-widths."""
    if isinstance(cal.model, HasIntervals):
        return cal.model.predict_interval(X)
    return cal.predict_interval(X, groups)


def fit_registered(make, X, Y, rows: pd.DataFrame, train, test, interval: DictConfig) -> Fit:
    """The fit that may be registered: trained on the champion split's training rows, calibrated per
    ``interval.method``, predicted on its held-out rows with intervals."""
    level, by, t0 = float(interval.level), rows["hardware"].to_numpy(), time.perf_counter()
    if interval.method == "loo":
        cal = fit_calibrated(make, X, Y, level=level, by=by, calibration=(train, test))
    else:
        cal = _calibrate(make, X, Y, rows, train, interval, level)
    seconds = time.perf_counter() - t0
    pred, lo, hi = predict_interval(cal, take(X, test), by[test])
    shape = (len(test), -1)
    return Fit(test, pred.reshape(shape), lo.reshape(shape), hi.reshape(shape), cal, len(train), seconds)


def pooled(make, X, Y, rows: pd.DataFrame, folds, interval: DictConfig | None = None) -> Fit:
    """Refit per fold (``interval``: calibrated inside the fold's training rows as the registered fit is) and pool
    the folds' test predictions, in fold order."""
    idx, preds, los, his, n_train, t0 = [], [], [], [], [], time.perf_counter()
    for _, tr, te in folds:
        if interval is not None:
            cal = _calibrate(make, X, Y, rows, tr, interval, float(interval.level))
            p, lo, hi = predict_interval(cal, take(X, te), rows["hardware"].to_numpy()[te])
            los.append(lo.reshape(len(te), -1)), his.append(hi.reshape(len(te), -1))
        else:
            p = make().fit(take(X, tr), Y[tr]).predict(take(X, te))
        idx.append(te), preds.append(np.asarray(p, float).reshape(len(te), -1)), n_train.append(len(tr))
    cat = lambda parts: np.concatenate(parts) if parts else None
    return Fit(
        np.concatenate(idx),
        cat(preds),
        cat(los),
        cat(his),
        None,
        int(np.mean(n_train)),
        time.perf_counter() - t0,
        len(folds),
    )


def eval_folds(cfg: DictConfig, rows: pd.DataFrame, note=print) -> dict[str, list]:
    """The folds of each ``cfg.eval_splits`` name (``models.splits.FOLDS``, options from ``cfg.split``); a split that
    cannot be formed on these rows is skipped with a note."""
    options = {k: v for k, v in OmegaConf.to_container(cfg.split, resolve=True).items() if k != "name"}
    out = {}
    for name in cfg.get("eval_splits") or []:
        if name not in FOLDS:
            raise ValueError(f"unknown eval split {name!r}; known: {', '.join(FOLDS)}")
        try:
            out[name] = list(FOLDS[name](rows, **options))
        except ValueError as exc:  # e.g. leave_one_hardware_out on one hardware (peak_mem_bytes: the CPU only)
            note(f"eval split {name} skipped on these rows: {exc}")
    return out


def champion_split(cfg: DictConfig, rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    name = cfg.split.name
    if name not in SPLITS:
        raise ValueError(f"unknown split {name!r}; known: {', '.join(SPLITS)}")
    return SPLITS[name](rows, test_size=float(cfg.split.test_size), seed=int(cfg.split.seed))


# --------------------------------------------------------------------------- the experiment
@dataclass
class Result:
    """One model's outcome: flat metrics (``<split>/<scope>/<metric>``), fits per split, its logged model."""

    name: str
    metrics: dict[str, float] = field(default_factory=dict)
    fits: dict[str, Fit] = field(default_factory=dict)
    model_uri: str | None = None
    run_id: str | None = None
    test_frame: pd.DataFrame | None = None
    train_keys: np.ndarray | None = None  # the registered fit's training rows as served (tracking.row_keys)
    tables: dict = field(default_factory=dict)  # a job's own tables (``extras``), for its report


@dataclass
class Experiment:
    results: dict[str, Result]
    best: str | None
    decision: object
    target: Target
    split_id: dict
    tracking_uri: str
    eval_splits: list[str]
    reused: str | None

    def objective(self) -> float:
        """The best model's ranking value (what an Optuna sweep minimises)."""
        return self.results[self.best].metrics[self.rank_keys[0]]

    rank_keys: list[str] = field(default_factory=list)


def run_experiment(
    cfg: DictConfig,
    rows: pd.DataFrame,
    registry: HardwareRegistry,
    target: Target,
    *,
    dataset: dict | None = None,
    folds: dict[str, list] | None = None,
    params: dict | None = None,
    tags: dict | None = None,
    extras=None,
    context: dict | None = None,
    note=print,
) -> Experiment:
    """Build every model of ``cfg.model``, fit the registered candidates on the champion split (calibrated), score
    every model on ``folds`` (default: :func:`eval_folds`), log one MLflow run per model, register the best
    candidate under the one champion rule. Returns the :class:`Experiment`.

    ``dataset``: ``{"rows", "source", "digest"}`` logged as the runs' input (default: ``rows``); ``params`` / ``tags``:
    the job's own, logged on every run; ``extras(name, result, directory) -> (metrics, files)``: a job's own
    artifacts; ``context``: passed to encoders that take it (``layers=``)."""
    from data.schema import dataset_hash

    out = output_dir(cfg)
    level = float(cfg.interval.level)
    entries = model_entries(cfg)
    encodings = Encodings(rows, registry, **(context or {}))
    Y = rows[target.columns].to_numpy(float)  # [n, T] for the metrics
    Yfit = Y if target.multi else Y[:, 0]  # what a model fits: [n] for one target
    candidates = list(entries) if cfg.register.get("models") is None else list(cfg.register.models)
    unknown = [m for m in candidates if m not in entries]
    if unknown:
        raise ValueError(f"register.models: {', '.join(unknown)} not among the models ({', '.join(entries)})")
    train, test = champion_split(cfg, rows) if candidates else (np.arange(len(rows)), np.arange(0))
    folds = eval_folds(cfg, rows, note) if folds is None else folds
    dataset = dataset or {"rows": rows, "source": "rows", "digest": dataset_hash(rows)}
    split_id = tracking.split_identity(
        cfg.split.name, cfg.split.seed, cfg.split.test_size, dataset["digest"], rows["shape_id"].iloc[test]
    )
    reused = (
        cfg.split.name
        if cfg.split.name in folds
        and len(folds[cfg.split.name]) == 1
        and cfg.split.name in ("random", "held_out_shapes")
        else None
    )  # that fold IS the champion split
    trees = float(cfg.get("eval_trees") or 1)
    floor, floor_column = row_floor(rows, registry, target)
    uri = tracking.setup(cfg.mlflow, out)
    results: dict[str, Result] = {}
    train_keys: dict[tuple, np.ndarray] = {}
    for name, entry in entries.items():
        X, unit = encodings.X(entry.encoder), encodings.unit(entry.encoder)
        res = results[name] = Result(name)
        describe = describe_of(encodings, entry, rows)
        floor_at = floor_column if unit == "kernel" else None
        if name in candidates:
            fit = fit_registered(lambda e=entry: build(e), X, Yfit, rows, train, test, cfg.interval)
            fit = res.fits["test"] = floored(fit, floor, floor_at)
            res.metrics.update(
                flat(
                    "test",
                    score(
                        rows.iloc[test],
                        Y[test],
                        fit.pred,
                        fit.lo,
                        fit.hi,
                        target=target,
                        level=level,
                        scopes=cfg.get("scopes"),
                        loo=cfg.interval.method == "loo",
                    ),
                )
            )
            res.metrics.update({"test/all/fit_seconds": fit.seconds, "test/all/n_train": float(fit.n_train)})
            res.metrics.update(calibration_metrics(fit.calibrated, target))
            # what a later champion comparison leaves out of its rows, keyed as register's held-out rows are (once
            # per way of describing a row: every kernel model's are the same)
            if tuple(describe) not in train_keys:
                train_keys[tuple(describe)] = tracking.row_keys(served_frame(rows, train, describe))
            res.train_keys = train_keys[tuple(describe)]
            res.test_frame = served_frame(rows, test, [c for c in DESCRIBE if c in rows.columns]).assign(
                **{c: Y[test, j] for j, c in enumerate(target.columns)},
                **{f"pred_{c}": fit.pred[:, j] for j, c in enumerate(target.columns)},
            )
        for split, split_folds in folds.items():
            if split == reused and "test" in res.fits:
                fit = res.fits[split] = res.fits["test"]
            else:
                make = lambda e=scale_trees(entry, trees): build(e)
                fit = res.fits[split] = floored(
                    pooled(make, X, Yfit, rows, split_folds, cfg.interval if cfg.get("eval_interval") else None),
                    floor,
                    floor_at,
                )
            idx = fit.index
            res.metrics.update(
                flat(
                    split,
                    score(
                        rows.iloc[idx],
                        Y[idx],
                        fit.pred,
                        fit.lo,
                        fit.hi,
                        target=target,
                        level=level,
                        scopes=cfg.get("scopes"),
                    ),
                )
            )
            res.metrics.update(
                {
                    f"{split}/all/folds": float(fit.folds),
                    f"{split}/all/n_train": float(fit.n_train),
                    f"{split}/all/fit_seconds": fit.seconds,
                }
            )
        served = None
        if name in candidates:
            served = served_model(
                name, res.fits["test"].calibrated, entry, unit, target, registry, rows, test, describe, level
            )
        logged = tracking.log_run(
            name,
            metrics=res.metrics,
            params={**(params or {}), **entry.params()},
            tags={
                "model": name,
                "target": target.name,
                "dataset_sha256": dataset["digest"],
                **split_id,
                **(tags or {}),
            },
            files=_files(name, res, target, extras),
            dataset=dataset,
            served=served,
        )
        res.run_id, res.model_uri = logged.run_id, logged.model_uri
    best, decision, rank_keys = None, None, []
    if candidates:
        metric, select = cfg.register.select_metric, cfg.register.get("select_split", "test")
        if select != "test" and select not in folds:
            note(f"register.select_split {select} was not scored on these rows: candidates ranked on test")
            select = "test"
        scope = cfg.register.get("select_scope") or "all"
        if scope != "all" and not all(
            f"{select}/{scope}/{target.key(metric, c)}" in results[n].metrics
            for n in candidates
            for c in target.rank_by
        ):
            note(f"register.select_scope {scope} was not scored on {select}: candidates ranked on all rows")
            scope = "all"
        rank_keys = [f"{select}/{scope}/{target.key(metric, c)}" for c in target.rank_by]
        sign = 1 if tracking.LOWER_IS_BETTER.get(metric, True) else -1
        best = min(candidates, key=lambda n: tuple(sign * results[n].metrics[k] for k in rank_keys))
        decision = register(
            cfg, results[best], rows, test, Y, target, split_id, describe_of(encodings, entries[best], rows)
        )
    return Experiment(results, best, decision, target, split_id, uri, list(folds), reused, rank_keys)


def describe_of(encodings: Encodings, entry: Entry, rows: pd.DataFrame) -> list[str]:
    """The columns a served row of this entry holds: a workload (op, hardware, dtype, shapes) or a network."""
    unit = encodings.unit(entry.encoder)
    return [c for c in (NETWORK_DESCRIBE if unit == "network" else DESCRIBE) if c in rows.columns]


def served_frame(rows: pd.DataFrame, idx, describe: list[str]) -> pd.DataFrame:
    """Rows ``idx`` as a served model reads them: the ``describe`` columns and, for kernel rows, the settings of the
    software that measured each (timing harness, conv math: ``measurement_settings``) and a GEMM's operand layout
    (``layout_of``), which a served row carries as columns where a training row has its ``source`` and ``config``."""
    sub = rows.iloc[idx]
    out = sub[describe].reset_index(drop=True)
    if "op" in describe:  # a kernel row (a network row is its MLIR)
        out = out.assign(**measurement_settings(sub), **layout_of(sub))
    return out


def register(
    cfg: DictConfig, res: Result, rows: pd.DataFrame, test, Y, target: Target, split_id: dict, describe: list[str]
):
    """``tracking.register`` (the one champion rule) for ``res``: its ``test/all`` metrics of the target's primary
    column (bare names: the version's ``test_<metric>`` tags) and its held-out rows with their predictions."""
    j, col = target.columns.index(target.primary), target.primary
    prefix = f"{col}." if target.multi else ""
    metrics = {
        k.split("/")[-1].removeprefix(prefix): v
        for k, v in res.metrics.items()
        if k.startswith(f"test/all/{prefix}") and not k.endswith(("fit_seconds", "n_train"))
    }
    # as served: a champion re-scored on these rows answers for each as it was measured (its harness, its operand
    # layout), as the challenger did; the describe columns alone would ask for every row back to back and row-major
    heldout = served_frame(rows, test, describe).assign(**{col: Y[test, j], f"pred_{col}": res.fits["test"].pred[:, j]})
    return tracking.register(
        res.model_uri,
        cfg.register.name,
        cfg.register.alias,
        metrics,
        split=split_id,
        heldout=heldout,
        target=col,
        select_metric=cfg.register.select_metric,
        model_name=res.name,
        promotion=OmegaConf.to_container(cfg.register.promotion) if cfg.register.get("promotion") else None,
    )


def calibration_metrics(cal, target: Target) -> dict[str, float]:
    """``calibration/<scope>/log_halfwidth`` (per column) and ``calibration/all/n``."""
    out = {"calibration/all/n": float(cal.n_calibration)}
    for j, col in enumerate(target.columns):
        out[f"calibration/all/{target.key('log_halfwidth', col)}"] = float(cal.q[j])
        out.update({f"calibration/{hw}/{target.key('log_halfwidth', col)}": q for hw, q in cal.by_group[j].items()})
    return out


def served_model(name: str, cal, entry: Entry, unit: str, target: Target, registry, rows, test, describe, level):
    """What ``tracking.log_run`` logs as the pyfunc: the fitted model, its meta (``models.pyfunc.make_meta``), an
    input example."""
    from models.pyfunc import make_meta

    intervals = {
        c: {
            "log_halfwidth": float(cal.q[j]),
            "by_hardware": cal.by_group[j],
            "transform": cal.transforms[j],
            "lower": cal.lower[j],
            "upper": cal.upper[j],
        }
        for j, c in enumerate(target.columns)
    }
    trained = None
    if unit == "network":  # a network model learned from these machines only: serving refuses others
        trained = sorted(set(rows["hardware"].iloc[np.setdiff1d(np.arange(len(rows)), test)]))
    meta = make_meta(
        model=name,
        target=target.facts(),
        encoder=entry.encoder,
        unit=unit,
        intervals=intervals,
        level=level,
        trained_hardware=trained,
        domain=isinstance(cal.model, HasDomain),
    )
    example = rows.iloc[test[:3]][describe].reset_index(drop=True)
    if unit != "network":
        example = example.astype({p: float for p in SHAPE_PARAMS if p in example.columns})
    return tracking.Served(model=cal.model, registry=registry, meta=meta, input_example=example)


def _files(name: str, res: Result, target: Target, extras):
    """The run's ``eval/`` artifacts: parity plot, error CDF and held-out predictions of the registered fit, plus a
    job's own (``extras``)."""

    def write(directory: Path) -> tuple[dict, list[Path]]:
        from models.evaluate import error_cdf_plot, parity_plot

        files, metrics = [], {}
        if res.test_frame is not None and len(res.test_frame):
            col, frame = target.primary, res.test_frame
            parity_plot(
                frame["hardware"],
                frame[col],
                frame[f"pred_{col}"],
                f"{name}: held-out rows ({col})",
                directory / "parity.png",
                f"true {col}",
                f"predicted {col}",
            )
            error_cdf_plot(
                frame["hardware"],
                frame[col],
                frame[f"pred_{col}"],
                f"{name}: held-out error CDF ({col})",
                directory / "error_cdf.png",
            )
            frame.to_csv(directory / "heldout_predictions.csv", index=False)
            files += [directory / "parity.png", directory / "error_cdf.png", directory / "heldout_predictions.csv"]
        if res.train_keys is not None:
            np.save(directory / tracking.TRAIN_KEYS_FILE, res.train_keys)
            files.append(directory / tracking.TRAIN_KEYS_FILE)
        if extras is not None:
            more_metrics, more_files = extras(name, res, directory)
            metrics.update(more_metrics)
            files += list(more_files)
        return metrics, files

    return write


def mean_over_splits(exp: Experiment, model: str, metric: str) -> float:
    """The mean over the scored eval splits of ``model``'s ``<split>/all/<metric>`` (each split weighted once)."""
    if model not in exp.results:
        raise ValueError(f"objective: model {model!r} was not scored; scored: {', '.join(exp.results)}")
    return float(np.mean([exp.results[model].metrics[f"{s}/all/{metric}"] for s in exp.eval_splits]))


def log_split_runs(records: list[dict], *, params: dict, tags: dict) -> list[dict]:
    """One MLflow run per evaluation record of a dataset protocol (``models.public_eval``): its metrics under
    ``<split>/<scope>/<metric>``, its ``eval/`` files. Nothing is registered. Returns the records with ``run_id``."""
    for r in records:
        if "metrics" not in r:
            continue
        metrics = {
            f"{r['split']}/{scope}/{k}": float(v)
            for scope, values in r["metrics"].items()
            for k, v in values.items()
            if v is not None and np.isfinite(v)
        }
        r["run_id"] = tracking.log_run(
            f"{tags['dataset']}/{r['split']}/{r['model']}",
            metrics=metrics,
            params={**params, **r.get("params", {})},
            tags={**tags, "split": r["split"], "model": r["model"]},
            files=r.get("files"),
        ).run_id
    return records
