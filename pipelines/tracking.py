"""MLflow tracking and registry: it only logs and registers. One run per model (:func:`log_run`: params, metrics
``<split>/<scope>/<metric>``, ``eval/`` files, the served pyfunc), and the ``champion`` alias lifecycle.

Registry lifecycle (:func:`register`): every training run registers its best model as a new version;
the version carries its held-out metrics (``test_<metric>``) and the identity of the held-out split
(``split_name``, ``split_seed``, ``split_test_size``, ``dataset_sha256``, ``heldout_shapes_sha256``) as
tags. The alias (``champion``) moves to the new version only if it is better than the current champion *on the
same held-out rows*, beyond the spread of those rows: a paired bootstrap of both models' predictions of the same
rows, resampling held-out shapes (:func:`compare_rows`, ``models.compare``; :data:`PROMOTION`, a job's
``register.promotion``). The champion's predictions of the rows:

* same split identity (all five tags equal): its own stored held-out predictions (its run's
  ``eval/heldout_predictions.csv``, paired by :func:`row_keys`);
* otherwise the champion is loaded from the registry and re-evaluated on this run's held-out rows, and
  both are compared there (on the rows the champion can featurize, e.g. hardware it knows), less the rows the
  champion was trained on: each run keeps its registered fit's training rows as keys
  (``eval/training_keys.npy``, :func:`row_keys` of the rows as served). A champion trained on another split or
  sample has seen some of this run's held-out rows, and scored on them it would look better than it is. A champion
  logged without the keys is compared on every row, which favours it.

A caller with no held-out rows (``heldout=None``) compares the stored ``test_<metric>`` tags of the same split.

The decision and the numbers it used are stored as tags on the new version (``champion_decision``: both values, the
difference with its bootstrap interval and the verdict; ``champion_compared_on``, ``champion_<metric>``,
``champion_<metric>_difference``) and :func:`list_versions` shows them.

Concurrency: several jobs may share one store. Creating a store (its tables, the experiment) and moving the alias
are serialised by a lock (:func:`store_lock`: a file lock beside a sqlite file, released by the OS if its holder dies;
:func:`registry_lock` on a tracking server: a lock entry in the registry itself, whose creation is atomic). Under the
lock the promotion re-reads the champion, compares against *that* version and moves the alias: a compare-and-set, so
no version takes the alias without having been compared with the one it replaces.

Only a champion that cannot be loaded (its files or code are gone or broken) or cannot featurize any held-out row
loses its alias without a comparison (:class:`ChampionUnusable`); any other error (a locked database, a timeout, a
server error) fails the registration loudly and leaves the alias where it was.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import random
import re
import socket
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

from models.api import load_pyfunc
from models.base import CostModel
from models.compare import paired_difference
from models.evaluate import regression_metrics

# direction of each selectable held-out metric
LOWER_IS_BETTER = {"mape": True, "medape": True, "r2_log": False, "kendall_tau": False}
SPLIT_TAGS = ("split_name", "split_seed", "split_test_size", "dataset_sha256", "heldout_shapes_sha256")
TRAIN_KEYS_FILE = "training_keys.npy"  # in a run's eval/ artifacts: its registered fit's training rows (row_keys)
HELDOUT_FILE = "heldout_predictions.csv"  # in a run's eval/ artifacts: its registered fit's held-out predictions
# the champion rule's paired comparison (models.compare): the challenger better on at least `level` of `resamples`
# bootstrap resamples of the held-out shapes, and by more than `margin` x the champion's value
PROMOTION = {"level": 0.95, "resamples": 1000, "margin": 0.0, "seed": 0}


def tracking_uri(configured: str | None, output_dir: Path) -> str:
    """The configured URI, or the embedded default: a sqlite file under the output folder."""
    return configured or f"sqlite:///{(output_dir / 'mlflow.db').resolve()}"


def setup(cfg_mlflow: DictConfig, output_dir: Path) -> str:
    """Point MLflow at the job's store and experiment; a new store (its tables) and the experiment are created under
    :func:`store_lock`, so jobs starting together on a fresh store neither race the schema migration nor the
    experiment's creation. Only training calls this: readers refuse a store that does not exist
    (``models.api.existing_store``)."""
    uri = tracking_uri(cfg_mlflow.tracking_uri, output_dir)
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    # keep artifacts of the embedded store beside it; a server decides its own artifact root
    location = (output_dir / "mlartifacts").resolve().as_uri() if uri.startswith("sqlite:") else None
    with store_lock(uri):
        client = MlflowClient(tracking_uri=uri, registry_uri=uri)
        experiment_id = _experiment(client, cfg_mlflow.experiment, location)
        client.search_registered_models(max_results=1)  # the registry's tables too, while the lock is held
    mlflow.set_experiment(experiment_id=experiment_id)
    return uri


def use_experiment(name: str) -> str:
    """Set experiment ``name`` (created under :func:`store_lock` if missing) on the store MLflow already points at,
    for a job that writes into an existing store (``costmodel calibrate``); an embedded sqlite store keeps its
    artifacts beside it (``<folder of the file>/mlartifacts``), as :func:`setup` does."""
    from models.api import sqlite_path

    uri = mlflow.get_tracking_uri()
    path = sqlite_path(uri)
    location = (path.resolve().parent / "mlartifacts").as_uri() if path is not None else None
    with store_lock(uri):
        experiment_id = _experiment(MlflowClient(tracking_uri=uri), name, location)
    mlflow.set_experiment(experiment_id=experiment_id)
    return experiment_id


def _experiment(client: MlflowClient, name: str, location: str | None) -> str:
    """The id of experiment ``name``, created if missing (on a server another job may create it first)."""
    found = client.get_experiment_by_name(name)  # on a new sqlite file this creates the store's tables
    if found is not None:
        return found.experiment_id
    try:
        return client.create_experiment(name, artifact_location=location)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
        return client.get_experiment_by_name(name).experiment_id


LOCK_TIMEOUT_S = 900.0  # how long a job waits for another job's registration (a re-score takes seconds)
LOCK_STALE_S = 600.0  # a registry lock unchanged this long is a dead job's: broken


class RegistryBusy(RuntimeError):
    """The lock of a store or registered model stayed held past the timeout."""


def store_lock(uri: str, timeout_s: float = LOCK_TIMEOUT_S):
    """A file lock beside a sqlite store (``<file>.lock``; its parent folder is created): serialises the store's
    creation and its alias moves across processes. Other stores: no lock here (:func:`registry_lock` guards
    promotions; a server creates its own tables)."""
    from filelock import FileLock, Timeout

    from models.api import sqlite_path

    path = sqlite_path(uri)
    if path is None:
        return contextlib.nullcontext()
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(f"{path}.lock", timeout=timeout_s)

    @contextlib.contextmanager
    def held():
        try:
            lock.acquire()
        except Timeout:
            raise RegistryBusy(f"{path}.lock held by another job for more than {timeout_s:.0f} s") from None
        try:
            yield
        finally:
            lock.release()

    return held()


@contextlib.contextmanager
def registry_lock(
    client: MlflowClient,
    name: str,
    timeout_s: float = LOCK_TIMEOUT_S,
    stale_s: float = LOCK_STALE_S,
    poll_s: float = 0.2,
):
    """A mutex held in the registry: the registered model ``<name>.lock`` (creating a name is atomic on every
    backend; a second creation fails with RESOURCE_ALREADY_EXISTS). Its tags say who holds it. A lock that stays
    the same entry for ``stale_s`` seconds of this job's waiting is a dead job's and is broken (timed on this
    machine's clock, so server clock skew does not matter); after ``timeout_s`` seconds :class:`RegistryBusy`."""
    lock = f"{name}.lock"
    owner = f"{socket.gethostname()}:{os.getpid()}:{time.time():.6f}"
    start, seen = time.monotonic(), {}
    while True:
        try:
            client.create_registered_model(
                lock, tags={"owner": owner}, description=f"held while a job moves an alias of {name}; see tracking.py"
            )
            break
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        try:
            held = client.get_registered_model(lock)
        except MlflowException as exc:
            if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
                continue  # released meanwhile
            raise
        since = seen.setdefault(held.creation_timestamp, time.monotonic())
        if time.monotonic() - since > stale_s:
            with contextlib.suppress(MlflowException):  # another waiter may break it first
                client.delete_registered_model(lock)
            continue
        if time.monotonic() - start > timeout_s:
            raise RegistryBusy(
                f"registry lock {lock!r} held by {held.tags.get('owner', '?')} for more than "
                f"{timeout_s:.0f} s (delete that registered model if its job died)"
            )
        time.sleep(poll_s * (1 + random.random()))
    try:
        yield
    finally:
        with contextlib.suppress(MlflowException):
            if client.get_registered_model(lock).tags.get("owner") == owner:
                client.delete_registered_model(lock)


def champion_lock(client: MlflowClient, name: str, uri: str):
    """What serialises the alias moves of ``name``: the store's file lock (sqlite) or the registry lock."""
    from models.api import sqlite_path

    return store_lock(uri) if sqlite_path(uri) is not None else registry_lock(client, name)


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
    return (
        f"{model}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, python {platform.python_version()}"
    )


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
    return {
        "sweep_trial": str(hc.job.num),
        "sweep_dir": str(hc.sweep.dir),
        "sweep_overrides": " ".join(hc.overrides.task)[:5000],
        "mlflow.runName": f"{name}-trial{hc.job.num}",
    }


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


def log_run(
    name: str,
    *,
    metrics: dict[str, float],
    params: dict,
    tags: dict,
    files=None,
    dataset: dict | None = None,
    served: Served | None = None,
) -> Logged:
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
            mlflow.log_input(
                mlflow.data.from_pandas(
                    dataset["rows"], source=dataset["source"], name="measurements", digest=dataset["digest"][:36]
                ),
                context="training",
            )
        metrics = dict(metrics)
        if files is not None:
            (tmp / "eval").mkdir()
            more, paths = files(tmp / "eval")
            metrics.update(more)
            for f in paths:
                mlflow.log_artifact(str(f), artifact_path="eval")
        if served is None:
            _log_batch(run.info.run_id, metrics)
            return Logged(run.info.run_id)
        artifacts = write_artifacts(tmp / "pyfunc", served.model, served.registry, served.meta)
        info = mlflow.pyfunc.log_model(
            name="model",
            python_model=CostModelPyfunc(),
            artifacts=artifacts,
            code_paths=code_paths(tmp / "code"),
            signature=signature(served.meta),
            input_example=served.input_example,
            pip_requirements=pip_requirements(),
        )
        # the metrics after the model, linked to it as they are logged: logged before it, MLflow would link them by
        # reading each one's history back (one request per metric: ~10 s of a tiny job on a tracking server)
        _log_batch(run.info.run_id, metrics, model_id=info.model_id)
        mlflow.set_tag("model_uri", info.model_uri)
        return Logged(run.info.run_id, f"runs:/{run.info.run_id}/model" if info.model_uri is None else info.model_uri)


def _log_batch(run_id: str, metrics: dict[str, float], model_id: str | None = None) -> None:
    stamp = int(time.time() * 1000)
    batch = [
        mlflow.entities.Metric(_metric_key(k), float(v), stamp, 0, model_id=model_id)
        for k, v in metrics.items()
        if v is not None
    ]
    for i in range(0, len(batch), 900):  # MLflow's batch limit is 1000 metrics
        mlflow.MlflowClient().log_batch(run_id, metrics=batch[i : i + 900])


def log_metrics(run_id: str, metrics: dict[str, float]) -> None:
    """Add metrics to a finished run (e.g. a sweep's objective, known once every model is scored)."""
    _log_batch(run_id, metrics)


def split_identity(name: str, seed: int, test_size: float, dataset_digest: str, heldout_shape_ids) -> dict[str, str]:
    """What makes two held-out evaluations comparable: the split rule, its inputs, and the rows it held out."""
    shapes = "\n".join(sorted({str(s) for s in heldout_shape_ids}))
    return {
        "split_name": str(name),
        "split_seed": str(seed),
        "split_test_size": str(test_size),
        "dataset_sha256": dataset_digest,
        "heldout_shapes_sha256": hashlib.sha256(shapes.encode()).hexdigest(),
    }


@dataclass
class Decision:
    version: str
    promoted: bool
    reason: str
    previous: str | None  # the champion's version before this run, if any


def _better(metric: str, new: float, old: float) -> bool:
    return new < old if LOWER_IS_BETTER.get(metric, True) else new > old


class ChampionUnusable(Exception):
    """The champion cannot be loaded (its files or code are gone or broken) or cannot featurize any held-out row:
    it cannot defend its alias. The one error that promotes a challenger without a comparison."""


def _gone(exc: BaseException) -> bool:
    """A download error that says the files do not exist (not that the store could not be reached)."""
    if isinstance(exc, FileNotFoundError):
        return True
    if isinstance(exc, MlflowException):
        return exc.error_code == "RESOURCE_DOES_NOT_EXIST"
    response = getattr(exc, "response", None)  # requests.HTTPError of an artifact server
    return getattr(response, "status_code", None) == 404


def _load_champion(uri: str):
    """Download the champion (store / network I/O: errors other than "not found" propagate), then load it from the
    local copy (no I/O left: any failure there is the model's own)."""
    try:
        local = mlflow.artifacts.download_artifacts(artifact_uri=uri)
    except Exception as exc:
        if _gone(exc):
            raise ChampionUnusable(f"cannot be loaded, its files are gone ({_line(exc)})") from exc
        raise
    try:
        return load_pyfunc(local)
    except MemoryError:
        raise
    except Exception as exc:  # its code or format cannot be loaded by this version of the project
        raise ChampionUnusable(f"cannot be loaded ({_line(exc)})") from exc


def _line(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:limit]}" + ("..." if len(text) > limit else "")


