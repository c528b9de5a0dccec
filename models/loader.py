"""The lean loader: a logged cost model from its own artifacts, with no MLflow import on the way when it can.

``mlflow.pyfunc.load_model`` imports MLflow (and, through it, a web framework and an ORM) and queries the store
before it reads a few files; a compiler or a script that calls ``costmodel predict`` once per question pays that
every time. The files are all a cost model needs: ``MLmodel`` names the artifacts ``models.pyfunc.write_artifacts``
wrote (the registry, the meta, the fitted model), and :class:`models.serving.Predictor` serves them, the same code
``CostModelPyfunc`` runs, so the numbers are the same.

**Resolving a URI** (:func:`resolve`): a local folder is read in place. A ``models:/`` or ``runs:/`` URI is resolved
by MLflow once and its files are copied into a local cache (:func:`cache_dir`: ``$COSTMODEL_CACHE_DIR``, else
``$XDG_CACHE_HOME/costmodel``, else ``~/.cache/costmodel``), keyed by the store and the URI. The entry is used again
while the store says nothing changed:

* a sqlite store: the database file's size, modification time and the change counter SQLite writes into its header
  on every committed write (its write-ahead log's size and time too, where there is one). Registering a version or
  moving an alias writes the database, so the next call resolves again; reading it does not;
* a tracking server (``http(s)://``): the version an alias points to, asked with one request of the registry's REST
  API (no MLflow import), and a version's or a run's files are immutable. A server that needs credentials
  (``MLFLOW_TRACKING_TOKEN`` / ``MLFLOW_TRACKING_USERNAME``) is resolved by MLflow each time;
* any other store: resolved by MLflow each time.

**Loading** (:func:`load`): a model whose ``MLmodel`` names the three artifacts of the serving class becomes a
:class:`LeanModel`; anything else (another pyfunc) is loaded by ``models.api.load_pyfunc``. Either way the result has
``predict(frame)``, ``unwrap_python_model()`` (whose ``meta`` / ``registry`` / ``encoder`` / ``model`` the CLI reads)
and ``metadata.get_input_schema()``; a lean model's ``predict`` raises ``FeatureError`` on bad input, where the
MLflow one raises its one-line ``MlflowException``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import platform
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger("costmodel")
SERVING_ARTIFACTS = {"hardware", "meta", "model"}  # models.pyfunc.write_artifacts
CACHE_FILE = "resolved.json"
CREDENTIALS = ("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")


def cache_dir() -> Path:
    """Where resolved models are kept (module docstring)."""
    if os.environ.get("COSTMODEL_CACHE_DIR"):
        return Path(os.environ["COSTMODEL_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "costmodel"


def _is_registry_uri(uri: str) -> bool:
    return uri.split(":", 1)[0] in ("models", "runs")


def _file_stamp(path: Path) -> list | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def sqlite_stamp(path: Path) -> list | None:
    """What changes whenever a sqlite database is written (module docstring); None if it cannot be read."""
    stamp = _file_stamp(path)
    if stamp is None:
        return None
    try:
        with open(path, "rb") as f:
            header = f.read(100)
    except OSError:
        return None
    counter = header[24:28].hex() if len(header) >= 28 else ""
    return [*stamp, counter, _file_stamp(Path(f"{path}-wal"))]


def _http_get(url: str, timeout: float = 5.0) -> dict | None:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - the user's own tracking server
            return json.loads(r.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _server_stamp(tracking_uri: str, uri: str) -> list | None:
    """The immutable identity of what ``uri`` names on a tracking server; None when it cannot be asked."""
    from urllib.parse import quote

    if any(os.environ.get(k) for k in CREDENTIALS):
        return None
    if uri.startswith("runs:/"):
        return ["run", uri]
    rest = uri.removeprefix("models:/")
    base = tracking_uri.rstrip("/") + "/api/2.0/mlflow"
    if "@" in rest:
        name, alias = rest.split("@", 1)
        doc = _http_get(f"{base}/registered-models/alias?name={quote(name)}&alias={quote(alias)}")
    elif "/" in rest and rest.rsplit("/", 1)[1].isdigit():
        name, version = rest.rsplit("/", 1)
        doc = _http_get(f"{base}/model-versions/get?name={quote(name)}&version={version}")
    else:  # models:/<name>/latest and other forms: resolved each time
        return None
    mv = (doc or {}).get("model_version") or {}
    if not mv.get("version"):
        return None
    return ["version", mv.get("name"), str(mv["version"]), mv.get("run_id"), mv.get("creation_timestamp")]


def store_stamp(tracking_uri: str | None, uri: str) -> list | None:
    """What identifies the resolution of ``uri`` in the store (module docstring); None: no cache for this store."""
    from models.api import sqlite_path

    if not tracking_uri:
        return None
    path = sqlite_path(tracking_uri)
    if path is not None:
        return sqlite_stamp(path)
    if tracking_uri.startswith(("http://", "https://")):
        return _server_stamp(tracking_uri, uri)
    return None


def _key(tracking_uri: str, uri: str) -> str:
    """The cache entry of ``uri`` in a store: a sqlite store by its file's absolute path (a relative URI names
    another file from another folder)."""
    from models.api import sqlite_path

    path = sqlite_path(tracking_uri)
    store = f"sqlite:///{path.resolve()}" if path is not None else tracking_uri
    digest = hashlib.sha256(f"{store}\n{uri}".encode()).digest()
    return base64.b32encode(digest).decode().rstrip("=").lower()[:26]


def _read_cache(directory: Path) -> dict:
    try:
        return json.loads((directory / CACHE_FILE).read_text())
    except (OSError, ValueError):
        return {}


def _write_cache(directory: Path, entries: dict) -> None:
    tmp = directory / f".{CACHE_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(entries, indent=1, sort_keys=True))
    os.replace(tmp, directory / CACHE_FILE)


@dataclass
class Resolved:
    path: Path  # the model's local folder (MLmodel inside)
    cached: bool  # True: found in the cache without asking MLflow


def _download(uri: str, tracking_uri: str | None, dest: Path) -> Path:
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    import mlflow

    if tracking_uri:
        mlflow.set_tracking_uri(tracking_uri)
        mlflow.set_registry_uri(tracking_uri)
    return Path(mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=str(dest)))


def resolve(uri: str, tracking_uri: str | None = None) -> Resolved:
    """The local folder of model ``uri`` (module docstring); MLflow's errors propagate."""
    if not _is_registry_uri(uri):
        local = Path(uri.removeprefix("file://")) if uri.startswith("file://") else Path(uri)
        if (local / "MLmodel").is_file():
            return Resolved(local, False)
        return Resolved(_download(uri, tracking_uri, Path(tempfile.mkdtemp(prefix="costmodel-"))), False)
    stamp = store_stamp(tracking_uri, uri)
    if stamp is None:
        return Resolved(_download(uri, tracking_uri, Path(tempfile.mkdtemp(prefix="costmodel-"))), False)
    directory = cache_dir()
    key = _key(tracking_uri, uri)
    entry = _read_cache(directory).get(key)
    if entry and entry.get("stamp") == stamp and (Path(entry["path"]) / "MLmodel").is_file():
        return Resolved(Path(entry["path"]), True)
    from filelock import FileLock

    directory.mkdir(parents=True, exist_ok=True)
    with FileLock(str(directory / f"{CACHE_FILE}.lock"), timeout=300):
        entries = _read_cache(directory)
        entry = entries.get(key)
        if entry and entry.get("stamp") == stamp and (Path(entry["path"]) / "MLmodel").is_file():
            return Resolved(Path(entry["path"]), True)  # another process resolved it meanwhile
        dest = directory / "models" / f"{key}-{time.time_ns():x}"
        dest.mkdir(parents=True)
        local = _download(uri, tracking_uri, dest)
        after = store_stamp(tracking_uri, uri)  # a store the download itself wrote (e.g. created tables) is read now
        entries[key] = {"uri": uri, "tracking_uri": tracking_uri, "stamp": after, "path": str(local)}
        _write_cache(directory, entries)
        old = _entry_root(directory, Path(entry["path"])) if entry else None
        if old is not None and old != dest.resolve():
            shutil.rmtree(old, ignore_errors=True)  # the files of what the URI named before
    return Resolved(local, False)


