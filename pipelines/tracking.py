"""MLflow tracking and registry: one run per model, artifacts, and the ``champion`` alias lifecycle.

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
from models.evaluate import error_cdf_plot, parity_plot, regression_metrics
from models.pyfunc import CostModelPyfunc, code_paths, save_artifacts, signature

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


def _metric_key(*parts: str) -> str:
    return "/".join(re.sub(r"[^A-Za-z0-9_\-. :]", "_", p) for p in parts)


def log_model_run(*, name: str, model: CostModel, metrics: dict[str, dict[str, float]], params: dict[str, str],
                  test_frame: pd.DataFrame, target: str, registry, input_example: pd.DataFrame,
                  dataset: pd.DataFrame, dataset_source: str, dataset_digest: str, fit_seconds: float,
                  interval: dict[str, float], split: dict[str, str], python_model=None, model_signature=None,
                  extra_meta: dict | None = None) -> str:
    """Log one model's run (params, metrics, plots, held-out predictions, pyfunc); returns the model URI.

    ``interval`` is ``{"level", "log_halfwidth", "by_hardware", "n"}`` from the conformal calibration; ``split`` the
    held-out split identity (:func:`split_identity`), logged as tags. ``python_model`` / ``model_signature`` /
    ``extra_meta`` default to the tabular pyfunc (whole-network models pass :class:`~models.pyfunc.NetworkPyfunc`).
    """
    with mlflow.start_run(run_name=name) as run, tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        mlflow.set_tags({"model": name, "target": target, "dataset_sha256": dataset_digest, **split})
        mlflow.log_params({**params, "model.name": name})
        mlflow.log_input(mlflow.data.from_pandas(dataset, source=dataset_source, name="measurements",
                                                 digest=dataset_digest[:36]), context="training")
        for scope, values in metrics.items():
            mlflow.log_metrics({_metric_key("test", scope, k): v for k, v in values.items()})
        mlflow.log_metrics({"fit_seconds": fit_seconds, "calibration/all/log_halfwidth": interval["log_halfwidth"],
                            "calibration/all/n": interval["n"],
                            **{_metric_key("calibration", hw, "log_halfwidth"): q
                               for hw, q in interval["by_hardware"].items()}})
        y, pred, hw = test_frame[target], test_frame[f"pred_{target}"], test_frame["hardware"]
        parity_plot(hw, y, pred, f"{name}: held-out shapes", tmp / "parity.png")
        error_cdf_plot(hw, y, pred, f"{name}: held-out error CDF", tmp / "error_cdf.png")
        test_frame.to_csv(tmp / "heldout_predictions.csv", index=False)
        for f in ("parity.png", "error_cdf.png", "heldout_predictions.csv"):
            mlflow.log_artifact(str(tmp / f), artifact_path="eval")
        artifacts = save_artifacts(model, registry, target, tmp / "pyfunc", log_halfwidth=interval["log_halfwidth"],
                                   level=interval["level"], by_hardware=interval["by_hardware"], extra_meta=extra_meta)
        info = mlflow.pyfunc.log_model(name="model", python_model=python_model or CostModelPyfunc(),
                                       artifacts=artifacts, code_paths=code_paths(tmp / "code"),
                                       signature=model_signature or signature(target), input_example=input_example,
                                       pip_requirements=pip_requirements())
        mlflow.set_tag("model_uri", info.model_uri)
        return f"runs:/{run.info.run_id}/model" if info.model_uri is None else info.model_uri


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


# --------------------------------------------------------------------------- whole-network models (issue #8)
def calibration_fold(families, size: float, seed: int) -> np.ndarray:
    """Boolean mask of the calibration networks: ``round(size * n)`` of each family's ``n`` networks (at least
    one, and at least one left to fit on when the family has two or more), drawn with a seeded generator."""
    families = np.asarray(families)
    rng = np.random.default_rng(seed)
    mask = np.zeros(len(families), bool)
    for fam in sorted(set(families)):
        idx = np.flatnonzero(families == fam)
        k = min(max(1, round(size * len(idx))), max(1, len(idx) - 1))
        mask[rng.choice(idx, size=k, replace=False)] = True
    return mask


def loo_coverage(y_true, y_pred, level: float) -> float:
    """Held-out check of the split-conformal rule on the calibration fold itself: for each calibration
    network, ``q`` from the *other* ones (``models.conformal.calibrate``), and whether its own log error is
    within it. The interval served uses ``q`` from all of them (one more point), so this is the rule's
    coverage with ``n - 1`` points, not an in-sample figure (which would be >= level by construction)."""
    from models.conformal import calibrate

    y_true, y_pred = np.asarray(y_true, float), np.asarray(y_pred, float)
    if len(y_true) < 2:
        return float("nan")
    s = np.abs(np.log(y_true) - np.log(np.maximum(y_pred, 1e-12)))
    keep = ~np.eye(len(s), dtype=bool)
    return float(np.mean([s[i] <= calibrate(y_true[keep[i]], y_pred[keep[i]], level) for i in range(len(s))]))


def register_network_model(cfg: DictConfig, nets: pd.DataFrame, registry) -> Decision:
    """Fit ``cfg.register.model`` (``gnn`` | ``token_transformer``) on every network but a calibration fold, log it
    and register it as ``cfg.register.name`` (default ``costmodel-network-runtime``); the alias moves only if it
    beats the champion on the same held-out networks (:func:`register`, the one champion rule).

    ``nets``: measured network rows (``op``, ``shape_id``, ``hardware``, ``dtype``, ``runtime_ms``, ``mlir``,
    shapes), as ``pipelines.networks.collect`` returns them. Reads ``cfg.register`` (model, name, alias, experiment,
    calibration_size, level, select_metric), the model's hyper-parameters (``cfg.gnn`` / ``cfg.transformer``,
    ``cfg.tiny_epochs`` when ``cfg.tiny``), ``cfg.seed`` and ``cfg.mlflow``.

    Held out = the calibration fold (``calibration_size`` of each family's networks, seeded): the model never
    sees it in fit; its split-conformal ``q`` (90%, log space) comes from it, its MAPE / MedAPE / Kendall tau are
    the held-out metrics (``test/all/*``), and ``test/all/coverage90`` is :func:`loo_coverage` on it.
    """
    from data.schema import dataset_hash
    from data.workloads import SHAPE_PARAMS
    from models.conformal import calibrate, calibrate_by_group
    from models.gnn import GNNModel
    from models.pyfunc import NETWORK_ENCODERS, NetworkPyfunc, encode_networks, network_signature
    from models.transformer import TransformerModel

    reg = cfg.register
    kinds = {"gnn": (GNNModel, "gnn"), "token_transformer": (TransformerModel, "transformer")}
    if reg.model not in kinds:
        raise ValueError(f"register.model must be one of {', '.join(kinds)} or null, got {reg.model!r}")
    cls, key = kinds[reg.model]
    hparams = {**OmegaConf.to_container(cfg[key], resolve=True), "seed": int(cfg.seed),
               **({"epochs": int(cfg.tiny_epochs)} if cfg.tiny else {})}
    target, level = "runtime_ms", float(reg.level)
    nets = nets.reset_index(drop=True)
    nets = nets.assign(dtype=nets["dtype"] if "dtype" in nets else "float32")
    cal = calibration_fold(nets["op"], float(reg.calibration_size), int(cfg.seed))
    fit = ~cal
    encoding = NETWORK_ENCODERS[reg.model]
    graph_options = OmegaConf.to_container(cfg.graph, resolve=True) if cfg.get("graph") is not None else {}
    X, hardware = encode_networks(nets[["mlir", "hardware", "dtype"]], registry, encoding, graph_options=graph_options)
    y = nets[target].to_numpy(float)

    t0 = time.perf_counter()
    model = cls(**hparams).fit([X[i] for i in np.flatnonzero(fit)], y[fit])
    fit_s = time.perf_counter() - t0
    pred = np.asarray(model.predict([X[i] for i in np.flatnonzero(cal)]), float)
    hw_cal = np.asarray(hardware)[cal]
    q, q_hw = calibrate(y[cal], pred, level), calibrate_by_group(hw_cal, y[cal], pred, level)
    cov_key = f"coverage{round(level * 100)}"
    metrics = {"all": {**regression_metrics(y[cal], pred), cov_key: loo_coverage(y[cal], pred, level)}}
    for hw in sorted(set(hw_cal)):
        m = hw_cal == hw
        metrics[hw] = {**regression_metrics(y[cal][m], pred[m]), cov_key: loo_coverage(y[cal][m], pred[m], level)}

    as_text = nets.astype({c: str for c in nets.columns if nets[c].dtype == object})  # json / dict columns
    described, digest = as_text.drop(columns=["mlir"]), dataset_hash(as_text)
    shapes = [c for c in SHAPE_PARAMS if c in nets.columns]
    split = split_identity("networks-calibration", int(cfg.seed), float(reg.calibration_size), digest,
                           nets.loc[cal, "shape_id"])  # the held-out networks (op + shape)
    cols = ["op", *shapes, "hardware", "dtype"]
    test_frame = nets.loc[cal, cols + [target]].assign(**{f"pred_{target}": pred})
    setup(OmegaConf.create({"tracking_uri": cfg.mlflow.tracking_uri, "experiment": reg.experiment}),
          Path(cfg.paths.output_dir).resolve())
    params = {"register.model": reg.model, "register.calibration_size": str(reg.calibration_size),
              "register.level": str(level), "tiny": str(cfg.tiny), "n_fit": str(int(fit.sum())),
              "n_calibration": str(int(cal.sum())), **{f"{reg.model}.{k}": str(v) for k, v in hparams.items()}}
    uri = log_model_run(
        name=reg.model, model=model, metrics=metrics, params=params, test_frame=test_frame, target=target,
        registry=registry, input_example=nets.loc[np.flatnonzero(cal)[:1], ["mlir", "hardware", "dtype"]],
        dataset=described, dataset_source="pipelines.networks", dataset_digest=digest, fit_seconds=fit_s,
        interval={"level": level, "log_halfwidth": q, "by_hardware": q_hw, "n": float(cal.sum())}, split=split,
        python_model=NetworkPyfunc(), model_signature=network_signature(target),
        extra_meta={"encoder": encoding, "graph": graph_options, "trained_hardware": sorted(set(np.asarray(hardware)[fit])),
                    "heldout": "calibration fold: networks never seen in fit"})
    heldout = nets.loc[cal, ["mlir", "hardware", "dtype", target]].assign(**{f"pred_{target}": pred})
    return register(uri, reg.name, reg.alias, metrics["all"], split=split, heldout=heldout, target=target,
                    select_metric=reg.select_metric, model_name=reg.model)