def _refused(exc: BaseException) -> bool:
    """The champion refused rows it cannot featurize (its one-line input error, MLflow's schema check, or an
    older featurizer's ValueError), as opposed to a fault of the machinery."""
    if isinstance(exc, MlflowException):
        return exc.error_code in ("INVALID_PARAMETER_VALUE", "BAD_REQUEST")
    return isinstance(exc, ValueError)


def row_keys(frame: pd.DataFrame) -> np.ndarray:
    """One 64-bit key per row of served workload descriptions, the same for the same workload whatever the frame's
    column order or dtypes (a CSV round trip, an integer read back as a float): every column, by name, each value
    as text (numbers to 10 significant digits, missing values empty)."""

    def text(v) -> str:
        if v is None or (not isinstance(v, str) and pd.isna(v)):
            return ""
        if isinstance(v, (bool, np.bool_, str)):
            return str(v)
        return format(float(v), ".10g") if isinstance(v, (int, float, np.integer, np.floating)) else str(v)

    cols = sorted(frame.columns)
    lines = ["|".join(f"{c}={text(v)}" for c, v in zip(cols, row)) for row in frame[cols].itertuples(index=False)]
    return pd.util.hash_array(np.asarray(lines, dtype=object))


def _champion_train_keys(run_id: str | None) -> np.ndarray | None:
    """The champion run's training keys (``eval/training_keys.npy``), None for a run logged before them; a store
    error propagates."""
    if not run_id:
        return None
    client = MlflowClient()
    if TRAIN_KEYS_FILE not in {Path(a.path).name for a in client.list_artifacts(run_id, "eval")}:
        return None
    return np.load(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=f"eval/{TRAIN_KEYS_FILE}"))


