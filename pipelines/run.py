"""Main job: collect -> featurize -> train -> calibrate -> evaluate -> track -> register (``conf/run.yaml``).

    python -m pipelines.run                               # this CPU + simulated GPUs, a local sqlite MLflow store
    python -m pipelines.run debug=tiny                    # a run in seconds
    python -m pipelines.run target=peak_mem_bytes         # another target (conf/target/)
    python -m pipelines.run 'collect.backends=[cuda]'     # other backends (conf/collect/backend/)
    python -m pipelines.run -m hparams_search=xgb_optuna  # an Optuna sweep; main returns the objective

Collects the rows of ``collect.backends``, keeps those that have the target, then the one library path
(``pipelines.experiment.run_experiment``) fits, calibrates, scores, logs and registers; ``pipelines.report`` prints.
A target no collected row has, or an unknown backend or split, is one error line and exit status 2.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import time
import warnings

import hydra
from omegaconf import DictConfig

from data.backends.reference import training_summary
from data.collect import collect_from_config
from data.schema import dataset_hash
from data.store import write_dataset
from pipelines import experiment, report, tracking

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
warnings.filterwarnings("ignore", category=UserWarning, module=r"mlflow\.")
logging.getLogger("mlflow").setLevel(logging.ERROR)


def run(cfg: DictConfig) -> experiment.Experiment:
    t0 = time.perf_counter()
    out, registry = experiment.output_dir(cfg), experiment.hardware_registry(cfg)
    target = experiment.Target.from_config(cfg.target)
    load = functools.partial(experiment.load_option, "collect/backend")
    rows, specs = collect_from_config(cfg.collect, registry, progress=cfg.progress, load=load)
    for spec in specs:
        if spec.id not in registry:  # e.g. the detected CPU: its measured peaks feed the features
            registry.add(spec)
    experiment.rows_with_target(rows, target, cfg.collect.backends)  # fails before the slow MLIR export
    report.console.print(training_summary(rows), soft_wrap=True)  # what the models train on: real or simulated
    if cfg.features.mlir.enabled:  # MLIR per distinct workload (features/mlir) measured here, its sha256 in each row
        from features.mlir import attach_mlir

        here = (rows["backend"] != "reference").to_numpy()  # the pack's replayed rows: thousands of shapes, no MLIR
        part, stats = attach_mlir(rows[here], out / cfg.features.mlir.store, progress=cfg.progress)
        rows.loc[here, "mlir_sha256"] = part["mlir_sha256"].to_numpy()
        report.console.print(
            f"MLIR: {stats['distinct']} distinct workloads, {stats['exported']} exported, "
            f"{stats['failed']} failed ({stats['seconds']:.1f} s) -> {out / cfg.features.mlir.store}"
        )
    digest = dataset_hash(rows)
    path = write_dataset(rows, out / "datasets" / f"measurements-{time.strftime('%Y%m%d-%H%M%S')}-{digest[:8]}.parquet")
    ok, note = experiment.rows_with_target(rows, target, cfg.collect.backends)
    report.collected(rows, path, note)
    exp = experiment.run_experiment(
        cfg,
        ok,
        registry,
        target,
        dataset={"rows": rows, "source": str(path), "digest": digest},
        params=tracking.flat_params(cfg, ["collect", "split", "interval"]) | {"target": target.name, "seed": cfg.seed},
        note=report.console.print,
    )
    report.main_job(exp, cfg, time.perf_counter() - t0)
    return exp


@hydra.main(version_base="1.3", config_path="../conf", config_name="run")
def main(cfg: DictConfig) -> float:
    try:
        return run(cfg).objective()
    except (experiment.TargetError, ValueError) as exc:  # a target no row has, an unknown backend / split / model
        print(f"run: error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