def _entry_root(directory: Path, path: Path) -> Path | None:
    """The cache folder (``models/<key>-<time>``) an entry's model folder lies in; None outside the cache."""
    models = (directory / "models").resolve()
    for parent in (path.resolve(), *path.resolve().parents):
        if parent.parent == models:
            return parent
    return None


class _Metadata:
    """The part of MLflow's model metadata the CLI reads: the signature's input column names."""

    def __init__(self, mlmodel: dict):
        self.mlmodel = mlmodel
        self.flavors = mlmodel.get("flavors", {})

    def get_input_schema(self):
        inputs = (self.mlmodel.get("signature") or {}).get("inputs")
        if not inputs:
            return None
        names = [c.get("name") for c in json.loads(inputs)]
        return _Schema(names)


class _Schema:
    def __init__(self, names: list[str]):
        self._names = names

    def input_names(self) -> list[str]:
        return list(self._names)


class LeanModel:
    """A served cost model loaded from its folder by :class:`models.serving.Predictor` alone."""

    def __init__(self, predictor, metadata: _Metadata, path: Path):
        self.predictor = predictor
        self.metadata = metadata
        self.path = path

    def predict(self, frame):
        return self.predictor.predict(frame)

    def unwrap_python_model(self):
        return self.predictor


def _mlmodel(path: Path) -> dict | None:
    import yaml

    try:
        return yaml.safe_load((path / "MLmodel").read_text())
    except (OSError, yaml.YAMLError):
        return None