def _rescore_champion(
    uri: str, heldout: pd.DataFrame, target: str, metric: str, trained: np.ndarray | None = None
) -> tuple[float, float, int, int]:
    """:func:`_champion_rows` scored: (champion value, challenger value, rows compared, rows left out)."""
    rows, left_out = _champion_rows(uri, heldout, target, trained)
    champ = regression_metrics(rows[target], rows[CHAMPION_PRED])[metric]
    new = regression_metrics(rows[target], rows[f"pred_{target}"])[metric]
    return champ, new, len(rows), left_out


CHAMPION_PRED = "champion_pred"  # the champion's prediction of a compared row (:func:`_champion_rows`)


def _champion_rows(
    uri: str, heldout: pd.DataFrame, target: str, trained: np.ndarray | None = None
) -> tuple[pd.DataFrame, int]:
    """Load the champion and predict the held-out rows it can featurize and was not trained on (``trained``: its
    training keys, :func:`row_keys`).

    ``heldout`` holds workload descriptions, the target and the challenger's ``pred_<target>``.
    Rows are tried per hardware id, so hardware the champion never knew is left out rather than
    failing the whole comparison. Returns (the compared rows with the champion's prediction as
    :data:`CHAMPION_PRED`, rows left out as the champion's training rows; every row is compared where it trained on
    all of them). :class:`ChampionUnusable` when it cannot be loaded or featurizes no row; any other error
    propagates.
    """
    champion = _load_champion(uri)
    describe = [c for c in heldout.columns if c not in (target, f"pred_{target}")]
    seen = np.zeros(len(heldout), bool) if trained is None else np.isin(row_keys(heldout[describe]), trained)
    left_out = int(seen.sum()) if not seen.all() else 0
    if left_out:
        heldout = heldout[~seen]
    kept, preds = [], []
    for _, group in heldout.groupby("hardware", sort=True):
        try:
            out = champion.predict(group[describe].reset_index(drop=True))
        except Exception as exc:
            if _refused(exc):
                continue
            raise
        kept.append(group)
        preds.append(np.asarray(out[target], dtype=float))
    if not kept:
        raise ChampionUnusable("cannot featurize any held-out row (no hardware in common)")
    return pd.concat(kept).assign(**{CHAMPION_PRED: np.concatenate(preds)}), left_out


