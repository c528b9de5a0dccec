"""Evaluate tabular surrogates on real public data (NeuSight, Kernel Tuner, wa-hls4ml), one MLflow run per
(dataset, split, model), in the local sqlite store under the output folder. Nothing is registered.

    python -m pipelines.evaluate dataset=neusight   model=[rf,xgb,roofline]
    python -m pipelines.evaluate dataset=kerneltuner model=[rf,xgb]
    python -m pipelines.evaluate dataset=wa_hls4ml  model=[rf,xgb]

* **neusight**: features = workload shape + hardware spec sheet only (``features.tabular``; never the ``meta``
  columns observed by running). Splits: leave-one-GPU-out over the measured GPUs (train on 4, test on the 5th,
  rotate) and held-out shapes (grouped by ``shape_id``). Metrics: MAPE, MedAPE, SMAPE, R^2(log10), Kendall tau
  within each (op, GPU) group. Then a model fitted on every measured GPU predicts the spec-only GPUs
  (``dataset.spec_only``): written to ``spec_only_predictions.csv``; no labels exist, so no error is reported.
* **kerneltuner**: features = the tunables of ``config`` (JSON, expanded to numeric columns) + the GPU's spec
  features. Splits: ``per_gpu``: for each GPU a model on 80% of its configs, scored on the other 20%;
  ``transfer10_with_others`` / ``transfer10_alone``: a target GPU gives 10% of its configs; train on them plus
  every config of the other GPUs running the same kernel, or on the 10% alone; test on the other 90%.
  Ranking metrics per GPU: Kendall tau, top-k slowdown (k = 1, 5, 10), with MAPE. Noise floor from the 32
  repeats: median ``meta.runtime_cv`` and ``runtime_iqr_ms / runtime_ms`` per GPU.
* **wa_hls4ml**: targets lut, ff, dsp, bram_18k, latency_cycles fitted in log1p space
  (:class:`models.classify.BoundedLog1pModel`), predictions clipped to [0, the part's totals]; a feasibility
  classifier on every row (ok vs failed synthesis). Splits: held-out layer shapes (groups (d_in, d_out)) and
  held-out precision (train <= 10 bits, test 12-14). Roofline does not apply (no FPGA analytical model here).
"""
from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import hydra
import mlflow
import numpy as np
import pandas as pd
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from sklearn.metrics import accuracy_score, balanced_accuracy_score

from data.hardware import CONF_DIR, HardwareRegistry
from data.importers import DatasetError
from data.schema import dataset_hash
from data.store import read_dataset, write_dataset
from data.workloads import SHAPE_PARAMS
from features.tabular import TabularFeaturizer
from models.classify import BoundedLog1pModel, FeasibilityClassifier
from models.evaluate import (bar_plot, error_cdf_plot, parity_plot, ranking_metrics, regression_metrics,
                             resource_metrics, smape, within_group_kendall)
from models.splits import (few_shot_transfer, held_out_groups, held_out_layer_shapes, held_out_precision,
                           held_out_shapes, leave_one_group_out)
from pipelines import tracking

log = logging.getLogger(__name__)
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
warnings.filterwarnings("ignore", category=UserWarning, module=r"mlflow\.")
logging.getLogger("mlflow").setLevel(logging.ERROR)

DESCRIBE = ["op", "hardware", "dtype", *SHAPE_PARAMS]
FPGA_TARGETS = ("lut", "ff", "dsp", "bram_18k", "latency_cycles")


# --- data -------------------------------------------------------------------------------------------------

def load_rows(cfg: DictConfig, out: Path, registry: HardwareRegistry) -> pd.DataFrame:
    """Imported rows of ``cfg.dataset.name``; a full import is cached as ``<out>/datasets/import/<name>.parquet``."""
    name = cfg.dataset.name
    kwargs = dict(OmegaConf.to_container(cfg.dataset.import_kwargs, resolve=True) or {}) \
        if cfg.dataset.get("import_kwargs") is not None else {}
    cache = out / "datasets" / "import" / f"{name}.parquet"
    if not kwargs and cfg.use_import_cache and cache.exists():
        return read_dataset(cache)
    import importlib
    module = importlib.import_module(f"data.importers.{name}")
    rows = getattr(module, f"import_{name}")(cfg.data_root, registry=registry, **kwargs)
    if not kwargs and cfg.use_import_cache:
        write_dataset(rows, cache)
    return rows


