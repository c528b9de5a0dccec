"""Power surrogate on the measured H200 kernels: import -> featurize -> evaluate -> track -> register
(``conf/power.yaml``).

    python -m pipelines.power                                  # four kinds: analytical, xgb, residual, hybrid
    python -m pipelines.power multi_target=false               # one model per target instead of one joint model
    python -m pipelines.power 'model=[power_analytical,power_residual]' split.folds=3

Imports ``../shared/data/hopper/h200_kernels.csv`` (``data.importers.hopper``), then the one library path
(``pipelines.experiment``) with target ``power`` (runtime_ms and power_w predicted, energy_j derived = power x
runtime of the same prediction): each model is scored out of fold on unseen shapes (``held_out_shapes_kfold``) and
on unseen op families (``held_out_family``); the registered fit is calibrated by cross-conformal over the training
shapes and scored on the held-out shapes (``test``); the best on unseen-shape power MedAPE is registered as
``costmodel-power``. Only one GPU is measured, so transfer to another GPU cannot be validated here: the spec-only
predictions show that the models produce them from specs alone, nothing more.
"""

from __future__ import annotations

import logging
import os
import time
import warnings

import hydra
from omegaconf import DictConfig

from data.importers.hopper import import_hopper
from models.evaluate import noise_floor
from models.power import spec_only
from pipelines import experiment, report, tracking

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
warnings.filterwarnings("ignore", category=UserWarning, module=r"mlflow\.")
logging.getLogger("mlflow").setLevel(logging.ERROR)


def run(cfg: DictConfig) -> experiment.Experiment:
    t0 = time.perf_counter()
    registry, target = experiment.hardware_registry(cfg), experiment.Target.from_config(cfg.target)
    rows, _ = experiment.rows_with_target(import_hopper(cfg.data_root, registry), target, ["import"])
    floor_by, floor_all = noise_floor(rows, target.columns), noise_floor(rows, target.columns, by=None).iloc[0]
    report.console.print(
        f"imported {len(rows)} H200 rows ({rows['shape_id'].nunique()} shapes, "
        f"{rows['family'].nunique()} op families) from {cfg.data_root or 'shared/data'}/hopper; "
        f"multi_target={cfg.multi_target}"
    )
    exp = experiment.run_experiment(
        cfg,
        rows,
        registry,
        target,
        extras=report.power_extras(rows, floor_by, floor_all),
        note=report.console.print,
        params=tracking.flat_params(cfg, ["split", "interval"]) | {"seed": cfg.seed, "multi_target": cfg.multi_target},
        tags={"dataset": "hopper/h200_kernels.csv", "multi_target": cfg.multi_target},
    )
    best = exp.results[exp.best].fits["test"].calibrated
    spec = spec_only(best.model, registry, list(cfg.spec_only_hardware), dict(zip(target.columns, best.q)))
    report.power(exp, cfg, rows, floor_all, spec, time.perf_counter() - t0)
    return exp


@hydra.main(version_base="1.3", config_path="../conf", config_name="power")
def main(cfg: DictConfig) -> float:
    return run(cfg).objective()


if __name__ == "__main__":
    main()
