"""Evaluate tabular surrogates on real public data (NeuSight, Kernel Tuner, wa-hls4ml), one MLflow run per
(dataset, split, model), in the local sqlite store under the output folder. Nothing is registered.

    python -m pipelines.evaluate dataset=neusight   model=[rf,xgb,roofline]
    python -m pipelines.evaluate dataset=kerneltuner model=[rf,xgb]
    python -m pipelines.evaluate dataset=wa_hls4ml  model=[rf,xgb]

Imports the rows (cached), builds the models (``pipelines.experiment``, with the dataset's hyper-parameters), runs
the dataset's protocol (``models/public_eval.py``: splits, fits, metrics), logs each (split, model) record under
``<split>/<scope>/<metric>`` and prints the summary (``pipelines.report``). ``tiny=true``: the dataset's ``tiny``
block (seconds-long settings) over its defaults.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import time
import warnings
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from data.hardware import HardwareRegistry
from data.importers import DatasetError
from data.schema import dataset_hash
from data.store import read_dataset, write_dataset
from models.public_eval import PROTOCOLS
from pipelines import experiment, report, tracking

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
warnings.filterwarnings("ignore", category=UserWarning, module=r"mlflow\.")
logging.getLogger("mlflow").setLevel(logging.ERROR)


def load_rows(cfg: DictConfig, out: Path, registry: HardwareRegistry):
    """Imported rows of ``cfg.dataset.name``; a full import is cached as ``<out>/datasets/import/<name>.parquet``."""
    name, kwargs = cfg.dataset.name, OmegaConf.to_container(OmegaConf.create(cfg.dataset.get("import_kwargs") or {}))
    if cfg.dataset.get("loader"):  # rows from a function, e.g. the shipped pack (data.reference.load_reference)
        import inspect

        from hydra.utils import get_method

        loader = get_method(cfg.dataset.loader)
        takes = inspect.signature(loader).parameters
        return loader(cfg.data_root, cfg.dataset) if "data_root" in takes else loader()
    cache = out / "datasets" / "import" / f"{name}.parquet"
    if not kwargs and cfg.use_import_cache and cache.exists():
        return read_dataset(cache)
    importer = getattr(importlib.import_module(f"data.importers.{name}"), f"import_{name}")
    rows = importer(cfg.data_root, registry=registry, **kwargs)
    if not kwargs and cfg.use_import_cache:
        write_dataset(rows, cache)
    return rows


def run(cfg: DictConfig) -> list[dict]:
    t0 = time.perf_counter()
    if cfg.tiny:
        cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
        cfg.dataset = OmegaConf.merge(cfg.dataset, cfg.dataset.get("tiny") or {})
    name = cfg.dataset.name
    if name not in PROTOCOLS:
        raise DatasetError(f"unknown dataset {name!r}; known: {', '.join(PROTOCOLS)}")
    out, registry = experiment.output_dir(cfg), experiment.hardware_registry(cfg)
    rows = load_rows(cfg, out, registry)
    uri = tracking.setup(cfg.mlflow, out)
    entries = experiment.model_entries(cfg, overrides=OmegaConf.to_container(cfg.dataset.get("model_params") or {}))
    models = {m: (lambda e=e, **kw: experiment.build(e, **kw)) for m, e in entries.items()}
    records = PROTOCOLS[name](cfg.dataset, int(cfg.seed), rows, registry, models, out)
    for r in records:
        if "metrics" in r and "files" not in r:  # a protocol may write its own eval/ files
            r["files"] = report.public_eval_files(r, name)
            r["params"] = entries[r["model"]].params() if r["model"] in entries else {}
    params = tracking.flat_params(cfg, ["dataset"]) | {"seed": cfg.seed, "dataset_sha256": dataset_hash(rows)}
    experiment.log_split_runs(records, params=params, tags={"dataset": name})
    report.public_eval(records, name, out, uri, cfg.mlflow.experiment, time.perf_counter() - t0)
    return records


@hydra.main(version_base="1.3", config_path="../conf", config_name="evaluate")
def main(cfg: DictConfig) -> None:
    try:
        run(cfg)
    except (DatasetError, ValueError, KeyError) as exc:
        print(f"evaluate: error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
