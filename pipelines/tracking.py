"""MLflow tracking and registry: it only logs and registers. One run per model (:func:`log_run`: params, metrics
``<split>/<scope>/<metric>``, ``eval/`` files, the served pyfunc), and the ``champion`` alias lifecycle.

Registry lifecycle (:func:`register`): every training run registers its best model as a new version;
the version carries its held-out metrics (``test_<metric>``) and the identity of the held-out split
(``split_name``, ``split_seed``, ``split_test_size``, ``dataset_sha256``, ``heldout_shapes_sha256``) as
tags. The alias (``champion``) moves to the new version only if it is strictly better than the current
champion *on the same held-out rows*:

* same split identity (all five tags equal): the champion's stored ``test_<metric>`` tag is compared;
* otherwise the champion is loaded from the registry and re-evaluated on this run's held-out rows, and
  both are compared there (on the rows the champion can featurize, e.g. hardware it knows). Caveat: the
  old champion may have been trained on some of these rows (another split or dataset), which favours
  it; the challenger then has to beat an optimistic score, so promotion errs on the side of keeping.

The decision and the numbers it used are stored as tags on the new version (``champion_decision``,
``champion_compared_on``, ``champion_<metric>``) and :func:`list_versions` shows them.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig, OmegaConf

from models.base import CostModel
from models.evaluate import regression_metrics

# direction of each selectable held-out metric
LOWER_IS_BETTER = {"mape": True, "medape": True, "r2_log": False, "kendall_tau": False}
SPLIT_TAGS = ("split_name", "split_seed", "split_test_size", "dataset_sha256", "heldout_shapes_sha256")


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


def machine() -> str:
    """Where a run ran: CPU model, cores, OS (the ``machine`` tag; the results page quotes it)."""
    import os
    import platform

    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            model = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), model)
    except OSError:
        pass
    return (f"{model}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
            f"python {platform.python_version()}")


def _metric_key(key: str) -> str:
    return "/".join(re.sub(r"[^A-Za-z0-9_\-. :]", "_", p) for p in key.split("/"))


def sweep_trial_tags(name: str) -> dict[str, str]:
    """In a Hydra multirun (e.g. ``-m hparams_search=xgb_optuna``): tags naming the trial (number, sweep folder,
    overrides) and the run name ``<name>-trial<N>`` (``mlflow.runName``); else nothing."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return {}
    hc = HydraConfig.get()
    return {"sweep_trial": str(hc.job.num), "sweep_dir": str(hc.sweep.dir),
            "sweep_overrides": " ".join(hc.overrides.task)[:5000], "mlflow.runName": f"{name}-trial{hc.job.num}"}


@dataclass
class Logged:
    run_id: str
    model_uri: str | None = None  # the served pyfunc, when one was logged


@dataclass
class Served:
    """A fitted model to log as the pyfunc (``models.pyfunc``): the model, its hardware registry, its meta
    (``models.pyfunc.make_meta``) and an input example."""

    model: CostModel
    registry: object
    meta: dict
    input_example: pd.DataFrame


