"""Main job: collect -> featurize -> train -> calibrate -> evaluate -> track -> register, on the embedded default.

Intervals: a calibration fold of whole shapes is carved out of the training rows (never the test
rows), each model is fitted on the rest, and the split-conformal half-widths (global and per hardware)
are computed on the fold (``models/conformal.py``); the held-out test rows give the reported coverage (``test/<scope>/coverage90``).

Splits: ``split`` (default held_out_shapes) is the split the registered model is fitted and judged on (the champion
decision). Every model is also scored on each split of ``eval_splits`` (``models.splits.FOLDS``: random,
held_out_shapes, held_out_family, leave_one_hardware_out): per fold the model is refitted on the fold's training rows
less a calibration fold of whole shapes, with ``n_estimators`` x ``eval_trees`` (the champion split, when it is random
or held_out_shapes, reuses the registered fit); the folds' test predictions are pooled and logged to the model's run
as ``<split>/<metric>``.

Targets: ``target`` (default ``runtime_ms``) is the measured column the models learn (trees on its log). Only rows that
have it are used: ``target=peak_mem_bytes`` keeps the measured CPU rows (the simulator records no memory) and says
how many rows it dropped; no row with the target is one error line and exit status 2. ``targets.<target>`` in
``conf/run.yaml`` names the feature column the analytical baseline (model entry ``roofline``) predicts with and the
registered model's name (``costmodel-runtime``, ``costmodel-peak_mem_bytes``). An eval split that cannot be formed
on the rows (``leave_one_hardware_out`` with one hardware) is skipped with a printed note.

    python -m pipelines.run                 # see conf/run.yaml for what can be overridden
    python -m pipelines.run target=peak_mem_bytes   # peak memory (README "Peak memory")
"""
from __future__ import annotations

import logging
import os
import sys
import time
import warnings
from pathlib import Path

import hydra
import mlflow
import numpy as np
import pandas as pd
from hydra.utils import instantiate
from omegaconf import DictConfig
from rich.console import Console
from rich.table import Table

from data.collect import collect_from_config
from data.hardware import CONF_DIR, HardwareRegistry
from data.schema import dataset_hash
from data.store import write_dataset
from data.workloads import SHAPE_PARAMS
from features.tabular import TabularFeaturizer
from models.conformal import calibrate, calibrate_by_group, coverage_by_hardware, halfwidths, interval
from models.evaluate import evaluate, regression_metrics, smape, within_group_kendall
from models.splits import FOLDS, SPLITS, held_out_shapes
from pipelines import tracking

log = logging.getLogger(__name__)


class TargetError(ValueError):
    """The configured target cannot be trained on (unknown, or no collected row has it): one error line, exit 2."""
console = Console(width=None if sys.stdout.isatty() else 160, soft_wrap=True)  # logs and pipes get the full table
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
warnings.filterwarnings("ignore", category=UserWarning, module=r"mlflow\.")
logging.getLogger("mlflow").setLevel(logging.ERROR)