def _stored_rows(run_id: str | None, heldout: pd.DataFrame, target: str) -> pd.DataFrame | None:
    """The challenger's held-out rows with the champion's own stored predictions of them (its run's
    ``eval/heldout_predictions.csv``, paired by :func:`row_keys`), where the champion was scored on the same rows;
    None where it has no such file or its rows are not these."""
    if not run_id:
        return None
    client = MlflowClient()
    if HELDOUT_FILE not in {Path(a.path).name for a in client.list_artifacts(run_id, "eval")}:
        return None
    stored = pd.read_csv(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=f"eval/{HELDOUT_FILE}"))
    describe = [c for c in heldout.columns if c not in (target, f"pred_{target}")]
    if f"pred_{target}" not in stored.columns or not set(describe) <= set(stored.columns):
        return None
    if len(stored) != len(heldout):
        return None
    keys, ours = row_keys(stored[describe]), row_keys(heldout[describe])
    preds = stored[f"pred_{target}"].to_numpy(float)
    if not (keys == ours).all():  # the same rows in another order: paired by key where every key is one row's
        theirs = pd.Series(preds, index=keys)
        if theirs.index.has_duplicates or not np.isin(ours, keys).all():
            return None
        preds = theirs.loc[ours].to_numpy()
    return heldout.assign(**{CHAMPION_PRED: preds})