def lean_artifacts(path: Path) -> dict[str, Path] | None:
    """The serving artifacts of the model in ``path`` (name -> local path), or None if it is not one the serving
    class wrote."""
    mlmodel = _mlmodel(path)
    pyfunc = ((mlmodel or {}).get("flavors") or {}).get("python_function") or {}
    artifacts = pyfunc.get("artifacts") or {}
    if set(artifacts) != SERVING_ARTIFACTS or pyfunc.get("loader_module") != "mlflow.pyfunc.model":
        return None
    out = {name: path / spec["path"] for name, spec in artifacts.items() if isinstance(spec, dict) and "path" in spec}
    return out if len(out) == len(SERVING_ARTIFACTS) and all(p.exists() for p in out.values()) else None


def load(uri: str, tracking_uri: str | None = None, hardware=None, lean: bool = True):
    """Load model ``uri`` (module docstring); ``hardware``: specs to add to its registry (``models.specs.as_specs``:
    spec files, folders, mappings). Returns a :class:`LeanModel`, or MLflow's pyfunc for a model the serving class
    did not write or with ``lean=False`` (what MLflow's scoring server takes)."""
    from models.api import requirement_mismatches

    resolved = resolve(uri, tracking_uri)
    artifacts = lean_artifacts(resolved.path) if lean else None
    if artifacts is None:
        from models.api import load_pyfunc

        model = load_pyfunc(str(resolved.path))
        if hardware:
            model.unwrap_python_model().with_hardware(hardware)
        return model
    from models.serving import Predictor

    mismatched = requirement_mismatches(resolved.path)
    if mismatched:
        logger.warning(
            "model %s was logged with requirements this environment does not meet: %s", uri, "; ".join(mismatched)
        )
    metadata = _Metadata(_mlmodel(resolved.path) or {})
    logged = str(metadata.flavors.get("python_function", {}).get("python_version") or "")
    if logged and logged.split(".")[:2] != platform.python_version().split(".")[:2]:
        logger.warning("model %s was logged with Python %s, this is Python %s", uri, logged, platform.python_version())
    predictor = Predictor.from_artifacts(artifacts["hardware"], artifacts["meta"], artifacts["model"])
    if hardware:
        predictor.with_hardware(hardware)
    return LeanModel(predictor, metadata, resolved.path)