def spec_features(rows: pd.DataFrame, registry: HardwareRegistry) -> pd.DataFrame:
    """``TabularFeaturizer`` features (shape + hardware spec), computed once per distinct description row."""
    desc = rows[[c for c in DESCRIBE if c in rows.columns]].copy()
    key = pd.util.hash_pandas_object(desc, index=False)  # 64-bit row hash (NaN-safe)
    first = ~key.duplicated()
    X_unique = TabularFeaturizer(registry).transform(desc[first.to_numpy()].reset_index(drop=True))
    X_unique.index = key[first.to_numpy()].to_numpy()
    return X_unique.loc[key.to_numpy()].reset_index(drop=True)


def config_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """The ``config`` JSON column expanded to numeric ``cfg_<name>`` columns (strings -> category codes)."""
    cfg = pd.DataFrame([json.loads(c) if isinstance(c, str) else {} for c in rows["config"]])
    out = pd.DataFrame(index=range(len(rows)))
    for col in sorted(cfg.columns):
        values = pd.to_numeric(cfg[col], errors="coerce")
        if values.isna().any():  # non-numeric tunable or strategy name: a stable category code
            values = cfg[col].astype("category").cat.codes.astype(float)
        out[f"cfg_{col}"] = values.to_numpy(float)
    return out


def model_configs(cfg: DictConfig) -> dict[str, DictConfig]:
    """The selected models with the dataset's hyper-parameter overrides (``dataset.model_params``)."""
    out = {}
    for name, mcfg in cfg.model.items():
        over = (cfg.dataset.get("model_params") or {}).get(name) or {}
        out[name] = OmegaConf.merge(mcfg, over)
    return out


# --- tracking ---------------------------------------------------------------------------------------------

def log_run(*, dataset: str, split: str, model: str, metrics: dict, frame: pd.DataFrame, params: dict,
            bars: dict[str, float], bar_label: str, symmetric: bool = False, extra: dict[str, pd.DataFrame] = {},
            xlabel: str = "true runtime (ms)", ylabel: str = "predicted runtime (ms)") -> str:
    """One MLflow run: metrics ``test/<scope>/<metric>``, parity plot, error CDF, bars, predictions. No model logged."""
    with mlflow.start_run(run_name=f"{dataset}/{split}/{model}") as run, tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        mlflow.set_tags({"dataset": dataset, "split": split, "model": model})
        mlflow.log_params(params)
        for scope, values in metrics.items():
            mlflow.log_metrics({tracking._metric_key("test", str(scope), k): float(v)
                                for k, v in values.items() if v is not None and np.isfinite(v)})
        if len(frame) and "pred" in frame:
            y, p, g = frame["y"].to_numpy(float), frame["pred"].to_numpy(float), frame["group"].to_numpy()
            shift = 1.0 if symmetric else 0.0  # zero-heavy targets: plot y + 1 on log axes
            parity_plot(g, y + shift, np.maximum(p + shift, 1e-12), f"{dataset} {split} {model}", tmp / "parity.png",
                        xlabel=xlabel, ylabel=ylabel)
            error_cdf_plot(g, y, p, f"{dataset} {split} {model}: error CDF", tmp / "error_cdf.png", symmetric=symmetric)
        if bars:
            bar_plot(bars, bar_label, f"{dataset} {split} {model}", tmp / "per_group.png")
        frame.to_csv(tmp / "predictions.csv", index=False)
        for name, df in extra.items():
            df.to_csv(tmp / name, index=False)
        for f in tmp.iterdir():
            mlflow.log_artifact(str(f), artifact_path="eval")
        return run.info.run_id


# --- NeuSight ---------------------------------------------------------------------------------------------

def _neusight_metrics(ok: pd.DataFrame, y, pred) -> dict:
    groups = ok["op"].to_numpy() + "@" + ok["hardware"].to_numpy()
    out = {}
    for scope, mask in [("all", np.ones(len(ok), bool))] + [(h, (ok["hardware"] == h).to_numpy())
                                                            for h in sorted(ok["hardware"].unique())]:
        m = regression_metrics(y[mask], pred[mask])
        m["smape"] = smape(y[mask], pred[mask])
        m["group_kendall_tau"] = within_group_kendall(groups[mask], y[mask], pred[mask])
        out[scope] = m
    return out