def _champion(client: MlflowClient, name: str, alias: str):
    """The version holding ``alias`` now (None if no version does); a store error propagates."""
    version = client.get_registered_model(name).aliases.get(alias)
    return None if version is None else client.get_model_version(name, str(version))


def register(
    model_uri: str,
    name: str,
    alias: str,
    metrics: dict[str, float],
    *,
    split: dict[str, str],
    heldout: pd.DataFrame,
    target: str,
    select_metric: str,
    model_name: str = "",
    promotion: dict | None = None,
) -> Decision:
    """Register ``model_uri`` as a new version of ``name``; move ``alias`` only if it beats the champion.

    ``metrics`` are the held-out metrics over all hardware, ``split`` the split identity
    (:func:`split_identity`), ``heldout`` this run's held-out rows with the challenger's predictions, ``promotion``
    the paired comparison's options (:data:`PROMOTION`; ``register.promotion`` in a job's config).
    The comparison and the alias move happen under :func:`champion_lock`, against the champion of that moment.
    """
    client = MlflowClient()
    tags = (
        {f"test_{k}": f"{v:.6g}" for k, v in metrics.items()}
        | split
        | {"select_metric": select_metric, "model": model_name}
    )
    version = mlflow.register_model(model_uri, name, tags=tags).version
    with champion_lock(client, name, mlflow.get_registry_uri()):
        current = _champion(client, name, alias)
        try:
            promoted, reason, compared = _decide(
                current, metrics[select_metric], name, alias, split, heldout, target, select_metric, promotion
            )
        except Exception as exc:  # not decided: say so on the version (if the store answers), keep the alias
            with contextlib.suppress(Exception):
                client.set_model_version_tag(
                    name, version, "champion_decision", f"not decided, alias @{alias} kept ({_line(exc)})"
                )
            raise
        for key, value in compared.items():
            client.set_model_version_tag(name, version, key, value)
        client.set_model_version_tag(name, version, "champion_decision", reason)
        if promoted:
            client.set_registered_model_alias(name, alias, version)
    return Decision(
        version=version, promoted=promoted, reason=reason, previous=None if current is None else current.version
    )