def log_run(name: str, *, metrics: dict[str, float], params: dict, tags: dict, files=None, dataset: dict | None = None,
            served: Served | None = None) -> Logged:
    """One MLflow run: ``tags``, ``params`` (+ ``model.name``), ``metrics`` (flat ``<split>/<scope>/<metric>`` keys;
    None values are left out), the ``eval/`` files ``files(directory) -> (more metrics, paths)`` writes, the
    ``dataset`` (``{"rows", "source", "digest"}``) as its input, and ``served`` as the pyfunc ``model``.

    Returns the run id and the logged model's URI. In a sweep trial the run is named ``<name>-trial<N>``
    (:func:`sweep_trial_tags`)."""
    from models.pyfunc import CostModelPyfunc, code_paths, signature, write_artifacts

    trial = sweep_trial_tags(name)
    with mlflow.start_run(run_name=trial.pop("mlflow.runName", name)) as run, tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        mlflow.set_tags({k: str(v) for k, v in {**tags, **trial, "machine": machine()}.items()})
        mlflow.log_params({**{k: str(v) for k, v in params.items()}, "model.name": name})
        if dataset is not None:
            mlflow.log_input(mlflow.data.from_pandas(dataset["rows"], source=dataset["source"], name="measurements",
                                                     digest=dataset["digest"][:36]), context="training")
        metrics = dict(metrics)
        if files is not None:
            (tmp / "eval").mkdir()
            more, paths = files(tmp / "eval")
            metrics.update(more)
            for f in paths:
                mlflow.log_artifact(str(f), artifact_path="eval")
        stamp = int(time.time() * 1000)
        batch = [mlflow.entities.Metric(_metric_key(k), float(v), stamp, 0)
                 for k, v in metrics.items() if v is not None]
        for i in range(0, len(batch), 900):  # MLflow's batch limit is 1000 metrics
            mlflow.MlflowClient().log_batch(run.info.run_id, metrics=batch[i:i + 900])
        if served is None:
            return Logged(run.info.run_id)
        artifacts = write_artifacts(tmp / "pyfunc", served.model, served.registry, served.meta)
        info = mlflow.pyfunc.log_model(name="model", python_model=CostModelPyfunc(), artifacts=artifacts,
                                       code_paths=code_paths(tmp / "code"), signature=signature(served.meta),
                                       input_example=served.input_example, pip_requirements=pip_requirements())
        mlflow.set_tag("model_uri", info.model_uri)
        return Logged(run.info.run_id, f"runs:/{run.info.run_id}/model" if info.model_uri is None else info.model_uri)


def log_metrics(run_id: str, metrics: dict[str, float]) -> None:
    """Add metrics to a finished run (e.g. a sweep's objective, known once every model is scored)."""
    stamp = int(time.time() * 1000)
    mlflow.MlflowClient().log_batch(run_id, metrics=[mlflow.entities.Metric(_metric_key(k), float(v), stamp, 0)
                                                     for k, v in metrics.items() if v is not None])


def split_identity(name: str, seed: int, test_size: float, dataset_digest: str, heldout_shape_ids) -> dict[str, str]:
    """What makes two held-out evaluations comparable: the split rule, its inputs, and the rows it held out."""
    shapes = "\n".join(sorted({str(s) for s in heldout_shape_ids}))
    return {"split_name": str(name), "split_seed": str(seed), "split_test_size": str(test_size),
            "dataset_sha256": dataset_digest, "heldout_shapes_sha256": hashlib.sha256(shapes.encode()).hexdigest()}


@dataclass
class Decision:
    version: str
    promoted: bool
    reason: str
    previous: str | None  # the champion's version before this run, if any


def _better(metric: str, new: float, old: float) -> bool:
    return new < old if LOWER_IS_BETTER.get(metric, True) else new > old


def _rescore_champion(uri: str, heldout: pd.DataFrame, target: str, metric: str) -> tuple[float, float, int]:
    """Load the champion and score it and the challenger on the held-out rows it can featurize.

    ``heldout`` holds workload descriptions, the target and the challenger's ``pred_<target>``.
    Rows are tried per hardware id, so hardware the champion never knew is left out rather than
    failing the whole comparison. Returns (champion value, challenger value, rows compared).
    """
    champion = mlflow.pyfunc.load_model(uri)
    describe = [c for c in heldout.columns if c not in (target, f"pred_{target}")]
    kept, preds = [], []
    for _, group in heldout.groupby("hardware", sort=True):
        try:
            out = champion.predict(group[describe].reset_index(drop=True))
        except MlflowException:
            continue
        kept.append(group)
        preds.append(out[target].to_numpy(float))
    if not kept:
        raise ValueError("the champion cannot featurize any held-out row (no hardware in common)")
    rows = pd.concat(kept)
    champ = regression_metrics(rows[target], np.concatenate(preds))[metric]
    new = regression_metrics(rows[target], rows[f"pred_{target}"])[metric]
    return champ, new, len(rows)