def run(cfg: DictConfig) -> dict:
    """Run the main job for a composed config; returns per-model metrics, the registered version, paths."""
    t_start = time.perf_counter()
    out = Path(cfg.paths.output_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    registry = HardwareRegistry.from_dir(cfg.paths.hardware_dir or CONF_DIR)
    target = cfg.target
    if target not in cfg.targets:
        raise TargetError(f"unknown target {target!r}; known (conf/run.yaml targets): {', '.join(cfg.targets)}")

    # 1. collect
    rows, cpu_spec = collect_from_config(cfg.collect, registry, progress=cfg.progress)
    if cpu_spec is not None:
        registry.add(cpu_spec)
    has_target = (rows["status"] == "ok") & rows[target].notna()
    if not has_target.any():
        raise TargetError(f"no collected row has target {target!r} ({(rows['status'] == 'ok').sum()} ok rows from "
                          f"backends {', '.join(sorted(set(rows['backend'])))}; "
                          f"{target} is measured by: {_measured_by(target)})")
    if cfg.features.mlir.enabled:  # MLIR per distinct workload (features/mlir), its sha256 in each row
        from features.mlir import attach_mlir
        rows, mlir_stats = attach_mlir(rows, out / cfg.features.mlir.store, progress=cfg.progress)
        console.print(f"MLIR: {mlir_stats['distinct']} distinct workloads, {mlir_stats['exported']} exported, "
                      f"{mlir_stats['failed']} failed ({mlir_stats['seconds']:.1f} s) -> {out / cfg.features.mlir.store}")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    digest = dataset_hash(rows)
    dataset_path = write_dataset(rows, out / "datasets" / f"measurements-{stamp}-{digest[:8]}.parquet")
    n_ok = int((rows["status"] == "ok").sum())
    ok = rows[has_target.to_numpy()].reset_index(drop=True)
    console.print(f"collected {len(rows)} rows ({len(rows) - n_ok} errors) -> {dataset_path}", soft_wrap=True)
    if len(ok) < n_ok:
        dropped = rows[(rows["status"] == "ok") & rows[target].isna()]
        console.print(f"target {target}: {len(ok)} rows have it; dropped {len(dropped)} ok rows without it "
                      f"({', '.join(f'{b}: {n}' for b, n in dropped['backend'].value_counts().sort_index().items())})")

    # 2. featurize
    X = TabularFeaturizer(registry).transform(ok)
    y = ok[target].to_numpy(float)

    # 3. split (held-out shapes by default); then a calibration fold of whole shapes out of the training rows
    for name in [cfg.split.name, *cfg.eval_splits]:
        if name not in SPLITS:
            raise ValueError(f"unknown split {name!r}; known: {', '.join(SPLITS)}")
    split = SPLITS[cfg.split.name]
    train, test = split(ok, test_size=cfg.split.test_size, seed=cfg.split.seed)
    fit_pos, cal_pos = held_out_shapes(ok.iloc[train], test_size=cfg.interval.calibration_size, seed=cfg.split.seed)
    fit, cal = train[fit_pos], train[cal_pos]
    console.print(f"split {cfg.split.name}: {len(fit)} fit + {len(cal)} calibration rows "
                  f"({ok.loc[cal, 'shape_id'].nunique()} shapes), {len(test)} test rows "
                  f"({ok.loc[test, 'shape_id'].nunique()} held-out shapes)")
    folds = {}
    for s in cfg.eval_splits:
        try:
            folds[s] = list(FOLDS[s](ok, test_size=cfg.split.test_size, seed=cfg.split.seed))
        except ValueError as exc:  # e.g. leave_one_hardware_out on one hardware (peak_mem_bytes: the CPU only)
            console.print(f"eval split {s} skipped on these rows: {exc}")
    eval_splits = list(folds)
    reuse = _reuses_registered_fit(cfg)
    split_id = tracking.split_identity(cfg.split.name, cfg.split.seed, cfg.split.test_size, digest,
                                       ok.loc[test, "shape_id"])

    # 4-6. train, calibrate, evaluate, track
    uri = tracking.setup(cfg.mlflow, out)
    params = tracking.flat_params(cfg, ["collect", "split", "interval"]) | {"target": target, "seed": str(cfg.seed)}
    describe = ["op", "hardware", "dtype", *SHAPE_PARAMS]
    input_example = ok.loc[test[:3], describe].astype({p: float for p in SHAPE_PARAMS})
    level = float(cfg.interval.level)
    cov_key = f"coverage{round(level * 100)}"
    results: dict[str, dict] = {}
    for name, model_cfg in cfg.model.items():
        model = instantiate(model_cfg)
        t0 = time.perf_counter()
        model.fit(X.iloc[fit], y[fit])
        fit_s = time.perf_counter() - t0
        pred_cal = model.predict(X.iloc[cal])
        q = calibrate(y[cal], pred_cal, level)
        q_hw = calibrate_by_group(ok.loc[cal, "hardware"], y[cal], pred_cal, level)
        pred = model.predict(X.iloc[test])
        lo, hi = interval(pred, halfwidths(ok.loc[test, "hardware"], q, q_hw))
        metrics = evaluate(ok.loc[test, "hardware"], y[test], pred)
        for scope, value in coverage_by_hardware(ok.loc[test, "hardware"], y[test], lo, hi).items():
            metrics[scope][cov_key] = value
        test_frame = ok.loc[test, describe + [target]].assign(**{f"pred_{target}": pred})
        model_uri = tracking.log_model_run(
            name=name, model=model, metrics=metrics,
            params=params | tracking.flat_params(cfg.model, [name]),
            test_frame=test_frame, target=target, registry=registry, input_example=input_example,
            dataset=rows, dataset_source=str(dataset_path), dataset_digest=digest, fit_seconds=fit_s,
            interval={"level": level, "log_halfwidth": q, "by_hardware": q_hw, "n": float(len(cal))}, split=split_id)
        _tag_sweep_trial(name)
        splits = {}
        for s in eval_splits:
            if s == reuse:  # the registered fit, on the champion split's test rows
                splits[s] = split_metrics(ok.loc[test], y[test], pred, lo, hi, cov_key) | {"folds": 1.0}
            else:
                splits[s] = _score_folds(model_cfg, float(cfg.eval_trees), folds[s], ok, X, y, cfg, cov_key)
        _log_split_metrics(splits)
        results[name] = {"metrics": metrics, "model_uri": model_uri, "fit_seconds": fit_s, "log_halfwidth": q,
                         "test_frame": test_frame, "splits": splits}
        log.info("%s: held-out MAPE %.1f%%, %s %.2f", name, metrics["all"]["mape"], cov_key, metrics["all"][cov_key])

    # 7. register the best model; the alias moves only if it beats the champion on this held-out split
    key = cfg.register.select_metric
    better = min if tracking.LOWER_IS_BETTER.get(key, True) else max
    best = better(results, key=lambda n: results[n]["metrics"]["all"][key])
    decision = tracking.register(results[best]["model_uri"], cfg.register.name, cfg.register.alias,
                                 results[best]["metrics"]["all"], split=split_id,
                                 heldout=results[best]["test_frame"], target=target, select_metric=key,
                                 model_name=best)
    version = decision.version
    wall = time.perf_counter() - t_start
    _summary(results, best, cfg, uri, decision, wall, eval_splits)
    return {"results": results, "best": best, "version": version, "promoted": decision.promoted,
            "decision": decision.reason, "tracking_uri": uri,
            "dataset": str(dataset_path), "dataset_sha256": digest, "wall_seconds": wall,
            "hardware": registry.ids}


def split_metrics(rows: pd.DataFrame, y, pred, lo, hi, cov_key: str = "coverage90") -> dict[str, float]:
    """One split's pooled test metrics: MAPE, MedAPE, SMAPE, R^2 (log10), Kendall tau overall and within each
    (op, hardware) group (``models.evaluate.within_group_kendall``), interval coverage."""
    y, pred = np.asarray(y, float), np.asarray(pred, float)
    groups = rows["op"].astype(str).to_numpy() + "@" + rows["hardware"].astype(str).to_numpy()
    out = regression_metrics(y, pred)
    out["smape"] = smape(y, pred)
    out["group_kendall_tau"] = within_group_kendall(groups, y, pred)
    out[cov_key] = float(np.mean((y >= lo) & (y <= hi)))
    return out


def _reuses_registered_fit(cfg: DictConfig) -> str | None:
    """The eval split whose one fold is the champion split itself (random, held_out_shapes): scored by the registered
    fit. A multi-fold eval split (held_out_family, leave_one_hardware_out) always runs its folds."""
    name = cfg.split.name
    return name if name in cfg.eval_splits and name in ("random", "held_out_shapes") else None


def _fewer_trees(model_cfg: DictConfig, fraction: float) -> DictConfig:
    """A copy of a model config with ``n_estimators`` (its own or its ``base``'s) x ``fraction`` (at least 10)."""
    cfg = model_cfg.copy()
    for node in (cfg, cfg.get("base")):
        if node is not None and "n_estimators" in node and fraction != 1:
            node.n_estimators = max(10, round(int(node.n_estimators) * fraction))
    return cfg


def _score_folds(model_cfg, trees: float, folds, ok, X, y, cfg, cov_key: str) -> dict[str, float]:
    """Refit per fold (less a calibration fold of whole shapes), pool the folds' test predictions and intervals."""
    level = float(cfg.interval.level)
    idx, preds, los, his = [], [], [], []
    for _, tr, te in folds:
        fit_pos, cal_pos = held_out_shapes(ok.iloc[tr], test_size=cfg.interval.calibration_size, seed=cfg.split.seed)
        fit, cal = tr[fit_pos], tr[cal_pos]
        model = instantiate(_fewer_trees(model_cfg, trees)).fit(X.iloc[fit], y[fit])
        pred_cal = model.predict(X.iloc[cal])
        q, q_hw = calibrate(y[cal], pred_cal, level), calibrate_by_group(ok.loc[cal, "hardware"], y[cal], pred_cal, level)
        pred = model.predict(X.iloc[te])
        lo, hi = interval(pred, halfwidths(ok.loc[te, "hardware"], q, q_hw))
        idx.append(te), preds.append(pred), los.append(lo), his.append(hi)
    te = np.concatenate(idx)
    out = split_metrics(ok.iloc[te], y[te], np.concatenate(preds), np.concatenate(los), np.concatenate(his), cov_key)
    return out | {"folds": float(len(folds))}


def _log_split_metrics(splits: dict[str, dict[str, float]]) -> None:
    """Log ``<split>/<metric>`` to the model's just-ended MLflow run (the one ``tracking.log_model_run`` made)."""
    run = mlflow.last_active_run()
    metrics = [mlflow.entities.Metric(f"{s}/{k}", float(v), int(time.time() * 1000), 0)
               for s, values in splits.items() for k, v in values.items() if np.isfinite(v)]
    mlflow.MlflowClient().log_batch(run.info.run_id, metrics=metrics)


def _tag_sweep_trial(name: str) -> None:
    """In a Hydra multirun (e.g. ``-m hparams_search=xgb_optuna``), tag the model's just-ended MLflow run with
    the trial number, the sweep folder and the trial's overrides, and name it ``<model>-trial<N>``."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return
    hc, run = HydraConfig.get(), mlflow.last_active_run()
    tags = {"sweep_trial": str(hc.job.num), "sweep_dir": str(hc.sweep.dir),
            "sweep_overrides": " ".join(hc.overrides.task)[:5000], "mlflow.runName": f"{name}-trial{hc.job.num}"}
    client = mlflow.MlflowClient()
    for key, value in tags.items():
        client.set_tag(run.info.run_id, key, value)


def _measured_by(target: str) -> str:
    """Which collection backends record ``target`` (for the no-row error line)."""
    return {"runtime_ms": "every backend",
            "peak_mem_bytes": "the cpu backend (collect.cpu.enabled=true, collect.cpu.measure_memory not false; "
                              "Linux /proc/self/clear_refs) and the cuda backend; not the sim-roofline simulator"
            }.get(target, "see data/schema.py")


def _summary(results: dict, best: str, cfg: DictConfig, uri: str, decision: tracking.Decision, wall: float,
             splits: list[str]) -> None:
    table = Table(title=f"held-out shapes ({cfg.split.name}): {cfg.target}", show_lines=False)
    cov_key = f"coverage{round(float(cfg.interval.level) * 100)}"
    for col in ("model", "hardware", "n", "MAPE %", "MedAPE %", "R² (log)", "Kendall τ", f"cover {cov_key[8:]}%"):
        table.add_column(col, justify="left" if col in ("model", "hardware") else "right")
    for name, res in results.items():
        for scope, m in res["metrics"].items():
            table.add_row(name + (" *" if name == best else "") if scope == "all" else "", scope, f"{m['n']:.0f}",
                          f"{m['mape']:.1f}", f"{m['medape']:.1f}", f"{m.get('r2_log', np.nan):.3f}",
                          f"{m.get('kendall_tau', np.nan):.3f}", f"{100 * m[cov_key]:.0f}", end_section=(scope == list(res["metrics"])[-1]))
    console.print(table)
    if splits:
        trees = float(cfg.eval_trees)
        reuse = _reuses_registered_fit(cfg)
        note = (f"; {reuse}: the registered fit" if reuse else "") + \
            ("" if trees == 1 else f"; {'other splits' if reuse else 'every split'} refit with n_estimators x {trees:g}")
        table = Table(title=f"every split: pooled test rows of each split's folds{note}; "
                            f"τ within (op, hardware)", show_lines=False)
        for col in ("model", "split", "folds", "n", "MAPE %", "MedAPE %", "SMAPE %", "R² (log)", "τ within",
                    f"cover {cov_key[8:]}%"):
            table.add_column(col, justify="left" if col in ("model", "split") else "right")
        for name, res in results.items():
            for s in splits:
                m = res["splits"][s]
                table.add_row(name if s == splits[0] else "", s + (" (champion split)" if s == reuse else ""),
                              f"{m['folds']:.0f}", f"{m['n']:.0f}", f"{m['mape']:.1f}", f"{m['medape']:.1f}",
                              f"{m['smape']:.1f}", f"{m.get('r2_log', np.nan):.3f}",
                              f"{m['group_kendall_tau']:.3f}", f"{100 * m[cov_key]:.0f}", end_section=(s == splits[-1]))
        console.print(table)
    name, alias = cfg.register.name, cfg.register.alias
    console.print(f"* registered {best!r} as {name} version {decision.version}; alias @{alias}: {decision.reason}"
                  f"  (wall time {wall:.0f} s)\n", soft_wrap=True)
    hw, dt = ("H100-SXM", "float16") if cfg.target == "runtime_ms" else \
        (results[best]["test_frame"]["hardware"].iloc[0], "float32")  # a hardware the target was measured on
    example = f"[dict(op='matmul', m=1024, n=1024, k=1024, dtype='{dt}', hardware='{hw}')]"
    print("Predict from the shell (workloads.csv: op, hardware, dtype and shape columns such as m,n,k):")
    print(f"  MLFLOW_TRACKING_URI={uri} costmodel predict --model models:/{name}@{alias} --input workloads.csv")
    print("Predict from Python:")
    print(f"  python -c \"import mlflow, pandas as pd; mlflow.set_tracking_uri('{uri}'); "
          f"m = mlflow.pyfunc.load_model('models:/{name}@{alias}'); print(m.predict(pd.DataFrame({example})))\"")
    print("List registered versions, aliases and held-out metrics:")
    print(f"  costmodel models --tracking-uri {uri}")
    print("Browse runs, metrics and plots:")
    print(f"  mlflow ui --backend-store-uri {uri} --port 5000")


@hydra.main(version_base="1.3", config_path="../conf", config_name="run")
def main(cfg: DictConfig) -> float:
    try:
        summary = run(cfg)
    except TargetError as exc:
        print(f"run: error: {exc}", file=sys.stderr)
        sys.exit(2)
    return summary["results"][summary["best"]]["metrics"]["all"][cfg.register.select_metric]


if __name__ == "__main__":
    main()
