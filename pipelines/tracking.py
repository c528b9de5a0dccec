"""MLflow tracking and registry: one run per model, artifacts, and the ``champion`` alias."""
from __future__ import annotations

import importlib.metadata
import json
import re
import tempfile
from pathlib import Path

import mlflow
import pandas as pd
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig, OmegaConf

from models.base import CostModel
from models.evaluate import error_cdf_plot, parity_plot
from models.pyfunc import CostModelPyfunc, save_artifacts, signature


def tracking_uri(configured: str | None, output_dir: Path) -> str:
    """The configured URI, or the embedded default: a sqlite file under the output folder."""
    return configured or f"sqlite:///{(output_dir / 'mlflow.db').resolve()}"


def setup(cfg_mlflow: DictConfig, output_dir: Path) -> str:
    uri = tracking_uri(cfg_mlflow.tracking_uri, output_dir)
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    if mlflow.get_experiment_by_name(cfg_mlflow.experiment) is None:
        # keep artifacts of the embedded store beside it; a server decides its own artifact root
        location = (output_dir / "mlartifacts").resolve().as_uri() if uri.startswith("sqlite:") else None
        mlflow.create_experiment(cfg_mlflow.experiment, artifact_location=location)
    mlflow.set_experiment(cfg_mlflow.experiment)
    return uri


def flat_params(cfg: DictConfig, keys: list[str]) -> dict[str, str]:
    """Flatten the parts of the Hydra config that define a run into MLflow params."""
    out: dict[str, str] = {}

    def walk(prefix: str, node) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            out[prefix] = json.dumps(node) if isinstance(node, (list, tuple)) else str(node)

    for key in keys:
        walk(key, OmegaConf.to_container(cfg[key], resolve=True))
    return out


def pip_requirements() -> list[str]:
    """The pinned requirements of this package, for the logged model's environment."""
    try:
        reqs = importlib.metadata.requires("costmodel") or []
    except importlib.metadata.PackageNotFoundError:
        return ["mlflow", "torch", "pandas", "scikit-learn", "xgboost-cpu", "pyyaml"]
    return [r for r in reqs if "extra ==" not in r]


def _metric_key(*parts: str) -> str:
    return "/".join(re.sub(r"[^A-Za-z0-9_\-. :]", "_", p) for p in parts)


def log_model_run(*, name: str, model: CostModel, metrics: dict[str, dict[str, float]], params: dict[str, str],
                  test_frame: pd.DataFrame, target: str, registry, input_example: pd.DataFrame,
                  dataset: pd.DataFrame, dataset_source: str, dataset_digest: str, fit_seconds: float) -> str:
    """Log one model's run (params, metrics, plots, held-out predictions, pyfunc); returns the model URI."""
    with mlflow.start_run(run_name=name) as run, tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        mlflow.set_tags({"model": name, "target": target, "dataset_sha256": dataset_digest})
        mlflow.log_params({**params, "model.name": name})
        mlflow.log_input(mlflow.data.from_pandas(dataset, source=dataset_source, name="measurements",
                                                 digest=dataset_digest[:36]), context="training")
        for scope, values in metrics.items():
            mlflow.log_metrics({_metric_key("test", scope, k): v for k, v in values.items()})
        mlflow.log_metric("fit_seconds", fit_seconds)
        y, pred, hw = test_frame[target], test_frame[f"pred_{target}"], test_frame["hardware"]
        parity_plot(hw, y, pred, f"{name}: held-out shapes", tmp / "parity.png")
        error_cdf_plot(hw, y, pred, f"{name}: held-out error CDF", tmp / "error_cdf.png")
        test_frame.to_csv(tmp / "heldout_predictions.csv", index=False)
        for f in ("parity.png", "error_cdf.png", "heldout_predictions.csv"):
            mlflow.log_artifact(str(tmp / f), artifact_path="eval")
        artifacts = save_artifacts(model, registry, target, tmp / "pyfunc")
        info = mlflow.pyfunc.log_model(name="model", python_model=CostModelPyfunc(), artifacts=artifacts,
                                       signature=signature(target), input_example=input_example,
                                       pip_requirements=pip_requirements())
        mlflow.set_tag("model_uri", info.model_uri)
        return f"runs:/{run.info.run_id}/model" if info.model_uri is None else info.model_uri


def register(model_uri: str, name: str, alias: str, metrics: dict[str, float]) -> str:
    """Register ``model_uri`` as a new version of ``name`` and point ``alias`` at it; returns the version."""
    version = mlflow.register_model(model_uri, name, tags={f"test_{k}": f"{v:.6g}" for k, v in metrics.items()})
    MlflowClient().set_registered_model_alias(name, alias, version.version)
    return version.version