def evaluate_neusight(cfg, rows, registry, emit) -> list[dict]:
    ds = cfg.dataset
    ok = rows[rows["status"] == "ok"]
    n_all = len(ok)
    if ds.sample_rows and len(ok) > ds.sample_rows:
        ok = ok.sample(n=int(ds.sample_rows), random_state=cfg.seed)
    ok = ok.reset_index(drop=True)
    print(f"neusight: {len(ok)} of {n_all} ok rows (sample_rows={ds.sample_rows}), GPUs {sorted(ok['hardware'].unique())}")
    X = spec_features(ok, registry)
    y = ok["runtime_ms"].to_numpy(float)
    results = []
    tr_s, te_s = held_out_shapes(ok, test_size=ds.test_size, seed=cfg.seed)
    for name, mcfg in model_configs(cfg).items():
        # leave-one-GPU-out: each GPU's predictions come from the model that never saw that GPU
        pred = np.full(len(ok), np.nan)
        t0 = time.perf_counter()
        for _, tr, te in leave_one_group_out(ok, "hardware"):
            pred[te] = instantiate(mcfg).fit(X.iloc[tr], y[tr]).predict(X.iloc[te])
        results.append(emit("leave_one_gpu_out", name, _neusight_metrics(ok, y, pred), ok, y, pred,
                            time.perf_counter() - t0))
        # held-out shapes: whole (op, shape) configurations held out on every GPU at once
        t0 = time.perf_counter()
        p = instantiate(mcfg).fit(X.iloc[tr_s], y[tr_s]).predict(X.iloc[te_s])
        sub = ok.iloc[te_s].reset_index(drop=True)
        results.append(emit("held_out_shapes", name, _neusight_metrics(sub, y[te_s], p), sub, y[te_s], p,
                            time.perf_counter() - t0))
    # spec-only GPUs: no rows exist, so these are predictions without labels
    spec_only = [registry.resolve(h) for h in ds.spec_only]
    shapes = ok.drop_duplicates("shape_id")[["op", "dtype", *SHAPE_PARAMS, "shape_id"]]
    if ds.spec_only_max_shapes and len(shapes) > ds.spec_only_max_shapes:
        shapes = shapes.sample(n=int(ds.spec_only_max_shapes), random_state=cfg.seed)
    ref = registry.resolve(ds.spec_only_reference)
    grid = pd.concat([shapes.assign(hardware=h) for h in [ref, *spec_only]], ignore_index=True)
    Xg = spec_features(grid, registry)
    for name, mcfg in model_configs(cfg).items():
        model = instantiate(mcfg).fit(X, y)
        grid[f"pred_runtime_ms_{name}"] = model.predict(Xg)
    out_csv = Path(cfg.paths.output_dir).resolve() / "public_eval" / "neusight_spec_only_predictions.csv"
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    keep = [c for c in ["op", "dtype", *SHAPE_PARAMS, "hardware"] if grid[c].notna().any()]
    grid[keep + [c for c in grid.columns if c.startswith("pred_")]].to_csv(out_csv, index=False)
    ratio = {}
    base = grid[grid["hardware"] == ref].set_index("shape_id")
    for h in spec_only:
        g = grid[grid["hardware"] == h].set_index("shape_id")
        for name in model_configs(cfg):
            ratio[f"{h}/{name}"] = float(np.median(g[f"pred_runtime_ms_{name}"] / base.loc[g.index, f"pred_runtime_ms_{name}"]))
    print(f"spec-only GPUs {spec_only}: {len(grid)} predictions (no labels exist) -> {out_csv}")
    print("  median predicted runtime relative to " + ref + ": "
          + ", ".join(f"{k} {v:.2f}" for k, v in ratio.items()))
    results.append({"dataset": "neusight", "split": "spec_only", "model": "*", "spec_only_ratio": ratio,
                    "path": str(out_csv)})
    return results


# --- Kernel Tuner -----------------------------------------------------------------------------------------