def register(model_uri: str, name: str, alias: str, metrics: dict[str, float], *, split: dict[str, str],
             heldout: pd.DataFrame, target: str, select_metric: str, model_name: str = "") -> Decision:
    """Register ``model_uri`` as a new version of ``name``; move ``alias`` only if it beats the champion.

    ``metrics`` are the held-out metrics over all hardware, ``split`` the split identity
    (:func:`split_identity`), ``heldout`` this run's held-out rows with the challenger's predictions.
    """
    client = MlflowClient()
    try:
        current = client.get_model_version_by_alias(name, alias)
    except MlflowException:
        current = None
    tags = {f"test_{k}": f"{v:.6g}" for k, v in metrics.items()} | split | {"select_metric": select_metric,
                                                                             "model": model_name}
    version = mlflow.register_model(model_uri, name, tags=tags).version
    new_value = metrics[select_metric]
    if current is None:
        promoted, reason = True, f"first version with alias @{alias}"
    else:
        same = all(current.tags.get(k) == split[k] for k in SPLIT_TAGS) and f"test_{select_metric}" in current.tags
        try:
            if same:
                old_value, how = float(current.tags[f"test_{select_metric}"]), "stored tags, same held-out split"
            else:
                old_value, new_value, n = _rescore_champion(f"models:/{name}/{current.version}", heldout, target,
                                                            select_metric)
                how = f"champion re-evaluated on this run's held-out rows (n={n})"
            client.set_model_version_tag(name, version, f"champion_{select_metric}", f"{old_value:.6g}")
            client.set_model_version_tag(name, version, "champion_compared_on", how)
            promoted = _better(select_metric, new_value, old_value)
            reason = (f"{select_metric} {new_value:.4g} vs champion v{current.version} {old_value:.4g} ({how}): "
                      + ("promoted" if promoted else "champion kept"))
        except Exception as exc:  # an unloadable or incompatible champion cannot defend its alias
            promoted = True
            reason = f"champion v{current.version} could not be evaluated ({type(exc).__name__}: " \
                     f"{str(exc).splitlines()[0][:200]}): promoted"
    client.set_model_version_tag(name, version, "champion_decision", reason)
    if promoted:
        client.set_registered_model_alias(name, alias, version)
    return Decision(version=version, promoted=promoted, reason=reason,
                    previous=None if current is None else current.version)


def list_versions(name: str | None = None) -> pd.DataFrame:
    """Every registered version (or those of ``name``): aliases, held-out metrics, split, decision."""
    client = MlflowClient()
    rows = []
    for rm in client.search_registered_models():
        if name and rm.name != name:
            continue
        aliases: dict[str, list[str]] = {}
        for a, v in (rm.aliases or {}).items():
            aliases.setdefault(str(v), []).append(a)
        for mv in client.search_model_versions(f"name='{rm.name}'"):
            t = mv.tags
            split = (f"{t['split_name']}/seed={t.get('split_seed')}/test={t.get('split_test_size')}/"
                     f"{t.get('heldout_shapes_sha256', '')[:8]}" if "split_name" in t else "")
            rows.append({"name": rm.name, "version": int(mv.version),
                         "aliases": ",".join(sorted(aliases.get(str(mv.version), []))) or "-",
                         "model": t.get("model", ""), **{f"test_{k}": t.get(f"test_{k}", "")
                                                         for k in ("mape", "medape", "kendall_tau", "coverage90")},
                         "split": split, "decision": t.get("champion_decision", "")})
    cols = ["name", "version", "aliases", "model", "test_mape", "test_medape", "test_kendall_tau", "test_coverage90",
            "split", "decision"]
    return pd.DataFrame(rows, columns=cols).sort_values(["name", "version"], ignore_index=True)
