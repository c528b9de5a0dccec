"""Evaluate tabular surrogates on real public data (NeuSight, Kernel Tuner, wa-hls4ml), one MLflow run per
(dataset, split, model), in the local sqlite store under the output folder. Nothing is registered.

    python -m pipelines.evaluate dataset=neusight   model=[rf,xgb,roofline]
    python -m pipelines.evaluate dataset=kerneltuner model=[rf,xgb]
    python -m pipelines.evaluate dataset=wa_hls4ml  model=[rf,xgb]

Thin entry point: import the rows (cached), call the dataset's protocol (``models/public_eval.py``: splits,
fits, metrics), log each (split, model) result to MLflow, print the summary table.
"""
from __future__ import annotations

import importlib
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

from data.hardware import CONF_DIR, HardwareRegistry
from data.importers import DatasetError
from data.schema import dataset_hash
from data.store import read_dataset, write_dataset
from models.evaluate import bar_plot, error_cdf_plot, parity_plot
from models.public_eval import DESCRIBE, FPGA_TARGETS, PROTOCOLS, summary_table
from pipelines import tracking

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
warnings.filterwarnings("ignore", category=UserWarning, module=r"mlflow\.")
logging.getLogger("mlflow").setLevel(logging.ERROR)


def load_rows(cfg: DictConfig, out: Path, registry: HardwareRegistry) -> pd.DataFrame:
    """Imported rows of ``cfg.dataset.name``; a full import is cached as ``<out>/datasets/import/<name>.parquet``."""
    name, kwargs = cfg.dataset.name, OmegaConf.to_container(OmegaConf.create(cfg.dataset.get("import_kwargs") or {}), resolve=True)
    cache = out / "datasets" / "import" / f"{name}.parquet"
    if not kwargs and cfg.use_import_cache and cache.exists():
        return read_dataset(cache)
    rows = getattr(importlib.import_module(f"data.importers.{name}"), f"import_{name}")(cfg.data_root, registry=registry, **kwargs)
    if not kwargs and cfg.use_import_cache:
        write_dataset(rows, cache)
    return rows


def log_run(name: str, split: str, model: str, metrics: dict, frame: pd.DataFrame, params: dict, kind: str,
            extra: dict[str, pd.DataFrame]) -> str:
    """One MLflow run: metrics ``test/<scope>/<metric>``, parity plot, error CDF, bars, predictions. No model logged."""
    with mlflow.start_run(run_name=f"{name}/{split}/{model}") as run, tempfile.TemporaryDirectory() as tmp:
        tmp, title, sym = Path(tmp), f"{name} {split} {model}", kind != "runtime"
        mlflow.set_tags({"dataset": name, "split": split, "model": model})
        mlflow.log_params(params)
        for scope, values in metrics.items():
            mlflow.log_metrics({tracking._metric_key("test", str(scope), k): float(v)
                                for k, v in values.items() if v is not None and np.isfinite(v)})
        if kind != "classify" and len(frame):
            y, p, g, shift = frame["y"].to_numpy(float), frame["pred"].to_numpy(float), frame["group"].to_numpy(), float(sym)
            unit = "value + 1" if sym else "runtime (ms)"  # zero-heavy targets: y + 1 on log axes
            parity_plot(g, y + shift, np.maximum(p + shift, 1e-12), title, tmp / "parity.png", f"true {unit}", f"predicted {unit}")
            error_cdf_plot(g, y, p, f"{title}: error CDF", tmp / "error_cdf.png", symmetric=sym)
            bars = ({t: metrics[t]["smape"] for t in FPGA_TARGETS} if sym else  # per hardware, not per op family
                    {h: m["mape"] for h, m in metrics.items() if h != "all" and not h.startswith("family:")})
            bar_plot(bars, "SMAPE (%)" if sym else "MAPE (%)", title, tmp / "per_group.png")
        for fname, df in {"predictions.csv": frame, **extra}.items():
            df.to_csv(tmp / fname, index=False)
        for f in tmp.iterdir():
            mlflow.log_artifact(str(f), artifact_path="eval")
        return run.info.run_id


def run(cfg: DictConfig) -> list[dict]:
    t_start = time.perf_counter()
    if cfg.tiny:  # the dataset's own seconds-long settings (dataset.tiny) replace its defaults
        cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
        cfg.dataset = OmegaConf.merge(cfg.dataset, cfg.dataset.get("tiny") or {})
    name = cfg.dataset.name
    if name not in PROTOCOLS:
        raise DatasetError(f"unknown dataset {name!r}; known: {', '.join(PROTOCOLS)}")
    out = Path(cfg.paths.output_dir).resolve()
    registry = HardwareRegistry.from_dir(cfg.paths.hardware_dir or CONF_DIR)
    rows = load_rows(cfg, out, registry)
    uri = tracking.setup(cfg.mlflow, out)
    base_params = tracking.flat_params(cfg, ["dataset"]) | {"seed": str(cfg.seed), "dataset_sha256": dataset_hash(rows)}
    # the selected models with the dataset's hyper-parameter overrides (dataset.model_params)
    mcfgs = {m: OmegaConf.merge(c, (cfg.dataset.get("model_params") or {}).get(m) or {}) for m, c in cfg.model.items()}
    models = {m: (lambda c=c, **kw: instantiate(c, _convert_="all", **kw)) for m, c in mcfgs.items()}

    def emit(split, model, metrics, frame_rows, y, pred, seconds, extra=None, kind="runtime"):
        if kind == "resource":
            frame = frame_rows
        elif kind == "classify":  # labels: no parity plot
            frame = frame_rows[["k", "n", "precision_bits"]].assign(group="all", y=y, pred_ok=pred)
        else:
            frame = frame_rows[[c for c in DESCRIBE + ["config"] if c in frame_rows and frame_rows[c].notna().any()]]
            frame = frame.assign(group=frame_rows["hardware"].to_numpy(), y=y, pred=pred)
        params = base_params | {"model.name": model, "split": split, **{f"model.{k}": str(v) for k, v in (
            OmegaConf.to_container(mcfgs[model]) if model in mcfgs else {}).items()}}
        run_id = log_run(name, split, model, metrics, frame, params, kind, extra or {})
        print(f"{name} / {split} / {model}: {seconds:.1f} s, run {run_id}")
        return {"dataset": name, "split": split, "model": model, "metrics": metrics, "run_id": run_id}

    results = PROTOCOLS[name](cfg.dataset, int(cfg.seed), rows, registry, models, emit, out)
    table, path = summary_table(results), out / "public_eval" / f"{name}_summary.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(table + "\n")
    print(table)
    print(f"summary -> {path}; MLflow store {uri} (experiment {cfg.mlflow.experiment}); "
          f"wall {time.perf_counter() - t_start:.0f} s")
    return results


@hydra.main(version_base="1.3", config_path="../conf", config_name="evaluate")
def main(cfg: DictConfig) -> None:
    try:
        run(cfg)
    except (DatasetError, ValueError, KeyError) as exc:
        print(f"evaluate: error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