def evaluate_kerneltuner(cfg, rows, registry, emit) -> list[dict]:
    ds = cfg.dataset
    ok = rows[rows["status"] == "ok"]
    print(f"kerneltuner: {len(ok)} ok configs, {int((rows['status'] == 'error').sum())} failed (dropped)")
    if ds.sample_per_hardware:
        keep = [g.sample(n=min(len(g), int(ds.sample_per_hardware)), random_state=cfg.seed).index
                for _, g in ok.groupby("hardware")]
        ok = ok.loc[np.sort(np.concatenate(keep))]
    ok = ok.reset_index(drop=True)
    meta = pd.DataFrame([json.loads(m) for m in ok["meta"]])
    noise = (pd.DataFrame({"hardware": ok["hardware"], "op": ok["op"], "cv": meta["runtime_cv"].astype(float),
                           "iqr_rel": ok["runtime_iqr_ms"] / ok["runtime_ms"]})
             .groupby(["op", "hardware"]).agg(configs=("cv", "size"), median_cv=("cv", "median"),
                                               median_iqr_rel=("iqr_rel", "median")).reset_index())
    print("noise floor from the 32 repeats (median over configs):")
    print(noise.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    hw_cols = [c for c in spec_features(ok.head(1), registry).columns if c.startswith("hw_") or c.startswith("op_")]
    F = spec_features(ok, registry)
    y = ok["runtime_ms"].to_numpy(float)
    results = []
    if "roofline" in cfg.model:
        print("roofline: not applicable to ranking configs (every config of a kernel has the same FLOPs and bytes, "
              "so it predicts one runtime per GPU): skipped")
    gpus = sorted(ok["hardware"].unique())
    kernel_of = ok.groupby("hardware")["op"].first().to_dict()

    def per_kernel_X(mask):  # one kernel's tunables (the other kernel's are absent) + the GPU spec features
        return pd.concat([config_frame(ok[mask]).set_index(np.flatnonzero(mask)), F.loc[mask, hw_cols]], axis=1)

    for name, mcfg in model_configs(cfg).items():
        if name == "roofline":
            continue
        for split in ("per_gpu", "transfer10_with_others", "transfer10_alone"):
            pred = np.full(len(ok), np.nan)
            t0 = time.perf_counter()
            for h in gpus:
                kmask = (ok["op"] == kernel_of[h]).to_numpy()
                Xk = per_kernel_X(kmask)
                sub = ok[kmask]
                local = np.flatnonzero(kmask)
                if split == "per_gpu":
                    hmask = (sub["hardware"] == h).to_numpy()
                    idx = local[hmask]
                    tr, te = held_out_groups(ok.loc[idx, "meta"].to_numpy(), ds.test_size, cfg.seed)
                    train, test = idx[tr], idx[te]
                else:
                    support, other, test = few_shot_transfer(ok, h, ds.transfer_fraction, cfg.seed, within="op")
                    train = np.concatenate([support, other]) if split == "transfer10_with_others" else support
                pred[test] = instantiate(mcfg).fit(Xk.loc[train], y[train]).predict(Xk.loc[test])
            done = ~np.isnan(pred)
            metrics = {}
            for h in ["all", *gpus]:
                m = done & ((ok["hardware"] == h).to_numpy() if h != "all" else True)
                metrics[h] = regression_metrics(y[m], pred[m])
                if h != "all":
                    metrics[h].update(ranking_metrics(y[m], pred[m], tuple(ds.topk)))
            per = [metrics[h] for h in gpus]
            for key in ["kendall_tau", *(f"top{k}_slowdown" for k in ds.topk)]:
                metrics["all"][f"mean_gpu_{key}"] = float(np.mean([m[key] for m in per]))
            sub = ok[done].reset_index(drop=True)
            results.append(emit(split, name, metrics, sub, y[done], pred[done], time.perf_counter() - t0,
                                extra={"noise_floor.csv": noise}))
    return results


# --- wa-hls4ml --------------------------------------------------------------------------------------------

def fpga_features(rows: pd.DataFrame) -> pd.DataFrame:
    """Layer (d_in = k, d_out = n), precision bits, reuse factor, strategy and derived products (log2)."""
    cfg = config_frame(rows)
    k, n = rows["k"].to_numpy(float), rows["n"].to_numpy(float)
    bits, rf = cfg["cfg_precision_bits"].to_numpy(float), cfg["cfg_reuse_factor"].to_numpy(float)
    strategy = np.array([json.loads(c)["strategy"] == "resource" for c in rows["config"]], float)
    return pd.DataFrame({"d_in": k, "d_out": n, "precision_bits": bits, "reuse_factor": rf,
                         "strategy_resource": strategy, "log2_weights": np.log2(k * n),
                         "log2_weight_bits": np.log2(k * n * bits), "log2_mults_per_cycle": np.log2(k * n / rf),
                         "log2_reuse_factor": np.log2(rf)})


def evaluate_wa_hls4ml(cfg, rows, registry, emit) -> list[dict]:
    ds = cfg.dataset
    rows = rows.reset_index(drop=True)
    rows = rows.assign(precision_bits=[json.loads(c)["precision_bits"] for c in rows["config"]])
    totals = registry.get(ds.part).extra["resources"]
    upper = {t: float(totals[t]) if t in totals else float("inf") for t in FPGA_TARGETS}
    X_all = fpga_features(rows)
    ok_mask = (rows["status"] == "ok").to_numpy()
    print(f"wa_hls4ml: {len(rows)} rows, {ok_mask.sum()} synthesised; targets {FPGA_TARGETS} in log1p space, "
          f"bounded to [0, {ds.part} totals {upper}]")
    splits = {"held_out_layer_shapes": held_out_layer_shapes(rows, ds.test_size, cfg.seed),
              "held_out_precision": held_out_precision(rows, ds.train_max_bits, tuple(ds.test_bits))}
    results = []
    for split, (tr, te) in splits.items():
        # feasibility on every row (failed syntheses included)
        clf = FeasibilityClassifier(n_estimators=int(ds.feasibility_trees), random_state=cfg.seed).fit(X_all.iloc[tr], ok_mask[tr])
        p_ok = clf.predict(X_all.iloc[te])
        fm = {"all": {"n": float(len(te)), "accuracy": float(accuracy_score(ok_mask[te], p_ok)),
                      "balanced_accuracy": float(balanced_accuracy_score(ok_mask[te], p_ok)),
                      "test_ok_fraction": float(ok_mask[te].mean())}}
        results.append(emit(split, "feasibility_rf", fm, rows.iloc[te].reset_index(drop=True),
                             ok_mask[te].astype(float), p_ok.astype(float), 0.0, kind="classify"))
        tr_ok, te_ok = tr[ok_mask[tr]], te[ok_mask[te]]
        for name, mcfg in model_configs(cfg).items():
            if name == "roofline":
                print("roofline: not applicable to FPGA resources (no analytical model): skipped")
                continue
            t0 = time.perf_counter()
            metrics, frames = {}, []
            for t in FPGA_TARGETS:
                yt = rows[t].to_numpy(float)
                model = BoundedLog1pModel(instantiate(mcfg), upper=upper[t])
                p = model.fit(X_all.iloc[tr_ok], yt[tr_ok]).predict(X_all.iloc[te_ok])
                metrics[t] = resource_metrics(yt[te_ok], p)
                frames.append(pd.DataFrame({"target": t, "y": yt[te_ok], "pred": p}))
            frame = pd.concat(frames, ignore_index=True)
            metrics["all"] = {"n": float(len(te_ok)), "mean_smape": float(np.mean([metrics[t]["smape"] for t in FPGA_TARGETS]))}
            results.append(emit(split, name, metrics, frame.rename(columns={"target": "group"}), None, None,
                                time.perf_counter() - t0, kind="resource"))
    return results


EVALUATORS = {"neusight": evaluate_neusight, "kerneltuner": evaluate_kerneltuner, "wa_hls4ml": evaluate_wa_hls4ml}


# --- entry point ------------------------------------------------------------------------------------------

def run(cfg: DictConfig) -> list[dict]:
    t_start = time.perf_counter()
    if cfg.tiny:  # the dataset's own seconds-long settings (dataset.tiny) replace its defaults
        cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
        cfg.dataset = OmegaConf.merge(cfg.dataset, cfg.dataset.get("tiny") or {})
    name = cfg.dataset.name
    if name not in EVALUATORS:
        raise DatasetError(f"unknown dataset {name!r}; known: {', '.join(EVALUATORS)}")
    out = Path(cfg.paths.output_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    registry = HardwareRegistry.from_dir(cfg.paths.hardware_dir or CONF_DIR)
    rows = load_rows(cfg, out, registry)
    digest = dataset_hash(rows)
    uri = tracking.setup(cfg.mlflow, out)
    base_params = tracking.flat_params(cfg, ["dataset"]) | {"seed": str(cfg.seed), "dataset_sha256": digest}

    def emit(split, model, metrics, frame_rows, y, pred, seconds, extra=None, kind="runtime"):
        if kind == "resource":
            frame = frame_rows
            bars = {t: metrics[t]["smape"] for t in FPGA_TARGETS}
            bar_label, sym, xl, yl = "SMAPE (%)", True, "true value + 1", "predicted value + 1"
        elif kind == "classify":
            frame = frame_rows[["k", "n", "precision_bits"]].assign(group="all", y=y, pred=pred)
            bars, bar_label, sym, xl, yl = {}, "", True, "", ""
            frame = frame.drop(columns=["pred"]).assign(pred_ok=pred)  # no parity plot for labels
        else:
            frame = frame_rows[[c for c in DESCRIBE if c in frame_rows.columns and frame_rows[c].notna().any()]].copy()
            if "config" in frame_rows:
                frame["config"] = frame_rows["config"].to_numpy()
            frame = frame.assign(group=frame_rows["hardware"].to_numpy(), y=y, pred=pred)
            bars = {h: m["mape"] for h, m in metrics.items() if h != "all"}
            bar_label, sym, xl, yl = "MAPE (%)", False, "true runtime (ms)", "predicted runtime (ms)"
        params = base_params | {"model.name": model, "split": split,
                                **{f"model.{k}": str(v) for k, v in
                                   (OmegaConf.to_container(model_configs(cfg)[model]) if model in cfg.model else {}).items()}}
        run_id = log_run(dataset=name, split=split, model=model, metrics=metrics, frame=frame, params=params,
                         bars=bars, bar_label=bar_label, symmetric=sym, extra=extra or {}, xlabel=xl, ylabel=yl)
        print(f"{name} / {split} / {model}: {seconds:.1f} s, run {run_id}")
        return {"dataset": name, "split": split, "model": model, "metrics": metrics, "run_id": run_id}

    results = EVALUATORS[name](cfg, rows, registry, emit)
    table = summary_table(results)
    path = out / "public_eval" / f"{name}_summary.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(table + "\n")
    print(table)
    print(f"summary -> {path}; MLflow store {uri} (experiment {cfg.mlflow.experiment}); "
          f"wall {time.perf_counter() - t_start:.0f} s")
    return results


SUMMARY = {"neusight": ["n", "mape", "medape", "smape", "r2_log", "group_kendall_tau"],
           "kerneltuner": ["n", "mape", "kendall_tau", "top1_slowdown", "top5_slowdown", "top10_slowdown"],
           "resource": ["n", "r2", "r2_log1p", "smape"],
           "classify": ["n", "accuracy", "balanced_accuracy", "test_ok_fraction"]}


def summary_table(results: list[dict]) -> str:
    """Markdown: one line per (split, model, scope)."""
    lines = []
    for r in results:
        if "metrics" not in r:
            continue
        for scope, m in r["metrics"].items():
            if r["dataset"] == "wa_hls4ml":
                cols = SUMMARY["classify"] if r["model"].startswith("feasibility") else SUMMARY["resource"]
                if scope == "all" and not r["model"].startswith("feasibility"):
                    continue
            elif r["dataset"] == "kerneltuner":
                cols = SUMMARY["kerneltuner"] if scope != "all" else ["n", "mape", "mean_gpu_kendall_tau",
                                                                      "mean_gpu_top1_slowdown", "mean_gpu_top5_slowdown",
                                                                      "mean_gpu_top10_slowdown"]
            else:
                cols = SUMMARY["neusight"]
            vals = ", ".join(f"{c}={m[c]:.4g}" for c in cols if c in m)
            lines.append(f"| {r['split']} | {r['model']} | {scope} | {vals} |")
    return "| split | model | scope | metrics |\n|---|---|---|---|\n" + "\n".join(lines)


@hydra.main(version_base="1.3", config_path="../conf", config_name="evaluate")
def main(cfg: DictConfig) -> None:
    try:
        run(cfg)
    except (DatasetError, ValueError, KeyError) as exc:
        print(f"evaluate: error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