def compare_rows(rows: pd.DataFrame, target: str, metric: str, promotion: dict | None = None):
    """The paired comparison (``models.compare.paired_difference``) of the challenger's ``pred_<target>`` and the
    champion's :data:`CHAMPION_PRED` on ``rows``, resampling held-out shapes: rows with the same description but
    their hardware (one workload on several GPUs). ``promotion``: :data:`PROMOTION`'s options."""
    describe = [c for c in rows.columns if c not in (target, f"pred_{target}", CHAMPION_PRED, "hardware")]
    options = {**PROMOTION, **(promotion or {})}
    return paired_difference(
        metric,
        rows[target],
        rows[f"pred_{target}"],
        rows[CHAMPION_PRED],
        clusters=row_keys(rows[describe]) if describe else None,
        resamples=int(options["resamples"]),
        level=float(options["level"]),
        margin=float(options["margin"]),
        seed=int(options["seed"]),
    )


def _decide(
    current,
    new_value: float,
    name: str,
    alias: str,
    split: dict,
    heldout: pd.DataFrame | None,
    target: str,
    metric: str,
    promotion: dict | None = None,
) -> tuple[bool, str, dict[str, str]]:
    """(promoted, reason, tags recording the comparison) of a challenger scoring ``new_value`` against ``current``.

    With held-out rows, both models' predictions of the same rows are compared by a paired bootstrap
    (``models.compare``, options ``promotion``: ``level``, ``resamples``, ``margin``, ``seed``): the alias moves only
    if the challenger is better beyond the rows' spread. Without rows (a caller that has only the metric), the
    stored values are compared."""
    if current is None:
        return True, f"first version with alias @{alias}", {}
    same = all(current.tags.get(k) == split[k] for k in SPLIT_TAGS)
    rows = None
    if heldout is None or heldout.empty:
        if not (same and f"test_{metric}" in current.tags):
            raise ValueError("no held-out rows to compare the challenger with a champion scored on another split")
        old_value, how = float(current.tags[f"test_{metric}"]), "stored tags, same held-out split"
        promoted = _better(metric, new_value, old_value)
        reason = f"{metric} {new_value:.4g} vs champion v{current.version} {old_value:.4g} ({how}): " + (
            "promoted" if promoted else "champion kept"
        )
        return promoted, reason, {f"champion_{metric}": f"{old_value:.6g}", "champion_compared_on": how}
    if same:
        rows = _stored_rows(current.run_id, heldout, target)
        how = f"the champion's stored predictions of the same held-out rows (n={len(heldout)})"
    if rows is None:
        trained = _champion_train_keys(current.run_id)
        try:
            rows, left_out = _champion_rows(f"models:/{name}/{current.version}", heldout, target, trained)
        except ChampionUnusable as exc:  # it cannot defend its alias
            return True, f"champion v{current.version} {exc}: promoted", {}
        how = f"champion re-evaluated on this run's held-out rows (n={len(rows)})"
        if left_out:
            how = (
                f"champion re-evaluated on this run's held-out rows it was not trained on "
                f"(n={len(rows)}; {left_out} left out)"
            )
    cmp = compare_rows(rows, target, metric, promotion)
    promoted = cmp.beats()
    verdict = (
        "promoted"
        if promoted
        else "champion kept (not better beyond the run-to-run spread)"
        if _better(metric, cmp.new, cmp.old)
        else "champion kept"
    )
    reason = f"{metric} {cmp.new:.4g} vs champion v{current.version} {cmp.old:.4g} ({how}; {cmp.describe()}): {verdict}"
    return (
        promoted,
        reason,
        {
            f"champion_{metric}": f"{cmp.old:.6g}",
            "champion_compared_on": how,
            f"champion_{metric}_difference": f"{cmp.difference:.6g} [{cmp.lo:.6g}, {cmp.hi:.6g}]",
        },
    )


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
            split = (
                f"{t['split_name']}/seed={t.get('split_seed')}/test={t.get('split_test_size')}/"
                f"{t.get('heldout_shapes_sha256', '')[:8]}"
                if "split_name" in t
                else ""
            )
            rows.append(
                {
                    "name": rm.name,
                    "version": int(mv.version),
                    "aliases": ",".join(sorted(aliases.get(str(mv.version), []))) or "-",
                    "model": t.get("model", ""),
                    **{f"test_{k}": t.get(f"test_{k}", "") for k in ("mape", "medape", "kendall_tau", "coverage90")},
                    "split": split,
                    "decision": t.get("champion_decision", ""),
                }
            )
    cols = [
        "name",
        "version",
        "aliases",
        "model",
        "test_mape",
        "test_medape",
        "test_kendall_tau",
        "test_coverage90",
        "split",
        "decision",
    ]
    return pd.DataFrame(rows, columns=cols).sort_values(["name", "version"], ignore_index=True)
