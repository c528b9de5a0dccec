"""Python API for other tools: ask a registered cost model for costs without knowing how it was trained.

    >>> from models.api import load_cost_model
    >>> cm = load_cost_model("models:/costmodel-runtime@champion", tracking_uri="sqlite:///outputs/mlflow.db")
    >>> cm.predict([{"op": "matmul", "m": 4096, "n": 4096, "k": 4096, "dtype": "float16", "hardware": "H100-SXM"}])
       runtime_ms  runtime_ms_lo  runtime_ms_hi

Whole-network models load the same way; their rows are networks (``mlir`` module text + ``hardware``):

    >>> net = load_cost_model("models:/costmodel-network-runtime@champion")
    >>> net.predict({"mlir": open("net.mlir").read(), "hardware": "cpu-amd-epyc-1t"})

A thin layer over ``mlflow.pyfunc.load_model`` (which gives the same numbers; :func:`load_pyfunc`): it accepts
records as well as a DataFrame and exposes the interval level. Bad workloads raise ``ValueError`` with the model's
one-line message. Reading never creates a store: a ``tracking_uri`` naming a sqlite file that does not exist is a
``ValueError`` (:func:`existing_store`), where MLflow would create an empty database there. A model with a domain of
validity (``has_domain``, e.g. the physics model) adds ``in_domain`` (bool), ``domain_distance`` (0 inside) and
``domain_reason`` per row: outside, the interval is widened with the distance (``models.domain``).

A GPU the model was not trained with is one spec away: ``load_cost_model(uri, hardware=["b200.yaml"])`` (or
:meth:`CostModelClient.add_hardware`, or a ``hardware_spec`` column in the rows: ``models.specs``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///<path>`` URI (relative to the working folder with three slashes,
    absolute with four), None for any other store (and for an in-memory ``sqlite://``)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri.removeprefix("sqlite:///").split("?", 1)[0]
    return Path(path) if path else None


def is_mlflow_error(exc: BaseException) -> bool:
    """An MLflow exception, told apart without importing MLflow (the lean loader's path never does)."""
    return any(c.__name__ == "MlflowException" and c.__module__.startswith("mlflow") for c in type(exc).__mro__)


def existing_store(uri: str) -> str:
    """``uri`` if it names a store that exists; a sqlite file that does not exist (a mistyped path) is a
    ``ValueError`` naming it, instead of MLflow creating an empty database and its folders. Servers and other
    stores are not checked here (their errors come when they are read)."""
    path = sqlite_path(uri)
    if path is not None and not path.is_file():
        shown = str(path) if len(str(path)) <= 160 else str(path)[:160] + "..."
        raise ValueError(f"no MLflow store at {shown} (sqlite file not found; a training run creates it)")
    if uri.startswith("file:") or "://" not in uri and not uri.startswith("databricks"):
        folder = Path(uri.removeprefix("file://") if uri.startswith("file://") else uri.removeprefix("file:"))
        if not folder.is_dir():
            raise ValueError(f"no MLflow store at {str(folder)[:160]} (folder not found)")
    return uri


logger = logging.getLogger("costmodel")


def requirement_mismatches(model_dir: str | Path) -> list[str]:
    """The pinned requirements of a logged model (its ``requirements.txt``) that this environment does not satisfy,
    one ``"<requirement> (installed: <version or none>)"`` each.

    What MLflow's own load-time check reports, at a fraction of its cost: MLflow maps every installed distribution
    to its modules first (``packages_distributions``, 2-4 s per process on this project's environment, most of a
    ``costmodel predict``'s model load), where a pinned requirement needs only its own distribution's version."""
    from importlib import metadata

    from packaging.requirements import InvalidRequirement, Requirement

    path = Path(model_dir) / "requirements.txt"
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement:  # a path or URL: not checkable by name
            continue
        if req.marker is not None and not req.marker.evaluate():
            continue
        try:
            have = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            out.append(f"{line} (installed: none)")
            continue
        if req.specifier and not req.specifier.contains(have, prereleases=True):
            out.append(f"{line} (installed: {have})")
    return out


def load_pyfunc(uri: str):
    """``mlflow.pyfunc.load_model(uri)`` with :func:`requirement_mismatches` in place of MLflow's slower check,
    and MLflow's Python version check (another major.minor than the one that logged the model): each a warning on
    the ``costmodel`` logger. MLflow's errors propagate."""
    import platform

    import mlflow

    local = mlflow.artifacts.download_artifacts(artifact_uri=uri)  # a local folder stays where it is
    model = mlflow.pyfunc.load_model(local, suppress_warnings=True)
    mismatched = requirement_mismatches(local)
    if mismatched:
        logger.warning(
            "model %s was logged with requirements this environment does not meet: %s", uri, "; ".join(mismatched)
        )
    logged = str(model.metadata.flavors.get("python_function", {}).get("python_version") or "")
    if logged and logged.split(".")[:2] != platform.python_version().split(".")[:2]:
        logger.warning("model %s was logged with Python %s, this is Python %s", uri, logged, platform.python_version())
    return model


class CostModelClient:
    def __init__(self, pyfunc_model, uri: str):
        self.pyfunc = pyfunc_model
        self.uri = uri
        inner = pyfunc_model.unwrap_python_model()
        self.meta: dict = dict(getattr(inner, "meta", {}))

    @property
    def target(self) -> str:
        """The target's name (``runtime_ms``, ``peak_mem_bytes``, ``power``: see ``columns``)."""
        return self.meta.get("target", {}).get("name", "runtime_ms")

    @property
    def columns(self) -> list[str]:
        """The predicted columns (each with ``_lo`` / ``_hi``), e.g. runtime_ms, power_w, energy_j."""
        return list(self.meta.get("target", {}).get("columns", [self.target]))

    @property
    def has_domain(self) -> bool:
        """Whether predictions carry ``in_domain`` / ``domain_distance`` / ``domain_reason``."""
        return bool(self.meta.get("domain"))

    @property
    def interval_level(self) -> float | None:
        return self.meta.get("level")

    def add_hardware(self, specs) -> CostModelClient:
        """Add GPUs the model was not trained with: spec files or folders of them (``conf/hardware/<id>.yaml``'s
        fields), mappings of those fields, or ``HardwareSpec`` objects (``models.specs.as_specs``). The model
        predicts them from their numbers; ``in_domain`` / ``domain_distance`` say how far they are from the trained
        hardware. A bad spec is a ``ValueError`` naming it."""
        inner = self.pyfunc.unwrap_python_model()
        if not hasattr(inner, "with_hardware"):
            raise ValueError(f"model {self.uri!r} was logged before specs could be added at prediction time")
        inner.with_hardware(specs)
        return self

    def predict(self, workloads: pd.DataFrame | Iterable[Mapping] | Mapping) -> pd.DataFrame:
        """Point prediction and interval per workload and column: ``<column>``, ``<column>_lo``, ``<column>_hi``."""
        import pandas as pd
        from mlflow.exceptions import MlflowException

        from models.pyfunc import INPUT_ERROR_PREFIX

        if isinstance(workloads, Mapping):
            workloads = [workloads]
        frame = workloads if isinstance(workloads, pd.DataFrame) else pd.DataFrame(list(workloads))
        try:
            return self.pyfunc.predict(frame)
        except MlflowException as exc:
            raise ValueError(exc.message.removeprefix(INPUT_ERROR_PREFIX)) from None

    def __repr__(self) -> str:
        return f"CostModelClient({self.uri!r}, target={self.target!r}, interval_level={self.interval_level})"


def load_cost_model(uri: str, tracking_uri: str | None = None, hardware=None) -> CostModelClient:
    """Load a logged or registered cost model (``models:/name@alias``, ``runs:/...``, a local path).

    ``tracking_uri`` is set as MLflow's process-wide tracking and registry URI (as ``mlflow.set_tracking_uri``);
    it must exist (:func:`existing_store`). ``hardware``: GPUs the model was not trained with, added to its registry
    (:meth:`CostModelClient.add_hardware`).
    """
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    import mlflow

    if tracking_uri:
        existing_store(tracking_uri)
        mlflow.set_tracking_uri(tracking_uri)
        mlflow.set_registry_uri(tracking_uri)
    client = CostModelClient(load_pyfunc(uri), uri)
    if hardware:
        client.add_hardware(hardware)
    return client
