"""Power surrogate on the measured H200 kernels: import -> featurize -> evaluate -> track -> register.

    python -m pipelines.power                    # see conf/power.yaml
    python -m pipelines.power multi_target=false # one model per target (runtime, power) instead of one joint model

Thin entry point: import ``../shared/data/hopper/h200_kernels.csv`` (``data.importers.hopper``), featurize
(``features.tabular.PowerFeaturizer``), run the protocol of ``models/power_eval.py`` per model kind (unseen shapes
out of fold, unseen op family, the registered variant with conformal intervals per target), log one MLflow run
per kind (metrics, plots, tables, a PowerPyfunc), register the best by cross-validated power MedAPE as
``costmodel-power`` (``pipelines.tracking.register``: the alias moves only if it beats the champion) and print
the tables. energy_j is DERIVED = power x runtime of the same prediction.

Unseen GPU: only one GPU is measured, so transfer to another GPU cannot be validated here; the spec-only
predictions show that the models produce them from specs alone, nothing more.
"""
from __future__ import annotations

import logging
import os
import tempfile
import time
import warnings
from pathlib import Path

import hydra
import pandas as pd
from omegaconf import DictConfig

from data.hardware import CONF_DIR, HardwareRegistry
from data.importers.hopper import import_hopper
from data.schema import dataset_hash
from data.workloads import SHAPE_PARAMS
from features.tabular import PowerFeaturizer
from models.power_eval import TARGETS, console, evaluate_kind, noise_floor, plots, print_summary, select_best, spec_only
from models.splits import held_out_shapes

log = logging.getLogger(__name__)
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
warnings.filterwarnings("ignore", category=UserWarning, module=r"mlflow\.")
logging.getLogger("mlflow").setLevel(logging.ERROR)

DESCRIBE = ["op", "hardware", "dtype", *SHAPE_PARAMS]


def _log_kind(kind: str, r: dict, cfg: DictConfig, rows: pd.DataFrame, test, registry, digest, split_id, floor_all) -> str:
    """One MLflow run for a model kind: params, metrics, plots, tables, the PowerPyfunc. Returns the model URI."""
    import mlflow

    from models.pyfunc import PowerPyfunc, code_paths, power_signature, save_power_artifacts
    from pipelines import tracking

    with mlflow.start_run(run_name=f"power-{kind}") as run, tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        mlflow.set_tags({"model": kind, "target": "power_w,runtime_ms (energy_j derived)", "multi_target": str(r["model"].joint),
                         "dataset_sha256": digest, "dataset": "hopper/h200_kernels.csv", **split_id})
        mlflow.log_params({"model.name": kind, "cv.folds": cfg.cv.folds, "seed": cfg.seed, "multi_target": cfg.multi_target,
                           **tracking.flat_params(cfg, ["xgb", "split", "interval"])})
        for t in TARGETS:
            mlflow.log_metrics({f"cv_unseen_shapes/{t}/{k}": v for k, v in r["overall"][t].items()})
            mlflow.log_metrics({f"test/{t}/{k}": v for k, v in r["heldout"][t].items()})
            mlflow.log_metric(f"noise_floor/{t}/medape", float(floor_all[f"noise_{t}"]))
        for rec in r["by_family"].to_dict("records"):
            mlflow.log_metrics({f"unseen_family/{rec['family']}/{t}_medape": rec[f"{t}_medape"] for t in TARGETS})
        r["by_op_dtype"].to_csv(tmp / "power_by_op_dtype.csv", index=False)
        r["by_family"].to_csv(tmp / "unseen_family.csv", index=False)
        rows[DESCRIBE + list(TARGETS)].join(r["oof"].add_prefix("pred_")).to_csv(tmp / "oof_predictions.csv", index=False)
        for f in [*plots(rows, r["oof"], kind, tmp), *(tmp / f for f in ("power_by_op_dtype.csv", "unseen_family.csv",
                                                                          "oof_predictions.csv"))]:
            mlflow.log_artifact(str(f), artifact_path="eval")
        artifacts = save_power_artifacts(r["model"], registry, tmp / "pyfunc", r["intervals"], float(cfg.interval.level))
        info = mlflow.pyfunc.log_model(name="model", python_model=PowerPyfunc(), artifacts=artifacts,
                                       code_paths=code_paths(tmp / "code"), signature=power_signature(),
                                       input_example=rows.loc[test[:3], DESCRIBE].astype({p: float for p in SHAPE_PARAMS}),
                                       pip_requirements=tracking.pip_requirements())
        return info.model_uri or f"runs:/{run.info.run_id}/model"


def run(cfg: DictConfig) -> dict:
    """Run the power job for a composed config; returns tables, metrics, the registered version."""
    from pipelines import tracking

    t_start = time.perf_counter()
    out = Path(cfg.paths.output_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    registry = HardwareRegistry.from_dir(cfg.paths.hardware_dir or CONF_DIR)
    rows = import_hopper(cfg.data_root, registry)
    rows = rows[(rows["status"] == "ok") & rows["power_w"].notna() & rows["energy_j"].notna()].reset_index(drop=True)
    digest = dataset_hash(rows)
    X = PowerFeaturizer(registry).transform(rows)
    console.print(f"imported {len(rows)} H200 rows ({rows['shape_id'].nunique()} shapes, "
                  f"{rows['family'].nunique()} op families) from {cfg.data_root or 'shared/data'}/hopper; "
                  f"multi_target={cfg.multi_target}")
    floor_by, floor_all = noise_floor(rows), noise_floor(rows, by=None).iloc[0]
    # the registered variant's split: held-out shapes, then a calibration fold of whole shapes out of train
    train, test = held_out_shapes(rows, float(cfg.split.test_size), int(cfg.seed))
    split_id = tracking.split_identity("held_out_shapes", cfg.seed, cfg.split.test_size, digest, rows.loc[test, "shape_id"])
    uri = tracking.setup(cfg.mlflow, out)
    results: dict[str, dict] = {}
    for kind in cfg.models:
        t0 = time.perf_counter()
        results[kind] = evaluate_kind(kind, cfg, X, rows, train, test, floor_by)
        results[kind]["model_uri"] = _log_kind(kind, results[kind], cfg, rows, test, registry, digest, split_id, floor_all)
        log.info("%s: %.1f s", kind, time.perf_counter() - t0)
    best = select_best(results, cfg.select_metric)
    heldout_frame = rows.loc[test, DESCRIBE + ["power_w"]].assign(pred_power_w=results[best]["test_pred"]["power_w"].to_numpy())
    decision = tracking.register(results[best]["model_uri"], cfg.register.name, cfg.register.alias,
                                 results[best]["heldout"]["power_w"], split=split_id, heldout=heldout_frame,
                                 target="power_w", select_metric=cfg.select_metric, model_name=best)
    spec = spec_only(results[best]["model"], registry, list(cfg.spec_only_hardware), results[best]["intervals"])
    wall = time.perf_counter() - t_start
    print_summary(results, best, floor_all, spec, cfg, uri, decision, wall)
    return {"results": results, "best": best, "version": decision.version, "decision": decision.reason,
            "noise_floor": floor_by, "spec_only": spec, "tracking_uri": uri, "rows": rows, "wall_seconds": wall}


@hydra.main(version_base="1.3", config_path="../conf", config_name="power")
def main(cfg: DictConfig) -> float:
    summary = run(cfg)
    return summary["results"][summary["best"]]["overall"]["power_w"][cfg.select_metric]


if __name__ == "__main__":
    main()
